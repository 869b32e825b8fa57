"""Evaluation: retrieval metrics and scenarios (retrieval), STS, classification and behavioural tests."""
