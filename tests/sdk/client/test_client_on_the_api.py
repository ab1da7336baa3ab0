"""The SDK's client against the real API: the local API server (what `scripts/dev` runs) in this process, with the
api Lambda handler on DynamoDB Local and the SQS emulator. Every operation a user calls, over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from punctual_sdk import errors
from punctual_sdk.client import Client
from punctual_sdk.models import CronSchedule, HandlerTarget, JobDefinition, JobState, RateSchedule
from tests.sdk.http_server import serving

pytestmark = pytest.mark.emulator

TENANT = "arn:aws:iam::111111111111:user/alice"


@pytest.fixture
def api_url(resources: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The local API server on 127.0.0.1 for this test's tables and queues; token 't-alice' is TENANT."""
    from scheduler.handlers import api, wiring
    from scheduler_local.api_server import BoundedServer, make_handler

    for name, value in resources.env().items():
        monkeypatch.setenv(name, value)
    for name in ("SCHEDULER_SIGNING_SECRET", "SCHEDULER_SIGNING_SECRET_ARN", "SCHEDULER_SHARD_COUNT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(api.metrics.provider, "namespace", "PunctualTest")
    wiring.container.cache_clear()
    server = BoundedServer(("127.0.0.1", 0), make_handler(api.lambda_handler, {"t-alice": TENANT}), workers=2)
    with serving(server) as url:
        yield url
    wiring.container.cache_clear()


def test_every_operation_round_trips_through_the_api(api_url: str) -> None:
    client = Client.local(api_url, "t-alice", retries=1)
    nightly = JobDefinition(
        name="nightly",
        schedule=CronSchedule(expression="0 3 * * *", timezone="Europe/Berlin"),
        target=HandlerTarget(name="payments.charge"),
        payload={"report": "daily"},
    )

    # create, replayed with the same key; batch
    job = client.create(nightly, idempotency_key="nightly-1")
    again = client.create(nightly, idempotency_key="nightly-1")
    assert (again.job_id, again.replayed, job.replayed) == (job.job_id, True, False)
    assert isinstance(job.schedule, CronSchedule) and job.schedule.timezone == "Europe/Berlin"
    every = JobDefinition(schedule=RateSchedule(every_seconds=3600), target=HandlerTarget(name="payments.charge"))
    batch = client.create_batch([every, (every, "rate-2")])
    assert all(not isinstance(r, errors.ApiError) for r in batch)

    # get with a preview, list with a filter, iterate every page
    assert len(client.get(job.job_id, preview=3).next_runs) == 3
    assert {j.job_id for j in client.iter_jobs(page_size=1)} >= {job.job_id}
    # update with If-Match; a stale version is PreconditionFailed
    updated = client.update(job.job_id, {"name": "nightly-report"}, if_match=job.version)
    assert updated.name == "nightly-report" and updated.version == job.version + 1
    with pytest.raises(errors.PreconditionFailed) as stale:
        client.update(job.job_id, {"name": "x"}, if_match=job.version)
    assert stale.value.detail

    # pause, list PAUSED, resume, trigger, runs
    assert client.pause(job.job_id).state is JobState.PAUSED
    assert [j.job_id for j in client.list_jobs(JobState.PAUSED).items] == [job.job_id]
    assert client.resume(job.job_id).state is JobState.ACTIVE
    triggered = client.trigger(job.job_id)
    assert triggered.occurrence_key.startswith(job.job_id + ":")
    assert list(client.iter_runs(job.job_id)) == []  # dispatched by the sweeper and worker, not running here

    # backfill of the last two days, listed, read, cancelled
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    backfill = client.start_backfill(job.job_id, now - timedelta(days=2), now - timedelta(hours=1))
    assert backfill.total >= 1 and backfill.running
    assert [b.backfill_id for b in client.iter_backfills(job.job_id)] == [backfill.backfill_id]
    assert client.backfill(job.job_id, backfill.backfill_id).backfill_id == backfill.backfill_id
    assert not client.cancel_backfill(job.job_id, backfill.backfill_id).running

    # signing keys, forecast, health
    keys = client.signing_keys(job.job_id)
    assert keys.job_id == job.job_id and keys.by_id() and keys.current_key_id in keys.by_id()
    assert client.forecast(5).minutes
    assert client.health() == {"status": "ok"}

    # cancel; then a change is a Conflict and another tenant's view is NotFound
    assert client.cancel(job.job_id).state is JobState.CANCELLED
    with pytest.raises(errors.Conflict):
        client.pause(job.job_id)
    with pytest.raises(errors.NotFound) as missing:
        client.get("no-such-job")
    assert "no-such-job" in missing.value.detail


def test_invalid_definitions_and_bad_tokens_raise_typed_errors_with_the_apis_detail(api_url: str) -> None:
    client = Client.local(api_url, "t-alice", retries=0)

    with pytest.raises(errors.Unprocessable) as invalid:
        client.create(
            {
                "schedule": {"type": "cron", "expression": "61 * * * *"},
                "target": {"type": "handler", "name": "payments.charge"},
            }
        )
    assert invalid.value.field == "schedule.expression"
    assert "61" in invalid.value.detail
    assert list(client.iter_jobs()) == []  # nothing was recorded

    with pytest.raises(errors.Unauthorized):
        Client.local(api_url, "t-nobody", retries=0).list_jobs()


def test_a_bulk_pause_by_label_and_the_operator_view_through_the_api(api_url: str) -> None:
    # Given two jobs with a label and one without it
    client = Client.local(api_url, "t-alice", retries=1)
    fleet = f"f{datetime.now(UTC):%H%M%S%f}"

    def job(labels: dict[str, str]) -> str:
        schedule, target = CronSchedule(expression="0 3 * * *"), HandlerTarget(name="payments.charge")
        created = client.create(JobDefinition(schedule=schedule, target=target, labels=labels))
        assert created.labels == labels
        return created.job_id

    labelled, other = [job({"fleet": fleet}), job({"fleet": fleet})], job({"fleet": f"{fleet}x"})

    # When the tenant pauses every job of the label, as one operation
    report = client.bulk("pause", {"fleet": fleet})

    # Then exactly the labelled jobs are paused, and the operation reads back as it ended
    assert (report.state, report.matched, report.changed, report.failed) == ("DONE", 2, 2, [])
    assert [client.get(job_id).state for job_id in labelled] == [JobState.PAUSED, JobState.PAUSED]
    assert client.get(other).state == JobState.ACTIVE
    assert client.operation(report.operation_id).changed == 2
    # and a tenant that is not an operator is refused the operator's view with the reason
    with pytest.raises(errors.ApiError) as refused:
        client.operator_status()
    assert refused.value.status == 403 and "not an operator" in refused.value.detail
