"""The roles a token may have; a module of its own so that the CLI's parser offers them
without importing the database code."""

ROLES = ("user", "admin", "agent")
