"""Infrastructure for tests and benchmarks, as Ray has `ray.cluster_utils`: `local_cluster.LocalCluster`
starts a real multi-node Ray cluster on one machine; `registered.register_with_index` registers a model version with
its index artifact. Not used by the product's own code paths."""

from lmplatform.lazy_exports import lazy_exports

# What tools such as the benches may use (tests/test_public_surface.py); every module path below is private.
PUBLIC: dict[str, str] = {
    "register_with_index": "lmplatform.testing.registered",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, PUBLIC)
