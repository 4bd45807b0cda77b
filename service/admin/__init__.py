"""Admin queries: the whole cluster, every job, the event log."""
