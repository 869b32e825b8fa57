"""MLflow tracking: runs, step metrics, model artifacts and the registry."""
