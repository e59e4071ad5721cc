"""What the service tells its operators: Prometheus metrics (``metrics.py``), the log
format (``logs.py``) and the request each task serves (``request_context.py``: its id
and actor, written on log lines and audit records); docs/operations.md."""
