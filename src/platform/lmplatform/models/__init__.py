"""Encoders, pooling and offline model resolution."""
