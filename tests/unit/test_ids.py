"""The core's identifiers come from its `Ids` port: random in production, given by whoever wires the core (the
simulator draws them from its seed), never patched."""

from __future__ import annotations

import re

from scheduler.core.model.timefmt import to_ms
from scheduler.core.runtime.ids import RandomIds
from tests.unit.fixtures import TENANT, MemoryCore, StubMessage, at


class CountingIds:
    """Ids a test can predict: job-1, job-2, ...; tokens 000000000001, 000000000002, ..."""

    def __init__(self) -> None:
        self.drawn = 0

    def job_id(self) -> str:
        self.drawn += 1
        return f"job-{self.drawn}"

    def token(self) -> str:
        self.drawn += 1
        return f"{self.drawn:012x}"


def test_random_ids_have_the_production_formats() -> None:
    ids = RandomIds()

    job_ids = {ids.job_id() for _ in range(100)}
    tokens = {ids.token() for _ in range(100)}

    assert len(job_ids) == 100 and all(re.fullmatch(r"[0-9a-f]{32}", i) for i in job_ids)
    assert len(tokens) == 100 and all(re.fullmatch(r"[0-9a-f]{12}", t) for t in tokens)


def test_jobs_attempt_owners_and_backfills_take_their_ids_from_the_port() -> None:
    ids = CountingIds()
    world = MemoryCore.build(ids=ids)

    # A job's id
    job, dispatch = world.due()
    assert job.job_id == "job-1"

    # An attempt's owner: the worker's id and a token
    world.executor(worker_id="worker-7").execute(dispatch, StubMessage())
    run = world.ledger.get(dispatch.key)
    assert run is not None and run.owner == "worker-7/000000000002"

    # A backfill's id: its creation instant (sortable) and a token
    recurring = world.create({"type": "cron", "expression": "* * * * *"})
    world.set_time(at("2026-01-05T12:00"))
    backfill = world.backfill.start(TENANT, recurring.job_id, at("2026-01-05T09:30"), at("2026-01-05T09:40"))
    assert recurring.job_id == "job-3"
    assert backfill.backfill_id == f"{to_ms(world.now()):012x}000000000004"
