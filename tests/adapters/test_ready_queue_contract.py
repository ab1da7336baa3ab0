"""ReadyQueue contract: the same tests run against MemoryQueue and SqsReadyQueue (the local emulator), both packing
occurrences into messages as deployed (scheduler.core.execution.packing), plus the SQS adapter's own rules (batches of
10, packed messages within a request's size, DelaySeconds rounding and clamping, retries of failed entries)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.adapters import sqs
from scheduler.adapters.dispatch_message import dispatch_from_body, dispatches_from_body
from scheduler.adapters.memory import FakeClock, MemoryQueue
from scheduler.adapters.sqs import QueueSendFailed, SqsReadyQueue, delay_seconds
from scheduler.core.execution.packing import PackingConfig
from scheduler.core.model.job import Job, RunState
from scheduler.core.model.timefmt import truncate_ms
from scheduler.core.ports import Dispatch, Execution, HistoryEntry
from scheduler_local.dev_keys import LOCAL_MESSAGE_KEY


class SpyClient:
    """Delegates to a real SQS client and records every SendMessageBatch request."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.batches: list[list[dict[str, Any]]] = []

    def send_message_batch(self, **kwargs: Any) -> Any:
        self.batches.append(kwargs["Entries"])
        return self.client.send_message_batch(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


@dataclass
class QueueUnderTest:
    name: str
    queue: Any
    now: Callable[[], datetime]
    wait: Callable[[float], None]
    ready: Callable[[], list[Dispatch]]
    dead: Callable[[], list[dict[str, Any]]]
    spy: SpyClient | None = None
    #: The occurrences each message received carried (keys), in the order received.
    messages: list[list[str]] = field(default_factory=list)


def _memory() -> QueueUnderTest:
    clock = FakeClock(datetime(2026, 1, 5, 9, 0, tzinfo=UTC))
    queue = MemoryQueue(clock, packing=PackingConfig())
    messages: list[list[str]] = []

    def ready() -> list[Dispatch]:
        out: list[Dispatch] = []
        while batch := queue.receive(10):
            for m in batch:
                out += m.dispatches
                messages.append([d.key for d in m.dispatches])
                queue.delete(m)
        return out

    def dead() -> list[dict[str, Any]]:
        return [
            {
                "dispatch": d,
                "state": e.state.value if e else None,
                "attempts": e.attempts if e else None,
                "last_error": e.last_error if e else None,
                "history": [h.view() for h in e.history] if e else None,
            }
            for d, e in queue.dead
        ]

    return QueueUnderTest("memory", queue, clock.now, clock.advance, ready, dead, messages=messages)


def _sqs(request: pytest.FixtureRequest) -> QueueUnderTest:
    resources = request.getfixturevalue("resources")
    client = request.getfixturevalue("sqs_client")
    spy = SpyClient(client)
    queue = SqsReadyQueue(resources.ready_queue_url, resources.dlq_url, spy, message_key=LOCAL_MESSAGE_KEY)

    def drain(url: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while True:
            got = client.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0, MessageAttributeNames=["All"]
            ).get("Messages", [])
            if not got:
                return out
            out += got

    messages: list[list[str]] = []

    def ready() -> list[Dispatch]:
        out: list[Dispatch] = []
        for m in drain(resources.ready_queue_url):
            dispatches = dispatches_from_body(m["Body"], LOCAL_MESSAGE_KEY)
            out += dispatches
            messages.append([d.key for d in dispatches])
            client.delete_message(QueueUrl=resources.ready_queue_url, ReceiptHandle=m["ReceiptHandle"])
        return out

    def dead() -> list[dict[str, Any]]:
        out = []
        for message in drain(resources.dlq_url):
            body = json.loads(message["Body"])
            assert message["MessageAttributes"]["occurrence_key"]["StringValue"] == body["dispatch"]["occurrence_key"]
            out.append({**body, "dispatch": dispatch_from_body(json.dumps(body["dispatch"]), LOCAL_MESSAGE_KEY)})
        return out

    return QueueUnderTest("sqs", queue, lambda: datetime.now(UTC), time.sleep, ready, dead, spy, messages)


@pytest.fixture(params=["memory", pytest.param("sqs", marks=pytest.mark.emulator)])
def q(request: pytest.FixtureRequest) -> QueueUnderTest:
    return _memory() if request.param == "memory" else _sqs(request)


#: A one-shot job as a message's copy carries it (Dispatch.job_copy), less its job id and tenant.
JOB_COPY: dict[str, Any] = {
    "spec": {
        "schedule": {"type": "once", "at": "2026-01-05T09:00:00Z"},
        "target": {"type": "http", "url": "https://example.com/h"},
    },
    "version": 1,
    "state": "COMPLETED",
    "created_at": "2026-01-05T08:00:00Z",
    "updated_at": "2026-01-05T08:00:00Z",
}


def _dispatches(count: int, fire_at: datetime) -> list[Dispatch]:
    fire_at = truncate_ms(fire_at)
    return [
        Dispatch(
            f"job{i:03d}",
            "tenant-a",
            fire_at - timedelta(seconds=i),
            fire_at,
            i + 1,
            "manual" if i % 2 else "scheduled",
        )
        for i in range(count)
    ]


def test_send_delivers_every_dispatch_and_bodies_round_trip(q) -> None:
    sent = _dispatches(25, q.now())
    q.queue.send(sent, q.now())
    got = q.ready()
    assert sorted(got, key=lambda d: d.job_id) == sent


def test_occurrences_of_one_tenant_lane_and_instant_share_messages_of_at_most_ten(q) -> None:
    # Given 25 occurrences of one tenant due at one instant, 3 of another tenant and 2 in another lane
    now = q.now()
    herd = _dispatches(25, now)
    herd = [replace(d, scheduled_for=d.fire_at) for d in herd]
    others = [replace(d, job_id=f"other{i}", tenant="tenant-b") for i, d in enumerate(herd[:3])]
    urgent = [replace(d, job_id=f"urgent{i}", priority="high") for i, d in enumerate(herd[:2])]

    q.queue.send(herd + others + urgent, now)

    # Then each tenant and lane has messages of its own, of at most 10 occurrences, and nothing is lost
    got = q.ready()
    assert sorted(d.key for d in got) == sorted(d.key for d in herd + others + urgent)
    sizes = sorted(len(m) for m in q.messages)
    assert sizes == [2, 3, 5, 10, 10]
    tenants = {d.key: d.tenant for d in got}
    assert all(len({tenants[k] for k in m}) == 1 for m in q.messages)


def test_occurrences_released_further_apart_than_the_spread_do_not_share_a_message(q) -> None:
    now = q.now()
    a, b, c = _dispatches(3, now)
    later = replace(b, fire_at=b.fire_at + timedelta(milliseconds=101))
    close = replace(c, fire_at=c.fire_at + timedelta(milliseconds=100))

    q.queue.send([a, later, close], now)

    got = q.ready()
    assert sorted(d.key for d in got) == sorted(d.key for d in (a, later, close))
    assert sorted(len(m) for m in q.messages) == [1, 2]


def test_send_of_nothing_sends_nothing(q) -> None:
    q.queue.send([], q.now())
    assert q.ready() == []
    if q.spy is not None:
        assert q.spy.batches == []


def test_a_delayed_message_is_not_delivered_before_its_delay(q) -> None:
    # Given a dispatch due in 1.5 s (DelaySeconds 1: the worker waits out the remaining half second)
    now = q.now()
    soon = _dispatches(1, now + timedelta(milliseconds=1500))
    due = _dispatches(1, now - timedelta(seconds=5))
    due = [Dispatch("job-due", d.tenant, d.scheduled_for, d.fire_at, d.version) for d in due]

    q.queue.send(soon + due, now)

    # Then only the due one can be received at once
    assert q.ready() == due
    # And the delayed one arrives by its fire time, not lost, with its body intact
    q.wait(1.6)
    assert q.ready() == soon


def test_dead_letter_carries_the_dispatch_and_its_history(q) -> None:
    dispatch = _dispatches(1, datetime(2026, 1, 5, 9, 0, tzinfo=UTC))[0]
    history = [
        {"epoch": 1, "state": "RETRY_WAIT", "at": "2026-01-05T09:00:01Z", "error": "HTTP 503"},
        {"epoch": 2, "state": "DEAD", "at": "2026-01-05T09:00:31Z", "error": "HTTP 400"},
    ]
    dead_at = datetime(2026, 1, 5, 9, 0, 31, tzinfo=UTC)
    first = Execution.unstarted(dispatch, RunState.DEAD, datetime(2026, 1, 5, 9, 0, tzinfo=UTC))
    execution = replace(
        first,
        epoch=2,
        attempts=2,
        last_error="HTTP 400",
        finished_at=dead_at,
        history=[
            HistoryEntry(1, RunState.RETRY_WAIT, datetime(2026, 1, 5, 9, 0, 1, tzinfo=UTC), "HTTP 503"),
            HistoryEntry(2, RunState.DEAD, dead_at, "HTTP 400"),
        ],
    )

    copied = Job.model_validate(JOB_COPY | {"job_id": dispatch.job_id, "tenant": dispatch.tenant})
    q.queue.dead_letter(replace(dispatch, job_copy=copied.model_copy(update={"version": dispatch.version})), execution)

    [dead] = q.dead()
    assert dead["dispatch"] == dispatch
    assert dead["dispatch"].job_copy is None  # keys for the operators, not the job: a redrive reads it
    assert (dead["state"], dead["attempts"], dead["last_error"]) == ("DEAD", 2, "HTTP 400")
    assert dead["history"] == history
    assert q.ready() == []  # the ready queue is untouched
    if q.name == "sqs":
        assert dead["dead_at"] == "2026-01-05T09:00:31Z"


# -- SQS only -----------------------------------------------------------------------------------------------


@pytest.fixture
def sqs_q(request: pytest.FixtureRequest) -> QueueUnderTest:
    return _sqs(request)


@pytest.mark.emulator
def test_sqs_sends_in_batches_of_ten_with_attributes(sqs_q, sqs_client) -> None:
    now = datetime.now(UTC)
    sent = _dispatches(25, now)
    sent[3] = Dispatch("far", "tenant-a", now, now + timedelta(hours=2), 1)  # beyond SQS's 900 s cap
    sent[4] = Dispatch("past", "tenant-a", now, now - timedelta(hours=2), 1)

    sqs_q.queue.packing = PackingConfig(occurrences=1)  # a message each
    sqs_q.queue.send(sent, now)

    assert [len(batch) for batch in sqs_q.spy.batches] == [10, 10, 5]
    delays = {json.loads(e["MessageBody"])["job_id"]: e["DelaySeconds"] for b in sqs_q.spy.batches for e in b}
    assert delays["far"] == 900 and delays["past"] == 0
    assert all(0 <= d <= 900 for d in delays.values())
    got = sqs_client.receive_message(
        QueueUrl=sqs_q.queue.queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
    )["Messages"]
    for message in got:
        dispatch = dispatch_from_body(message["Body"], LOCAL_MESSAGE_KEY)
        attributes = message["MessageAttributes"]
        assert attributes["occurrence_key"]["StringValue"] == dispatch.key
        assert attributes["tenant"]["StringValue"] == dispatch.tenant


class FlakyClient:
    """A stand-in SQS client that refuses chosen entry ids a given number of times."""

    def __init__(self, refuse: dict[str, int]) -> None:
        self.refuse = refuse
        self.calls: list[list[str]] = []

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803
        ids = [e["Id"] for e in Entries]
        self.calls.append(ids)
        failed = [i for i in ids if self.refuse.get(i, 0) > 0]
        for i in failed:
            self.refuse[i] -= 1
        return {
            "Successful": [{"Id": i} for i in ids if i not in failed],
            "Failed": [{"Id": i, "Code": "InternalError", "SenderFault": False} for i in failed],
        }


@pytest.mark.emulator
def test_sqs_packed_messages_stay_within_a_requests_size_and_say_what_they_carry(sqs_q, sqs_client) -> None:
    # Given 30 occurrences of one instant whose messages carry copies of their jobs (about 2.7 KB each as JSON)
    now = truncate_ms(datetime.now(UTC))
    big = {"payload": {"blob": "x" * 2500}}
    sent = []
    for i, d in enumerate(_dispatches(30, now)):
        job = Job.model_validate(
            JOB_COPY
            | {"job_id": d.job_id, "tenant": d.tenant, "version": d.version, "spec": {**JOB_COPY["spec"], **big}}
        )
        sent.append(replace(d, scheduled_for=now - timedelta(seconds=i), job_copy=job))

    sqs_q.queue.send(sent, now)

    # Then no body passes MAX_PACKED_BYTES (a packed message over it is halved), every request is within SQS's 256 KiB,
    # and each message names its first occurrence and how many it carries
    bodies = [e["MessageBody"] for batch in sqs_q.spy.batches for e in batch]
    assert all(len(body) <= sqs.MAX_PACKED_BYTES for body in bodies)
    assert all(sum(len(e["MessageBody"]) for e in batch) < 256 * 1024 for batch in sqs_q.spy.batches)
    received = sqs_q.ready()
    assert sorted(d.key for d in received) == sorted(d.key for d in sent)
    assert all(d.job_copy is not None for d in received)
    assert max(len(m) for m in sqs_q.messages) > 1
    for batch in sqs_q.spy.batches:
        for entry in batch:
            carried = dispatches_from_body(entry["MessageBody"], LOCAL_MESSAGE_KEY)
            attributes = entry["MessageAttributes"]
            assert attributes["occurrence_key"]["StringValue"] == carried[0].key
            assert int(attributes.get("occurrences", {"StringValue": "1"})["StringValue"]) == len(carried)


def test_sqs_resends_only_the_refused_entries() -> None:
    client = FlakyClient({"2": 1, "7": 2})
    SqsReadyQueue("q", "dlq", client, message_key=LOCAL_MESSAGE_KEY, packing=PackingConfig(occurrences=1)).send(
        _dispatches(10, datetime(2026, 1, 5, tzinfo=UTC)), datetime(2026, 1, 5, tzinfo=UTC)
    )
    assert client.calls == [[str(i) for i in range(10)], ["2", "7"], ["7"]]


def test_sqs_raises_when_entries_stay_refused() -> None:
    client = FlakyClient({"4": 99})
    now = datetime(2026, 1, 5, tzinfo=UTC)
    with pytest.raises(QueueSendFailed):
        SqsReadyQueue("q", "dlq", client, message_key=LOCAL_MESSAGE_KEY, packing=PackingConfig(occurrences=1)).send(
            _dispatches(5, now), now
        )
    assert len(client.calls) == sqs.SEND_ATTEMPTS


# -- delay_seconds ------------------------------------------------------------------------------------------

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("ahead", "expected"),
    [
        (timedelta(0), 0),
        (timedelta(milliseconds=400), 0),
        (timedelta(seconds=1), 1),
        (timedelta(milliseconds=1999), 1),
        (timedelta(seconds=5), 5),
        (timedelta(seconds=899, milliseconds=999), 899),
        (timedelta(seconds=900), 900),
        (timedelta(seconds=900, milliseconds=1), 900),
        (timedelta(hours=3), 900),
        (timedelta(milliseconds=-1), 0),
        (timedelta(hours=-3), 0),
    ],
)
def test_delay_seconds_rounds_down_and_clamps(ahead, expected) -> None:
    # Rounded down: a message may arrive up to a second early and the worker waits out the rest (it never starts
    # early); rounding up would make every occurrence up to a second late.
    assert delay_seconds(NOW + ahead, NOW) == expected


def test_delay_seconds_never_delays_past_the_fire_time() -> None:
    for ms in range(0, 905_000, 997):
        fire_at = NOW + timedelta(milliseconds=ms)
        assert NOW + timedelta(seconds=delay_seconds(fire_at, NOW)) <= fire_at
        assert 0 <= delay_seconds(fire_at, NOW) <= sqs.MAX_DELAY_SECONDS
