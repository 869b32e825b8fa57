"""lmplatform: adapt text encoders to a specialist domain on Ray.

Importing the package changes nothing in the process. The offline/loopback runtime defaults
(`lmplatform.runtime.apply_runtime_defaults`) are applied where they matter: by the `lmp`
command line, when Ray is started or joined (`ray_runtime.ensure_ray`) and in every Train worker.
"""
__version__ = "0.1.0"

__all__ = ["__version__"]
