"""The trace-driven cluster simulator (`colloc simulate`): public traces replayed on a
simulated heterogeneous cluster, placed by the service's own scheduler core."""
