"""Multi-stage training pipelines: stages of run_training nested under one MLflow run, resumable."""
