"""The worker Lambda with SQS events built from real messages of the moto ready queue, calling a real HTTP
receiver that checks the signature and counts effects by Idempotency-Key."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote

import pytest

from punctual_sdk.receiver import InvalidSignature, verify_v1, verify_v2
from scheduler.adapters.dispatch_message import dispatch_from_body, dispatch_to_body, message_to_body
from scheduler.adapters.sqs import SqsReadyQueue
from scheduler.core.model.timefmt import rfc3339
from scheduler.core.ports import Dispatch
from scheduler.handlers import wiring, worker
from scheduler.handlers.local_invocation import LocalContext
from scheduler.ops.redrive import SqsDeadLetters, redrive
from scheduler.security.signing import KeyRing, tenant_key
from scheduler.settings import LOCAL_SIGNING_KEYS, Settings
from scheduler_local.dev_keys import LOCAL_MESSAGE_KEY
from scheduler_local.worker_poller import to_event
from tests.sdk.http_server import Quiet, serving

pytestmark = [pytest.mark.emulator, pytest.mark.filterwarnings("ignore:No application metrics:UserWarning")]

TENANT = "arn:aws:iam::111111111111:user/alice"
#: How long the receiver takes to answer on `/slow`.
SLOW_CALL_SECONDS = 2.5


@dataclass
class Receiver:
    """A webhook receiver: counts accepted calls per Idempotency-Key; `/status/NNN` answers NNN;
    `/hangup-once` drops the connection without answering the first call of each key (an ambiguous outcome)."""

    url: str
    calls: Counter[str] = field(default_factory=Counter)
    hung_up: set[str] = field(default_factory=set)
    headers: list[dict[str, str]] = field(default_factory=list)
    bad_signatures: list[str] = field(default_factory=list)


@pytest.fixture
def receiver(env: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    """The receiver checks both signatures, so the worker signs v1 too (off unless a deployment turns it on)."""
    monkeypatch.setenv("SCHEDULER_SIGNATURE_V1", "true")
    wiring.container.cache_clear()
    signing_key = tenant_key(Settings().signing_secret, TENANT)
    state = Receiver("")
    lock = threading.Lock()

    class Handler(Quiet, BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status = int(self.path.rsplit("/", 1)[-1]) if self.path.startswith("/status/") else 200
            try:
                verify_v1(signing_key, dict(self.headers), body)
                job_keys = KeyRing.parse(LOCAL_SIGNING_KEYS).job_keys(self.headers["X-Scheduler-Job-Id"])
                verify_v2(job_keys, self.command, self.headers["Host"], self.path, dict(self.headers), body)
            except InvalidSignature as exc:
                with lock:
                    state.bad_signatures.append(str(exc))
                status = 401
            occurrence = self.headers["Idempotency-Key"]
            if self.path == "/slow":
                time.sleep(SLOW_CALL_SECONDS)
            with lock:
                state.headers.append({k.lower(): v for k, v in self.headers.items()} | {"body": body.decode()})
                if self.path == "/hangup-once" and occurrence not in state.hung_up:
                    state.hung_up.add(occurrence)
                    self.close_connection = True
                    return
                if status == 200:
                    state.calls[occurrence] += 1
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as url:
        state.url = url
        yield state


def create_job(api_call: Any, url: str, at: datetime, delivery: str = "at_least_once") -> str:
    body = {
        "schedule": {"type": "once", "at": rfc3339(at)},
        "target": {"type": "http", "url": url, "timeout_seconds": 5},
        "payload": {"invoice": 7, "amount": 12.5},
        "retry": {"max_attempts": 3},
        "delivery": delivery,
    }
    response = api_call("POST", "/v1/jobs", body, tenant=TENANT)
    assert response.status == 201, response.text
    return str(response.body["job_id"])


def receive_records(sqs_client: Any, queue_url: str, bodies: list[str]) -> list[dict[str, Any]]:
    """Send the bodies to the queue and receive them back: the SQS event records the ESM would deliver (with
    real receipt handles), in the order the bodies were given."""
    for body in bodies:
        sqs_client.send_message(QueueUrl=queue_url, MessageBody=body)
    records = collect_records(sqs_client, queue_url, len(bodies))
    ordered: list[dict[str, Any]] = []
    for body in bodies:
        record = next(r for r in records if r["body"] == body and r not in ordered)
        ordered.append(record)
    return ordered


def collect_records(sqs_client: Any, queue_url: str, count: int) -> list[dict[str, Any]]:
    """Receive `count` messages as SQS event records."""
    arn = sqs_client.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    received: list[dict[str, Any]] = []
    for _ in range(20):
        got = sqs_client.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, AttributeNames=["All"], MessageAttributeNames=["All"]
        ).get("Messages", [])
        received += got
        if len(received) >= count:
            break
    assert len(received) == count
    return to_event(received, arn)["Records"]


def invoke(records: list[dict[str, Any]]) -> dict[str, Any]:
    return worker.lambda_handler({"Records": records}, LocalContext("punctual-worker", 120))


def drain(sqs_client: Any, queue_url: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while got := sqs_client.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", []):
        out += [json.loads(m["Body"]) for m in got]
    return out


def test_worker_batch_keeps_only_what_must_wait_and_dead_letters_the_rest(env, api_call, receiver, sqs_client):
    # Given three jobs whose occurrence is due now (a target that accepts, one that refuses, one that is busy)
    now = datetime.now(UTC).replace(microsecond=0)
    due = now - timedelta(seconds=5)
    ok = create_job(api_call, f"{receiver.url}/hook", due)
    refused = create_job(api_call, f"{receiver.url}/status/400", due)
    busy = create_job(api_call, f"{receiver.url}/status/503", due)
    ok_dispatch = Dispatch(ok, TENANT, due, due, 1)
    early = Dispatch(ok, TENANT, now + timedelta(minutes=2), now + timedelta(minutes=2), 1, "manual")
    bodies = [
        dispatch_to_body(ok_dispatch, LOCAL_MESSAGE_KEY),
        dispatch_to_body(early, LOCAL_MESSAGE_KEY),
        "{this is not a dispatch",
        dispatch_to_body(Dispatch(refused, TENANT, due, due, 1), LOCAL_MESSAGE_KEY),
        dispatch_to_body(Dispatch(busy, TENANT, due, due, 1), LOCAL_MESSAGE_KEY),
        dispatch_to_body(ok_dispatch, LOCAL_MESSAGE_KEY),  # the same occurrence delivered twice in one batch
    ]
    records = receive_records(sqs_client, env.ready_queue_url, bodies)

    # When the worker handles the batch
    response = invoke(records)

    # Then only the early message and the retry are kept; everything else is acknowledged - except the second copy
    # of the duplicated occurrence if it found the first one still running (the records run concurrently, so the
    # copies race on the ledger's claim as two Lambdas would; it then comes back once that lease has ended)
    kept = {f["itemIdentifier"] for f in response["batchItemFailures"]}
    must = {records[1]["messageId"], records[4]["messageId"]}
    assert must <= kept <= must | {records[0]["messageId"], records[5]["messageId"]}
    assert len(kept) <= 3

    # And the target saw exactly one effect for the occurrence, correctly signed and labelled
    assert receiver.bad_signatures == []
    assert receiver.calls == Counter({ok_dispatch.key: 1})
    hook = next(h for h in receiver.headers if h["idempotency-key"] == ok_dispatch.key)
    assert hook["x-scheduler-job-id"] == ok
    assert hook["x-scheduler-scheduled-for"] == rfc3339(due)
    assert (hook["x-scheduler-attempt"], hook["x-scheduler-fencing-token"]) == ("1", "1")
    assert json.loads(hook["body"]) == {"invoice": 7, "amount": 12.5}
    assert hook["content-type"] == "application/json"

    # And the malformed body and the refused occurrence (with its history) are on the DLQ
    dead = drain(sqs_client, env.dlq_url)
    assert len(dead) == 2
    malformed = next(d for d in dead if "malformed" in d)
    assert malformed["malformed"] == "{this is not a dispatch"
    refused_dead = next(d for d in dead if "dispatch" in d)
    assert refused_dead["dispatch"]["job_id"] == refused
    assert refused_dead["state"] == "DEAD" and refused_dead["attempts"] == 1
    assert [h["state"] for h in refused_dead["history"]] == ["DEAD"]
    assert "HTTP 400" in refused_dead["last_error"]

    # And the run history says so
    runs = {job: api_call("GET", f"/v1/jobs/{job}/runs", tenant=TENANT).body["runs"] for job in (ok, refused, busy)}
    assert [(r["state"], r["attempts"]) for r in runs[ok]] == [("SUCCEEDED", 1)]
    assert runs[ok][0]["occurrence_key"] == ok_dispatch.key
    assert [r["state"] for r in runs[refused]] == ["DEAD"]
    assert [r["state"] for r in runs[busy]] == ["RETRY_WAIT"]
    assert "503" in runs[busy][0]["last_error"]
    assert runs[busy][0]["next_attempt_at"] is not None


def test_redelivery_of_a_finished_occurrence_has_no_second_effect(env, api_call, receiver, sqs_client):
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    job = create_job(api_call, f"{receiver.url}/hook", due)
    dispatch = Dispatch(job, TENANT, due, due, 1)
    [record] = receive_records(sqs_client, env.ready_queue_url, [dispatch_to_body(dispatch, LOCAL_MESSAGE_KEY)])

    first = invoke([record])
    # SQS redelivers the same message (e.g. the delete after the first invocation was lost)
    redelivered = {**record, "attributes": {**record["attributes"], "ApproximateReceiveCount": "2"}}
    second = invoke([redelivered])
    # and a second message for the same occurrence arrives too (the sweeper re-sent it after a crash)
    [duplicate] = receive_records(sqs_client, env.ready_queue_url, [dispatch_to_body(dispatch, LOCAL_MESSAGE_KEY)])
    third = invoke([duplicate])

    assert first == second == third == {"batchItemFailures": []}
    assert receiver.calls == Counter({dispatch.key: 1})
    runs = api_call("GET", f"/v1/jobs/{job}/runs", tenant=TENANT).body["runs"]
    assert [(r["state"], r["attempts"]) for r in runs] == [("SUCCEEDED", 1)]


def test_an_occurrence_of_a_cancelled_job_is_recorded_not_run(env, api_call, receiver, sqs_client):
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    job = create_job(api_call, f"{receiver.url}/hook", due)
    assert api_call("DELETE", f"/v1/jobs/{job}", tenant=TENANT).status == 200
    dispatch = Dispatch(job, TENANT, due, due, 1)
    records = receive_records(sqs_client, env.ready_queue_url, [dispatch_to_body(dispatch, LOCAL_MESSAGE_KEY)])

    assert invoke(records) == {"batchItemFailures": []}

    assert receiver.calls == Counter()
    runs = api_call("GET", f"/v1/jobs/{job}/runs", tenant=TENANT).body["runs"]
    assert [r["state"] for r in runs] == ["CANCELLED"]


def test_a_dispatch_naming_another_tenant_runs_nothing(env, api_call, receiver, sqs_client):
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    job = create_job(api_call, f"{receiver.url}/hook", due)
    forged = Dispatch(job, "arn:aws:iam::999999999999:user/mallory", due, due, 1)
    records = receive_records(sqs_client, env.ready_queue_url, [dispatch_to_body(forged, LOCAL_MESSAGE_KEY)])

    assert invoke(records) == {"batchItemFailures": []}
    assert receiver.calls == Counter()


def test_at_most_once_ambiguous_outcome_waits_for_an_operator(env, api_call, receiver, sqs_client):
    # Given an at-most-once job whose target takes the request and drops the connection without an answer
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    job = create_job(api_call, f"{receiver.url}/hangup-once", due, delivery="at_most_once")
    dispatch = Dispatch(job, TENANT, due, due, 1)
    [record] = receive_records(sqs_client, env.ready_queue_url, [dispatch_to_body(dispatch, LOCAL_MESSAGE_KEY)])

    # When the worker runs it, and the message is delivered again
    assert invoke([record]) == {"batchItemFailures": []}
    assert invoke([record]) == {"batchItemFailures": []}

    # Then it was tried once, and is RECONCILING, not retried blindly
    assert receiver.hung_up == {dispatch.key}
    assert len(receiver.headers) == 1
    [run] = api_call("GET", f"/v1/jobs/{job}/runs", tenant=TENANT).body["runs"]
    assert (run["state"], run["attempts"]) == ("RECONCILING", 1)
    assert "ambiguous" in run["last_error"]

    # When an operator resolves it as "run it again"
    key = dispatch.key
    resolved = api_call(
        "POST", f"/v1/jobs/{job}/runs/{key}/resolve", {"outcome": "retry", "note": "not charged"}, tenant=TENANT
    )
    assert (resolved.status, resolved.body["state"]) == (200, "RETRY_WAIT")
    assert resolved.body["history"][-1]["error"] == "not charged"

    # Then the occurrence is on the ready queue again, under the same key, and runs once more
    [redo] = collect_records(sqs_client, env.ready_queue_url, 1)
    redispatch = dispatch_from_body(redo["body"], LOCAL_MESSAGE_KEY)
    assert (redispatch.key, redispatch.kind) == (key, "manual")
    assert invoke([redo]) == {"batchItemFailures": []}
    assert receiver.calls == Counter({key: 1})
    [run] = api_call("GET", f"/v1/jobs/{job}/runs", tenant=TENANT).body["runs"]
    assert (run["state"], run["attempts"]) == ("SUCCEEDED", 2)
    again = api_call("POST", f"/v1/jobs/{job}/runs/{key}/resolve", {"outcome": "succeeded"}, tenant=TENANT)
    assert again.status == 409


def test_a_tenant_retries_its_dead_run_once_under_the_same_key(env, api_call, receiver, sqs_client):
    # Given a DEAD occurrence (its target refused it) and a SUCCEEDED one
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    dead_job = create_job(api_call, f"{receiver.url}/status/400", due)
    ok_job = create_job(api_call, f"{receiver.url}/hook", due)
    dead, ok = Dispatch(dead_job, TENANT, due, due, 1), Dispatch(ok_job, TENANT, due, due, 1)
    bodies = [dispatch_to_body(d, LOCAL_MESSAGE_KEY) for d in (dead, ok)]
    assert invoke(receive_records(sqs_client, env.ready_queue_url, bodies)) == {"batchItemFailures": []}
    drain(sqs_client, env.dlq_url)
    path = f"/v1/jobs/{dead_job}/runs/{rfc3339(due)}/retry"

    # Then another tenant cannot retry it, and a malformed instant is a 422
    assert api_call("POST", path, tenant="arn:aws:iam::222222222222:user/bob").status == 404
    bad = api_call("POST", f"/v1/jobs/{dead_job}/runs/yesterday/retry", tenant=TENANT)
    assert (bad.status, bad.body["errors"][0]["field"]) == (422, "scheduled_for")

    # When its tenant retries it, twice (the answer to the first was lost)
    first = api_call("POST", path, tenant=TENANT)
    second = api_call("POST", f"/v1/jobs/{dead_job}/runs/{quote(dead.key, safe='')}/retry", tenant=TENANT)

    # Then both answer the run waiting for its new attempt, and the occurrence is on the ready queue, same key
    assert (first.status, first.body["state"], first.body["occurrence_key"]) == (202, "RETRY_WAIT", dead.key)
    assert (second.status, second.body["state"]) == (202, "RETRY_WAIT")
    redone = collect_records(sqs_client, env.ready_queue_url, 2)
    assert {(d.key, d.kind) for d in (dispatch_from_body(r["body"], LOCAL_MESSAGE_KEY) for r in redone)} == {
        (dead.key, "manual")
    }
    # And the worker runs it once more, with the next fencing token (the duplicate is absorbed: acknowledged, or
    # kept for later if it found the first copy still running, as two Lambdas would)
    assert len(invoke(redone)["batchItemFailures"]) <= 1
    tokens = [h["x-scheduler-fencing-token"] for h in receiver.headers if h["idempotency-key"] == dead.key]
    assert tokens == ["1", "2"]
    [run] = api_call("GET", f"/v1/jobs/{dead_job}/runs", tenant=TENANT).body["runs"]
    assert (run["state"], run["attempts"]) == ("DEAD", 1)

    # And a SUCCEEDED run is never run again, and a run that does not exist is a 404
    succeeded = api_call("POST", f"/v1/jobs/{ok_job}/runs/{rfc3339(due)}/retry", tenant=TENANT)
    assert succeeded.status == 409 and "SUCCEEDED" in succeeded.body["detail"]
    missing = api_call("POST", f"/v1/jobs/{ok_job}/runs/{rfc3339(due + timedelta(hours=1))}/retry", tenant=TENANT)
    assert missing.status == 404
    assert receiver.calls == Counter({ok.key: 1})


def test_a_forged_or_planted_dispatch_is_dead_lettered_unrun(env, api_call, receiver, sqs_client):
    # Given a job, and two messages for it that a tenant could put on the ready queue (e.g. through an sqs target):
    # one without an HMAC, one with an HMAC under another key
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    job = create_job(api_call, f"{receiver.url}/hook", due)
    genuine = json.loads(dispatch_to_body(Dispatch(job, TENANT, due, due, 1, "manual"), LOCAL_MESSAGE_KEY))
    unsigned = json.dumps({k: v for k, v in genuine.items() if k != "mac"})
    other_key = dispatch_to_body(Dispatch(job, TENANT, due, due, 1, "manual"), b"k" * 32)
    records = receive_records(sqs_client, env.ready_queue_url, [unsigned, other_key])

    # When the worker receives them
    assert invoke(records) == {"batchItemFailures": []}

    # Then nothing ran, no run was recorded, and both are in the DLQ with the reason
    assert receiver.calls == Counter()
    assert api_call("GET", f"/v1/jobs/{job}/runs", tenant=TENANT).body["runs"] == []
    # (the batch's records are handled concurrently, so their DLQ messages may arrive in either order)
    dead = {d["unauthenticated"]: d["error"] for d in drain(sqs_client, env.dlq_url)}
    assert set(dead) == {unsigned, other_key}
    assert "carries no HMAC" in dead[unsigned] and "does not match" in dead[other_key]


def test_redrive_refuses_a_message_planted_in_the_dlq(env, api_call, sqs_client):
    # Given a DLQ holding a dead-letter wrapper whose dispatch was written by someone without the message key
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    planted = json.loads(dispatch_to_body(Dispatch("j-planted", TENANT, due, due, 1), b"x" * 32))
    sqs_client.send_message(QueueUrl=env.dlq_url, MessageBody=json.dumps({"dispatch": planted, "state": "DEAD"}))

    # When an operator redrives
    ledger = wiring.container(worker.metrics).core.stores.ledger
    letters = SqsDeadLetters(env.dlq_url, sqs_client, message_key=LOCAL_MESSAGE_KEY)
    queue = SqsReadyQueue(env.ready_queue_url, env.dlq_url, sqs_client, message_key=LOCAL_MESSAGE_KEY)
    [line] = redrive(letters, ledger, queue, dry_run=False, limit=10)

    # Then it is refused and left in the DLQ, and nothing reaches the ready queue
    assert line.action.startswith("unreadable (unauthenticated dispatch message")
    assert drain(sqs_client, env.ready_queue_url) == []


def test_two_copies_of_one_occurrence_in_one_batch_race_as_two_lambdas_do(env, api_call, receiver, sqs_client):
    # Given a batch holding the same occurrence twice (a duplicate delivery landing in the same batch), and other
    # occurrences, all handled at once (one thread per record)
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    job = create_job(api_call, f"{receiver.url}/hook", due)
    others = [create_job(api_call, f"{receiver.url}/hook", due) for _ in range(3)]
    dispatch = Dispatch(job, TENANT, due, due, 1)
    bodies = [
        dispatch_to_body(dispatch, LOCAL_MESSAGE_KEY),
        *(dispatch_to_body(Dispatch(o, TENANT, due, due, 1), LOCAL_MESSAGE_KEY) for o in others),
    ]
    records = receive_records(sqs_client, env.ready_queue_url, [bodies[0], *bodies])
    assert worker.processor.threads > 1

    # When the worker handles the batch
    response = invoke(records)

    # Then the duplicated occurrence took effect once (the ledger's claim decided), every other one ran, and at
    # most the losing copy is kept for later (it finds the occurrence running, or already finished)
    assert receiver.calls[dispatch.key] == 1
    assert sum(receiver.calls.values()) == 4
    assert len(response["batchItemFailures"]) <= 1
    runs = api_call("GET", f"/v1/jobs/{job}/runs", tenant=TENANT).body["runs"]
    assert [(r["state"], r["attempts"]) for r in runs] == [("SUCCEEDED", 1)]


def test_a_message_of_several_occurrences_runs_each_and_sends_again_alone_the_one_that_must_wait(
    env, api_call, receiver, sqs_client
):
    # Given one message that carries four occurrences due now (as a sweep packs a tenant's herd): three whose target
    # accepts, one whose target is busy (503), and the first of them twice (a copy in the same message)
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    fine = [create_job(api_call, f"{receiver.url}/hook", due) for _ in range(3)]
    busy = create_job(api_call, f"{receiver.url}/status/503", due)
    dispatches = [Dispatch(job, TENANT, due, due, 1) for job in [*fine, busy, fine[0]]]
    [record] = receive_records(sqs_client, env.ready_queue_url, [message_to_body(dispatches, LOCAL_MESSAGE_KEY)])

    # When the worker handles it
    response = invoke([record])

    # Then the message is acknowledged: each accepted occurrence took effect once, and the busy one waits for its
    # retry in a message of its own, released no sooner than its backoff
    assert response == {"batchItemFailures": []}
    assert receiver.calls == Counter({Dispatch(job, TENANT, due, due, 1).key: 1 for job in fine})
    runs = api_call("GET", f"/v1/jobs/{busy}/runs", tenant=TENANT).body["runs"]
    assert [r["state"] for r in runs] == ["RETRY_WAIT"]
    got = sqs_client.receive_message(
        QueueUrl=env.ready_queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0, MessageAttributeNames=["All"]
    ).get("Messages", [])
    assert got == []  # hidden by its delay until the backoff has passed
    attributes = sqs_client.get_queue_attributes(
        QueueUrl=env.ready_queue_url, AttributeNames=["ApproximateNumberOfMessagesDelayed"]
    )["Attributes"]
    # (and the copy of the first occurrence, if it found that one still running: the copies race on the claim as
    # two Lambdas do, the loser comes back after the winner's lease)
    assert int(attributes["ApproximateNumberOfMessagesDelayed"]) in (1, 2)


def test_a_message_of_several_occurrences_with_one_forged_runs_none_of_them(env, api_call, receiver, sqs_client):
    # Given a packed message whose second occurrence was signed with another key (tampered with on the way)
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    jobs = [create_job(api_call, f"{receiver.url}/hook", due) for _ in range(2)]
    good = json.loads(dispatch_to_body(Dispatch(jobs[0], TENANT, due, due, 1), LOCAL_MESSAGE_KEY))
    bad = json.loads(dispatch_to_body(Dispatch(jobs[1], TENANT, due, due, 1), b"k" * 32))
    body = json.dumps({"v": 2, "occurrences": [good, bad]})
    records = receive_records(sqs_client, env.ready_queue_url, [body])

    # When the worker receives it
    assert invoke(records) == {"batchItemFailures": []}

    # Then nothing ran and the message is in the DLQ as unauthenticated
    assert receiver.calls == Counter()
    [dead] = drain(sqs_client, env.dlq_url)
    assert dead["unauthenticated"] == body and "does not match" in dead["error"]


def test_a_call_past_a_heartbeat_period_renews_through_the_clients_that_give_up_fast(
    env, api_call, receiver, sqs_client, monkeypatch
):
    # Given a lease of 6 s (a heartbeat every 2 s), execution slots, and two occurrences due: one answered at once,
    # one slowly
    monkeypatch.setenv("SCHEDULER_LEASE_SECONDS", "6")
    monkeypatch.setenv("SCHEDULER_TENANT_MAX_CONCURRENCY", "5")
    wiring.container.cache_clear()
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    fast = Dispatch(create_job(api_call, f"{receiver.url}/hook", due), TENANT, due, due, 1)
    slow = Dispatch(create_job(api_call, f"{receiver.url}/slow", due), TENANT, due, due, 1)
    clients = wiring.container(worker.metrics).clients

    # When the short call runs, nothing renews: the renewal clients are not even made
    invoke(receive_records(sqs_client, env.ready_queue_url, [dispatch_to_body(fast, LOCAL_MESSAGE_KEY)]))
    assert clients.renewal_dynamodb._client is None and clients.renewal_sqs._client is None

    # When the slow call outlasts a heartbeat period
    renewals: Counter[tuple[str, str]] = Counter()

    def count(model: Any, params: dict[str, Any], **_: Any) -> None:
        renewals[(model.name, params.get("TableName", "sqs"))] += 1

    for renewal in (clients.renewal_dynamodb, clients.renewal_sqs):
        renewal.client.meta.events.register("before-parameter-build", count)
    invoke(receive_records(sqs_client, env.ready_queue_url, [dispatch_to_body(slow, LOCAL_MESSAGE_KEY)]))

    # Then its lease (the ledger), its execution slot and its message were renewed through clients that give up
    # within the lease's margin (a second to connect, two to read, one retry), and the occurrence ran once
    assert set(renewals) == {
        ("UpdateItem", env.executions_table),
        ("UpdateItem", env.jobs_table),
        ("ChangeMessageVisibility", "sqs"),
    }, renewals
    config = clients.renewal_dynamodb.meta.config
    assert (config.connect_timeout, config.read_timeout, config.retries["total_max_attempts"]) == (1, 2, 2)
    assert receiver.calls == Counter({fast.key: 1, slow.key: 1})
    assert api_call("GET", f"/v1/jobs/{slow.job_id}/runs", tenant=TENANT).body["runs"][0]["state"] == "SUCCEEDED"
