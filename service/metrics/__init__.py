"""Prometheus metrics: `GET /metrics`."""
