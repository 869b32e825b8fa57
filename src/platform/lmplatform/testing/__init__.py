"""Infrastructure for tests and benchmarks, as Ray has `ray.cluster_utils`: `local_cluster.LocalCluster`
starts a real multi-node Ray cluster on one machine. Not used by the product's own code paths."""
