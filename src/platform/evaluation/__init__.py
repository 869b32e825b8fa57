"""Evaluations of trained models."""
