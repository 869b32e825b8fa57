"""Evaluation: retrieval, STS, classification, behavioural tests and forgetting; shared by training, tuning and serving."""
