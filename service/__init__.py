"""Colloc's central scheduler: REST API, database, placement and dashboard."""
