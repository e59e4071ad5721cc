"""Thin HTTP routers: parse, call the decision service, answer."""
