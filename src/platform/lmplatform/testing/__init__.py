"""Infrastructure for tests and benchmarks, as Ray has `ray.cluster_utils`: `local_cluster.LocalCluster`
starts a real multi-node Ray cluster on one machine; `registered.register_with_index` registers a model version with
its index artifact. Not used by the product's own code paths."""
