"""Colloc's memory estimator: pure library (no database, no web), spec -> estimate."""
