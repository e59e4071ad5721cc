"""The recommendation service: FastAPI app, storage adapters, metrics, CLI and client."""
