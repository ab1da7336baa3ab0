"""Thin Lambda handlers: parse the event, build adapters from settings (`wiring`), call the core, map results."""
