"""Hyperparameter search: search spaces as data, Ray Tune + Optuna studies, champion registration."""
