"""The web layer of the native API: the FastAPI application (``app.py``), the
dependencies its routers take (``deps.py``) and the API-key checks (``auth.py``);
docs/architecture.md, "Layers"."""
