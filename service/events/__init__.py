"""The append-only audit log of every state change."""
