"""Ray Train: the generic worker loop and the driver that runs it."""
