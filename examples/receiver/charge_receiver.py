"""A receiver of punctual's `http` calls, built only from the receiver kit: copy it and replace `charge`.

It verifies each call's signature v2 with the job's keys (fetched from the API and cached), runs `charge` once
per occurrence however often the call is delivered (a redelivery gets the first answer), and refuses a stale
fencing token (409), a forged or replayed call (401). Standard library WSGI server, nothing else to install but
`punctual-sdk` (`punctual-sdk[aws]` for the DynamoDB dedupe store; docs/sdk.md says how to install it).

    python examples/receiver/charge_receiver.py     # the local stack's API (scripts/dev) and its dev token
    # then point a job's target at http://127.0.0.1:9001/hooks/charge

Set DEDUPE_TABLE to keep the dedupe records in DynamoDB (see docs/receiving.md for the table); without it they are
kept in memory, which dedupes only while this one process lives.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from punctual_sdk.receiver import DedupeStore, InMemoryDedupeStore, Receiver, keys_from_api


def charge_app(charges: list[dict[str, Any]]) -> Callable[..., Iterable[bytes]]:
    """The effect, as a plain WSGI app: it runs once per occurrence behind the kit's middleware."""

    def charge(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        delivery = environ["punctual.delivery"]  # verified: key, token, attempt, payload
        charges.append({"occurrence_key": delivery.occurrence_key, "payload": delivery.payload})
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps({"charge": len(charges), "occurrence_key": delivery.occurrence_key}).encode()]

    return charge


def build(
    api_url: str,
    token: str,
    charges: list[dict[str, Any]],
    store: DedupeStore | None = None,
    tolerance_seconds: float = 300,
) -> Callable[..., Iterable[bytes]]:
    """The receiver: the kit's middleware around `charge_app`, guarding /hooks/ only."""
    receiver = Receiver(
        store or InMemoryDedupeStore(),
        keys_from_api(api_url, {"Authorization": f"Bearer {token}"}),
        tolerance_seconds=tolerance_seconds,
    )
    return receiver.wsgi(charge_app(charges), paths=("/hooks",))


class ThreadingServer(ThreadingMixIn, WSGIServer):
    """wsgiref's server, one thread per request (two deliveries of one occurrence may arrive together)."""

    daemon_threads = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    store: DedupeStore | None = None
    if os.environ.get("DEDUPE_TABLE"):
        from punctual_sdk.receiver.dynamodb import DynamoDBDedupeStore

        store = DynamoDBDedupeStore(os.environ["DEDUPE_TABLE"])
    api_url = os.environ.get("PUNCTUAL_API_URL", "http://127.0.0.1:8080")
    app = build(api_url, os.environ.get("PUNCTUAL_TOKEN", "dev-token"), [], store)
    port = int(os.environ.get("PORT", "9001"))
    with make_server("127.0.0.1", port, app, server_class=ThreadingServer) as server:
        print(f"receiving on http://127.0.0.1:{port}/hooks/charge")
        server.serve_forever()


if __name__ == "__main__":
    main()
