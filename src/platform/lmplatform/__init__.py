"""lmplatform: adapt text encoders to a specialist domain on Ray.

Importing the package applies the offline/loopback runtime defaults (see
`lmplatform.runtime`) so that every entry point behaves the same.
"""
from lmplatform.runtime import apply_runtime_defaults

__version__ = "0.1.0"

apply_runtime_defaults()

__all__ = ["__version__", "apply_runtime_defaults"]
