"""Job output: stdout and stderr of each attempt, as agents ship them in heartbeats."""
