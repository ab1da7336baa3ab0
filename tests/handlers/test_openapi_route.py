"""`GET /v1/openapi.json` serves the same document as docs/openapi.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scheduler.handlers.local_invocation import LocalContext, to_event

ROOT = Path(__file__).resolve().parents[2]


def test_the_api_serves_its_openapi_document(env: Any) -> None:
    from scheduler.handlers.api import lambda_handler

    event = to_event("GET", "/v1/openapi.json", {}, b"", "tenant-a", "127.0.0.1")
    response = lambda_handler(event, LocalContext("api", 10))
    assert response["statusCode"] == 200
    assert json.loads(response["body"]) == json.loads((ROOT / "docs" / "openapi.json").read_text())
