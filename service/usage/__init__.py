"""Memory use over time: periodic samples per GPU model and per user."""
