"""Corpus reading, cleaning, validation and splitting."""
