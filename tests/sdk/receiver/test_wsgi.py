"""The WSGI middleware, around a raw WSGI app and around Flask: verify (401), dedupe (the first answer replayed),
fence (409), in progress (429 + Retry-After), and a failing app releases the occurrence for the retry."""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from punctual_sdk.receiver import Receiver
from tests.sdk.receiver.signed import NOW, Request, signed_request


def environ_of(request: Request) -> dict[str, Any]:
    path, _, query = request.path.partition("?")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": request.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "SERVER_NAME": "receiver.example",
        "SERVER_PORT": "8080",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "CONTENT_LENGTH": str(len(request.body)),
        "wsgi.input": io.BytesIO(request.body),
        "wsgi.url_scheme": "http",
    }
    for name, value in request.headers.items():
        key = name.upper().replace("-", "_")
        environ[key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{key}"] = value
    return environ


def call(app: Callable[..., Iterable[bytes]], request: Request) -> tuple[int, dict[str, str], bytes]:
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        answer["status"], answer["headers"] = int(status.split()[0]), dict(headers)

    body = b"".join(app(environ_of(request), start_response))
    return answer["status"], answer["headers"], body


class Charges:
    """A raw WSGI app whose effect is counted; `status` is what it answers."""

    def __init__(self, status: str = "201 Created") -> None:
        self.effects: list[Any] = []
        self.status = status

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        delivery = environ["punctual.delivery"]
        payload = json.loads(environ["wsgi.input"].read())
        self.effects.append((delivery.occurrence_key, payload))
        start_response(self.status, [("Content-Type", "application/json")])
        return [json.dumps({"charge": len(self.effects)}).encode()]


def test_a_signed_call_runs_the_app_once_and_a_redelivery_gets_the_first_answer(receiver: Receiver) -> None:
    app = Charges()
    guarded = receiver.wsgi(app)

    first = call(guarded, signed_request())
    again = call(guarded, signed_request(attempt=2))

    assert first[0] == again[0] == 201
    assert json.loads(first[2]) == json.loads(again[2]) == {"charge": 1}
    assert again[1]["X-Punctual-Duplicate"] == "true"
    assert app.effects == [("job-1:2026-12-01T08:00:00Z", {"amount": 5})]


def test_a_forged_call_gets_401_problem_json_and_the_app_does_not_run(receiver: Receiver) -> None:
    app = Charges()
    forged = signed_request(keys={"k1": "a guessed key"})

    status, headers, body = call(receiver.wsgi(app), forged)

    assert status == 401
    assert headers["Content-Type"] == "application/problem+json"
    assert "does not match" in json.loads(body)["detail"]
    assert app.effects == []


def test_a_replayed_call_outside_the_tolerance_gets_401(receiver: Receiver) -> None:
    app = Charges()
    old = signed_request(timestamp=NOW - 3600)

    status, _, body = call(receiver.wsgi(app), old)

    assert (status, json.loads(body)["title"]) == (401, "StaleRequest")
    assert app.effects == []


def test_a_stale_fencing_token_gets_409_and_the_app_does_not_run(receiver: Receiver) -> None:
    app = Charges()
    guarded = receiver.wsgi(app)
    call(guarded, signed_request(token=8))

    status, _, body = call(guarded, signed_request(token=7))

    assert (status, json.loads(body)["title"]) == (409, "StaleFencingToken")
    assert len(app.effects) == 1


def test_a_delivery_in_progress_elsewhere_gets_429_with_retry_after(receiver: Receiver) -> None:
    app = Charges()
    receiver.guard.claim("job-1:2026-12-01T08:00:00Z", 7)  # another process is running it

    status, headers, _ = call(receiver.wsgi(app), signed_request(token=7))

    assert status == 429
    assert headers["Retry-After"] == "60"
    assert app.effects == []


@pytest.mark.parametrize("answer", ["500 Internal Server Error", "503 Service Unavailable", "429 Too Many Requests"])
def test_an_answer_the_worker_retries_is_not_recorded_so_the_retry_runs_the_app(receiver: Receiver, answer) -> None:
    app = Charges(answer)
    guarded = receiver.wsgi(app)

    assert call(guarded, signed_request())[0] == int(answer[:3])
    app.status = "200 OK"
    assert call(guarded, signed_request(attempt=2))[0] == 200
    assert len(app.effects) == 2


def test_a_permanent_refusal_is_recorded_and_replayed(receiver: Receiver) -> None:
    app = Charges("422 Unprocessable Entity")
    guarded = receiver.wsgi(app)

    assert call(guarded, signed_request())[0] == 422
    assert call(guarded, signed_request(attempt=2))[0] == 422
    assert len(app.effects) == 1


def test_an_app_that_raises_releases_the_occurrence(receiver: Receiver) -> None:
    def broken(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        raise RuntimeError("database down")

    with pytest.raises(RuntimeError):
        call(receiver.wsgi(broken), signed_request())

    app = Charges()
    assert call(receiver.wsgi(app), signed_request(attempt=2))[0] == 201
    assert len(app.effects) == 1


def test_unguarded_paths_pass_through(receiver: Receiver) -> None:
    def health(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        start_response("200 OK", [])
        return [b"ok"]

    unsigned = Request("GET", "receiver.example:8080", "/health", {"Host": "receiver.example:8080"}, b"")

    assert call(receiver.wsgi(health, paths=("/hooks",)), unsigned)[0] == 200
    assert call(receiver.wsgi(health, paths=("/hooks",)), signed_request(keys={"k1": "forged"}))[0] == 401


def test_flask_behind_the_middleware(receiver: Receiver) -> None:
    flask = pytest.importorskip("flask")
    effects: list[str] = []
    app = flask.Flask("receiver")

    @app.post("/hooks/pay")
    def pay() -> Any:
        delivery = flask.request.environ["punctual.delivery"]
        effects.append(delivery.occurrence_key)
        return {"charged": flask.request.get_json()["amount"]}

    app.wsgi_app = receiver.wsgi(app.wsgi_app)  # type: ignore[method-assign]
    client = app.test_client()

    def post(request: Request) -> Any:
        headers = {k: v for k, v in request.headers.items() if k != "Host"}
        return client.post(request.path, data=request.body, headers=headers, base_url="http://receiver.example:8080")

    assert post(signed_request()).get_json() == {"charged": 5}
    assert post(signed_request(attempt=2)).get_json() == {"charged": 5}
    assert post(signed_request(token=6)).status_code == 409
    assert post(signed_request(keys={"k1": "forged"})).status_code == 401
    assert effects == ["job-1:2026-12-01T08:00:00Z"]


class CountedInput(io.BytesIO):
    """A request body whose reads are counted: what the middleware pulled from the client."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.taken = 0

    def read(self, size: int | None = -1) -> bytes:
        chunk = super().read(size)
        self.taken += len(chunk)
        return chunk


def small_receiver(limit: int) -> Receiver:
    from punctual_sdk.receiver import InMemoryDedupeStore
    from tests.sdk.receiver.signed import JOB_ID, KEYS

    return Receiver(
        InMemoryDedupeStore(), lambda job_id: KEYS if job_id == JOB_ID else {}, max_body_bytes=limit, clock=lambda: NOW
    )


def answer_of(app: Callable[..., Iterable[bytes]], environ: dict[str, Any]) -> tuple[int, bytes]:
    status: list[int] = []
    body = b"".join(app(environ, lambda line, headers, exc_info=None: status.append(int(line.split()[0]))))
    return status[0], body


def test_a_body_over_the_limit_is_refused_with_413_before_it_is_read() -> None:
    # Given a receiver that reads at most 1 KiB, and a request that says it carries 10 MB
    app = Charges()
    guarded = small_receiver(1024).wsgi(app)
    environ = environ_of(signed_request())
    environ["CONTENT_LENGTH"] = str(10 * 1024 * 1024)
    environ["wsgi.input"] = stream = CountedInput(b"x" * 1_000_000)

    status, body = answer_of(guarded, environ)

    # Then it is refused unread
    assert (status, json.loads(body)["title"]) == (413, "RequestTooLarge")
    assert stream.taken == 0
    assert app.effects == []


def test_a_chunked_body_is_read_no_further_than_one_byte_past_the_limit() -> None:
    app = Charges()
    guarded = small_receiver(1024).wsgi(app)
    environ = environ_of(signed_request())
    del environ["CONTENT_LENGTH"]
    environ["wsgi.input_terminated"] = True
    environ["wsgi.input"] = stream = CountedInput(b"x" * 1_000_000)

    status, _ = answer_of(guarded, environ)

    assert status == 413
    assert stream.taken == 1025
    assert app.effects == []


def test_a_body_within_the_limit_passes_whether_its_length_is_declared_or_not() -> None:
    request = signed_request()
    app = Charges()
    guarded = small_receiver(len(request.body)).wsgi(app)
    chunked = environ_of(signed_request(attempt=2))
    del chunked["CONTENT_LENGTH"]
    chunked["wsgi.input_terminated"] = True

    assert call(guarded, request)[0] == 201
    assert answer_of(guarded, chunked)[0] == 201
    assert len(app.effects) == 1


class Report:
    """A raw WSGI app that answers with a large body, counting its runs."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.runs = 0

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        self.runs += 1
        body = b"r" * self.size
        start_response("201 Created", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]


def test_an_answer_too_large_to_keep_is_replayed_as_its_status_without_the_body(receiver: Receiver) -> None:
    # Given an app whose answer (300 KB) would not fit in a dedupe record
    app = Report(300_000)
    guarded = receiver.wsgi(app)

    # When the occurrence is delivered, then delivered again
    first = call(guarded, signed_request())
    again = call(guarded, signed_request(attempt=2))

    # Then the first delivery got the whole answer; the record keeps its status and digest, not the body
    assert (first[0], len(first[2])) == (201, 300_000)
    digest = hashlib.sha256(first[2]).hexdigest()
    assert (again[0], again[2]) == (201, b"")
    assert again[1]["X-Punctual-Body-Not-Kept"] == f"sha256={digest}; bytes=300000"
    assert again[1]["Content-Length"] == "0" and again[1]["Content-Type"] == "text/plain"
    assert again[1]["X-Punctual-Duplicate"] == "true"
    assert app.runs == 1
    record = receiver.guard.store.get("job-1:2026-12-01T08:00:00Z")
    assert len(record.result) <= 1024


def test_an_answer_within_the_cap_is_replayed_whole(receiver: Receiver) -> None:
    app = Report(64 * 1024)
    guarded = receiver.wsgi(app)

    first, again = call(guarded, signed_request()), call(guarded, signed_request(attempt=2))

    assert again[2] == first[2] and len(again[2]) == 64 * 1024
    assert app.runs == 1


def test_when_the_record_cannot_be_completed_the_app_answer_stands_and_a_retry_does_not_rerun_it() -> None:
    from punctual_sdk.receiver import InMemoryDedupeStore
    from tests.sdk.receiver.signed import JOB_ID, KEYS

    class Unwritable(InMemoryDedupeStore):
        def complete(self, occurrence_key: str, owner: str, result: str) -> bool:
            raise RuntimeError("the dedupe table is unreachable")

    receiver = Receiver(Unwritable(), lambda job_id: KEYS if job_id == JOB_ID else {}, clock=lambda: NOW)
    app = Charges()
    guarded = receiver.wsgi(app)

    # the app succeeded: its answer goes out (punctual records success and does not send it again)
    assert call(guarded, signed_request())[0] == 201
    # a delivery while the lease lasts (an answer lost in transit) is told to retry, not run again
    assert call(guarded, signed_request(attempt=2))[0] == 429
    assert len(app.effects) == 1
