"""Prints the API's OpenAPI document, rendered from the api handler's route table:
`python -m scheduler.handlers.api_document > docs/openapi.json`."""

from __future__ import annotations

import scheduler.handlers.api  # noqa: F401  (declares every route)
from scheduler.handlers.api_routes import route
from scheduler.handlers.openapi import render

if __name__ == "__main__":
    print(render(route.operations), end="")
