"""Evaluation: metrics, readers and runners shared by training, tuning and serving."""
