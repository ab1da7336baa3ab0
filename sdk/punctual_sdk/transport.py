"""How the client sends a request: a request and a response as plain values, and the transport that carries them
(the standard library's urllib by default; any callable of the same shape, such as a test's fake, will do)."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from punctual_sdk.errors import TransportError


@dataclass(frozen=True)
class HttpRequest:
    method: str
    url: str
    headers: dict[str, str]
    body: bytes | None


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: dict[str, str]
    body: bytes


#: Sends a request with a timeout (seconds). Every HTTP status comes back as a response; only a failure to talk
#: (DNS, refused connection, timeout, TLS) raises, as `TransportError`.
Transport = Callable[[HttpRequest, float], HttpResponse]


def urllib_transport(request: HttpRequest, timeout: float) -> HttpResponse:
    """Send with urllib; every HTTP status comes back as a response, only a failure to talk raises."""
    prepared = urllib.request.Request(request.url, data=request.body, method=request.method, headers=request.headers)
    try:
        with urllib.request.urlopen(prepared, timeout=timeout) as response:
            return HttpResponse(response.status, dict(response.headers.items()), response.read())
    except urllib.error.HTTPError as exc:
        return HttpResponse(exc.code, dict(exc.headers.items()) if exc.headers else {}, exc.read())
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TransportError(f"cannot reach {request.url}: {reason}") from exc
