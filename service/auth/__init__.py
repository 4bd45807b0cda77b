"""API tokens and roles: who may call what."""
