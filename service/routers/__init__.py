"""Thin HTTP routers: parse, call one use case (``service.usecases``), answer."""
