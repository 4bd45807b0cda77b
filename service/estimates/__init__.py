"""`POST /v1/estimate`: the memory estimator over HTTP."""
