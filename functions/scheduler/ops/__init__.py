"""Operator tools that run outside the request path (redrive of dead letters)."""
