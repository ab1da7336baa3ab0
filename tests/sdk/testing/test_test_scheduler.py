"""The SDK's test scheduler (punctual_sdk.testing): the deployed core in-process on moto, on a virtual clock.

Each test runs its scheduler in-process (no emulator, no network): moto answers DynamoDB and SQS.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from punctual_sdk.errors import InvalidArgument, NotFound, Unprocessable
from punctual_sdk.models import Job, JobState, Run, RunState, SigningKeys, Triggered
from punctual_sdk.receiver import Delivery, verify_v2
from punctual_sdk.testing import Delivered, HandlerContext, Request, Response, TargetFailure, TestScheduler
from punctual_sdk.testing.pytest_plugin import punctual  # noqa: F401 (the fixture)

#: A Monday, 09:00 UTC.
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
WEEK = 7 * 86400


def handler_job(name: str, schedule: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"schedule": schedule, "target": {"type": "handler", "name": name}, **fields}


def test_a_charge_in_seven_days_runs_once_at_its_time() -> None:
    charges: list[HandlerContext] = []
    with TestScheduler(handlers={"billing.charge": charges.append}, start=T0) as scheduler:
        # Given a one-shot job a week away
        job = scheduler.create(
            handler_job("billing.charge", {"type": "once", "delay_seconds": WEEK}, payload={"card": "c_1"})
        )
        # When the test moves the clock past it (how long that takes is measured in docs/benchmarks.md, not here)
        scheduler.advance(days=7, hours=1)
        # Then it ran once, at its time, with the deployed occurrence key and fencing token
        assert [(c.occurrence_key, c.fencing_token, c.attempt, c.payload) for c in charges] == [
            (f"{job.job_id}:2026-03-09T09:00:00Z", 1, 1, {"card": "c_1"})
        ]
        assert scheduler.deliveries[0].at == T0 + timedelta(days=7)
        assert [(r.state, r.attempts) for r in scheduler.runs(job.job_id)] == [("SUCCEEDED", 1)]


def test_a_daily_cron_keeps_its_local_hour_across_the_spring_dst_change() -> None:
    fired: list[datetime] = []
    start = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)  # Europe/Berlin moves to CEST on Sunday 2026-03-29
    with TestScheduler(handlers={"report": lambda c: fired.append(c.scheduled_for)}, start=start) as scheduler:
        scheduler.create(
            handler_job("report", {"type": "cron", "expression": "0 9 * * *", "timezone": "Europe/Berlin"})
        )
        scheduler.advance(days=4)
    # 09:00 in Berlin: 08:00 UTC in winter time, 07:00 UTC from the change on
    assert fired == [
        datetime(2026, 3, 28, 8, 0, tzinfo=UTC),
        datetime(2026, 3, 29, 7, 0, tzinfo=UTC),
        datetime(2026, 3, 30, 7, 0, tzinfo=UTC),
        datetime(2026, 3, 31, 7, 0, tzinfo=UTC),
    ]


def test_a_failing_receiver_is_retried_with_backoff_until_dead_and_the_occurrence_lands_in_the_dlq() -> None:
    with TestScheduler(receivers=lambda request: 503, start=T0) as scheduler:
        job = scheduler.create(
            {
                "schedule": {"type": "once", "delay_seconds": 60},
                "target": {"type": "http", "url": "https://shop.example.com/hook"},
                "retry": {"max_attempts": 3, "initial_backoff_seconds": 10, "max_backoff_seconds": 60},
            }
        )
        scheduler.advance(hours=1)
        attempts = scheduler.deliveries
        # Three attempts of one occurrence, each later than the last (the backoff ran on the virtual clock)
        assert [d.attempt for d in attempts] == [1, 2, 3]
        assert len({d.occurrence_key for d in attempts}) == 1
        assert attempts[0].at < attempts[1].at < attempts[2].at
        assert all("HTTP 503" in (d.error or "") for d in attempts)
        [run] = scheduler.runs(job.job_id)
        assert (run.state, run.attempts) == ("DEAD", 3)
        [letter] = scheduler.dead_letters()
        assert attempts[0].occurrence_key in json.dumps(letter)


@pytest.mark.parametrize(
    ("policy", "after_resume"),
    [
        ("skip", ["09:40", "09:45"]),  # what fell due while paused is dropped
        ("run_once", ["09:35", "09:40", "09:45"]),  # one run for them all, at once
        ("run_all", ["09:10", "09:15", "09:20", "09:25", "09:30", "09:35", "09:40", "09:45"]),
    ],
)
def test_pause_and_resume_apply_the_misfire_policy(policy: str, after_resume: list[str]) -> None:
    fired: list[datetime] = []
    with TestScheduler(handlers={"tick": lambda c: fired.append(c.scheduled_for)}, start=T0) as scheduler:
        job = scheduler.create(
            handler_job("tick", {"type": "cron", "expression": "*/5 * * * *"}, misfire_policy=policy)
        )
        scheduler.advance(minutes=6)
        assert scheduler.pause(job.job_id).state == "PAUSED"
        scheduler.advance(minutes=30)
        assert [f.strftime("%H:%M") for f in fired] == ["09:05"]  # nothing while paused
        scheduler.resume(job.job_id)
        scheduler.advance(minutes=10)
    assert [f.strftime("%H:%M") for f in fired[1:]] == after_resume


def test_an_http_receiver_gets_the_signed_request_a_deployed_worker_sends() -> None:
    flask = pytest.importorskip("flask")  # a receiver framework; the test scheduler itself needs none
    flask_request = flask.request
    # Given a Flask app that keeps what it receives
    app = flask.Flask("shop")
    seen: list[tuple[dict[str, str], bytes]] = []

    @app.post("/charge")
    def charge() -> tuple[str, int]:
        seen.append((dict(flask_request.headers), flask_request.get_data()))
        return "", 204

    with TestScheduler(receivers={"https://shop.example.com": app}, start=T0) as scheduler:
        job = scheduler.create(
            {
                "schedule": {"type": "once", "delay_seconds": 120},
                "target": {"type": "http", "url": "https://shop.example.com/charge"},
                "payload": {"order": 7},
            }
        )
        scheduler.advance(minutes=3)
        keys = scheduler.signing_keys(job.job_id).by_id()
        # Then the request verifies with the job's signing keys, as a receiver checks it
        [(headers, body)] = seen
        verified = verify_v2(keys, "POST", headers["Host"], "/charge", headers, body)
        # And it is signed as a new deployment signs: v2 alone, no v1 for receivers older than v2
        assert "v2=" in headers["X-Scheduler-Signature"] and "v1=" not in headers["X-Scheduler-Signature"]
        assert verified.occurrence_key == f"{job.job_id}:2026-03-02T09:02:00Z"
        assert verified.fencing_token == 1
        assert json.loads(body) == {"order": 7}
        assert headers["Idempotency-Key"] == verified.occurrence_key
        # ... and carries no v1 signature: the functions sign v1 only where a deployment turns it on
        assert ",v1=" not in headers["X-Scheduler-Signature"]
        assert scheduler.runs(job.job_id)[0].state == "SUCCEEDED"


def test_an_asgi_receiver_and_a_trigger_run_now() -> None:
    received: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        message = await receive()
        received.append({"path": scope["path"], "body": json.loads(message["body"])})
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    with TestScheduler(receivers=app, start=T0) as scheduler:
        job = scheduler.create(
            {
                "schedule": {"type": "cron", "expression": "0 0 1 1 *"},
                "target": {"type": "http", "url": "https://hooks.example.com/run"},
                "payload": [1, 2],
            }
        )
        scheduler.trigger(job.job_id)
        scheduler.advance()  # runs what is due now
    assert received == [{"path": "/run", "body": [1, 2]}]


def test_a_handler_can_fail_permanently_and_a_run_is_not_retried() -> None:
    def refuse(context: HandlerContext) -> None:
        raise TargetFailure("permanent", "card declined")

    with TestScheduler(handlers={"billing.charge": refuse}, start=T0) as scheduler:
        job = scheduler.create(handler_job("billing.charge", {"type": "once", "delay_seconds": 10}))
        scheduler.advance(minutes=30)
        assert [d.attempt for d in scheduler.deliveries] == [1]
        assert scheduler.runs(job.job_id)[0].state == "DEAD"


def test_the_fixture_gives_a_started_scheduler(punctual: TestScheduler) -> None:  # noqa: F811
    calls: list[str] = []
    punctual.handler("hello")(lambda context: calls.append(context.occurrence_key))
    punctual.create(handler_job("hello", {"type": "once", "delay_seconds": 30}))
    punctual.advance(minutes=1)
    assert len(calls) == 1


# -- bad input: a clear exception naming what to fix, and nothing recorded ----------------------------------


def test_an_invalid_job_is_refused_with_the_field_to_fix_and_nothing_is_stored() -> None:
    with TestScheduler(handlers={"tick": lambda c: None}, start=T0) as scheduler:
        with pytest.raises(Unprocessable) as refused:
            scheduler.create(handler_job("tick", {"type": "cron", "expression": "61 * * * *"}))
        assert refused.value.field is not None and "schedule" in refused.value.field
        with pytest.raises(Unprocessable, match="no handler named 'nope'"):
            scheduler.create(handler_job("nope", {"type": "once", "delay_seconds": 10}))
        with pytest.raises(NotFound):
            scheduler.get("no-such-job")
        assert scheduler.list() == []


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: TestScheduler(start=datetime(2026, 3, 2, 9, 0)), "timezone-aware"),
        (lambda: TestScheduler(settings={"shard_cont": 2}), "unknown setting"),
        (lambda: TestScheduler(receivers={"shop.example.com": lambda r: 200}), "URL prefix"),
        (lambda: TestScheduler(handlers={"bad name!": lambda c: None}), "not valid"),
        (lambda: TestScheduler(receivers=lambda a, b, c, d: 200), "cannot tell how to call"),
    ],
)
def test_a_misconfigured_scheduler_says_what_to_fix(make: Callable[[], Any], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        make().start().close()


def test_the_clock_only_moves_forward_and_an_unstarted_scheduler_says_so() -> None:
    scheduler = TestScheduler(start=T0)
    with pytest.raises(InvalidArgument, match="start the test scheduler first"):
        scheduler.advance(minutes=1)
    with scheduler:
        with pytest.raises(InvalidArgument, match="negative"):
            scheduler.advance(minutes=-1)
        with pytest.raises(InvalidArgument, match="timedelta"):
            scheduler.advance(5)  # type: ignore[arg-type]
        assert scheduler.now() == T0


def test_a_receiver_that_answers_what_no_server_can_is_reported_to_the_test() -> None:
    with TestScheduler(receivers=lambda request: "fine", start=T0) as scheduler:
        scheduler.create(
            {
                "schedule": {"type": "once", "delay_seconds": 10},
                "target": {"type": "http", "url": "https://a.example/x"},
            }
        )
        with pytest.raises(InvalidArgument, match="returns a Response, an int status or None"):
            scheduler.advance(minutes=1)


def test_the_sdk_client_runs_against_the_test_scheduler() -> None:
    pytest.importorskip("punctual_sdk.client")
    with TestScheduler(handlers={"tick": lambda c: None}, start=T0) as scheduler:
        client = scheduler.client()
        job = client.create(handler_job("tick", {"type": "once", "delay_seconds": 10}))
        scheduler.advance(minutes=1)
        assert [run.state for run in client.iter_runs(job.job_id)] == ["SUCCEEDED"]


def _responses(items: Iterable[Response]) -> list[int]:
    return [r.status for r in items]


def test_a_plain_receiver_gets_a_request_and_may_answer_a_response() -> None:
    got: list[Request] = []

    def receive(request: Request) -> Response:
        got.append(request)
        return Response(202)

    with TestScheduler(receivers=receive, start=T0) as scheduler:
        scheduler.create(
            {
                "schedule": {"type": "once", "delay_seconds": 10},
                "target": {"type": "http", "url": "https://a.example/x"},
            }
        )
        scheduler.advance(minutes=1)
        assert [r.path for r in got] == ["/x"]
        assert got[0].header("idempotency-key") == scheduler.deliveries[0].occurrence_key
        assert _responses(r for _, r in scheduler.http.sent if isinstance(r, Response)) == [202]


# -- what a test reads: the SDK's models, one Delivery, a quiet scheduler -------------------------------------------


def test_the_reads_are_the_sdks_models() -> None:
    with TestScheduler(handlers={"tick": lambda c: None}, start=T0) as scheduler:
        job = scheduler.create({**handler_job("tick", {"type": "cron", "expression": "*/5 * * * *"}), "name": "tick"})
        triggered = scheduler.trigger(job.job_id)
        scheduler.advance(minutes=6)

        assert isinstance(job, Job) and job.state is JobState.ACTIVE and job.name == "tick"
        assert isinstance(triggered, Triggered) and triggered.occurrence_key.startswith(job.job_id)
        assert [j.job_id for j in scheduler.list()] == [job.job_id] == [scheduler.get(job.job_id).job_id]
        runs = scheduler.runs(job.job_id)
        assert runs and all(isinstance(r, Run) and r.state is RunState.SUCCEEDED for r in runs)
        assert isinstance(scheduler.signing_keys(job.job_id), SigningKeys)
        assert scheduler.update(job.job_id, {"name": "tock"}, if_match=job.version).name == "tock"
        assert scheduler.pause(job.job_id).state is JobState.PAUSED
        assert scheduler.resume(job.job_id).state is JobState.ACTIVE
        assert scheduler.cancel(job.job_id).state is JobState.CANCELLED
        assert scheduler.client() is scheduler.client()
        with pytest.raises(InvalidArgument, match=r"job\.job_id"):
            scheduler.runs(job)  # type: ignore[arg-type]


def test_a_delivery_is_the_receiver_kits_delivery_with_its_outcome() -> None:
    def refuse(context: HandlerContext) -> None:
        raise TargetFailure("permanent", "card declined")

    with TestScheduler(handlers={"billing.charge": refuse}, receivers=lambda r: 204, start=T0) as scheduler:
        handled = scheduler.create(handler_job("billing.charge", {"type": "once", "delay_seconds": 60}, payload=[1]))
        posted = scheduler.create(
            {
                "schedule": {"type": "once", "delay_seconds": 120},
                "target": {"type": "http", "url": "https://shop.example.com/charge"},
                "payload": {"order": 7},
            }
        )
        first, second = scheduler.advance(minutes=3)

    assert all(isinstance(d, Delivered) and isinstance(d, Delivery) for d in (first, second))
    assert (first.job_id, first.source, first.payload, first.raw) == (handled.job_id, "handler", [1], None)
    assert first.scheduled_for == "2026-03-02T09:01:00Z" and first.at == T0 + timedelta(minutes=1)
    assert first.result is None and "card declined" in (first.error or "")
    assert (second.job_id, second.source, second.payload) == (posted.job_id, "http", {"order": 7})
    assert isinstance(second.raw, Request) and second.raw.header("Idempotency-Key") == second.occurrence_key
    assert (second.result, second.error, second.fencing_token, second.attempt) == ("HTTP 204", None, 1, 1)


def _a_day_with_a_failing_receiver(**options: Any) -> None:
    with TestScheduler(receivers=lambda request: 503, start=T0, **options) as scheduler:
        scheduler.create(
            {
                "schedule": {"type": "once", "delay_seconds": 60},
                "target": {"type": "http", "url": "https://shop.example.com/hook"},
                "retry": {"max_attempts": 2, "initial_backoff_seconds": 10},
            }
        )
        scheduler.advance(days=1)


def test_the_scheduler_is_quiet_unless_asked(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    core = logging.getLogger("scheduler.core.execution.record")
    level = core.level
    # Given a day in which a job is created, retried and dies (each logged by the deployed core)
    _a_day_with_a_failing_receiver()
    quiet, quiet_records = capfd.readouterr(), list(caplog.records)
    caplog.clear()
    _a_day_with_a_failing_receiver(log_level="INFO")
    asked, asked_records = capfd.readouterr(), list(caplog.records)

    # Then by default nothing of the core's reaches the test's output or its logging; asked, its JSON lines do
    assert (quiet.out, quiet.err, quiet_records) == ("", "", [])
    assert '"message":"occurrence dead"' in asked.out and '"message":"job created"' in asked.out
    assert {r.getMessage() for r in asked_records} >= {"job created", "occurrence dead"}
    # And the core's loggers are as they were once the scheduler is closed
    assert core.level == level


def test_a_log_level_that_is_not_one_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="log_level"):
        TestScheduler(log_level="LOUD")


@pytest.mark.parametrize(("absent", "names"), [("moto", "moto"), ("scheduler", "punctual-core")])
def test_without_the_testing_extra_the_import_says_which_extra_to_install(absent: str, names: str) -> None:
    # Given an environment without part of the `testing` extra (its module hidden from the import system)
    script = f"import sys; sys.modules[{absent!r}] = None; import punctual_sdk.testing"

    # When the test scheduler is imported
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)

    # Then the ImportError names the extra to install, and what it would bring
    assert ran.returncode != 0
    assert "ImportError: punctual_sdk.testing needs the `testing` extra" in ran.stderr
    assert 'pip install "punctual-sdk[testing]"' in ran.stderr and names in ran.stderr
