"""Colloc's node agent: reads GPU state, launches placed jobs, watches their memory.

The agent talks to the service only over HTTP; it never imports `service`.
"""

__version__ = "0.1.0"
