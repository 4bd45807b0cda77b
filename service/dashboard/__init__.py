"""The web dashboard served at `/`."""
