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


def test_every_id_the_scheduler_makes_keeps_the_rule_the_api_checks_it_by() -> None:
    # The API refuses an id that breaks its rule before any store sees it: none it ever handed out may break one
    import random
    from datetime import UTC, datetime

    from scheduler.core.jobs.backfill import new_backfill_id
    from scheduler.core.jobs.bulk import operation_id
    from scheduler.core.model.ids import EXTERNAL_ID_RULE, JOB_ID, OCCURRENCE, TOKEN_ID
    from scheduler.core.model.keys import occurrence_key
    from scheduler_sim.determinism import SeededIds

    latest = datetime(2199, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC)
    for ids in (RandomIds(), SeededIds(random.Random(7))):
        job_id = ids.job_id()
        assert JOB_ID.problem(job_id) is None
        assert OCCURRENCE.problem(occurrence_key(job_id, latest)) is None
        assert OCCURRENCE.problem(occurrence_key("x" * 128, latest)) is None  # the longest job id
        assert TOKEN_ID.problem(new_backfill_id(latest, ids)) is None
    assert TOKEN_ID.problem(operation_id("arn:aws:iam::111111111111:role/a#AROA1", "k" * 255)) is None
    assert EXTERNAL_ID_RULE.problem("order-981") is None and EXTERNAL_ID_RULE.problem("~" * 128) is None
    for rule in (JOB_ID, EXTERNAL_ID_RULE, OCCURRENCE, TOKEN_ID):
        assert rule.problem("a" * 3000) is not None and rule.problem("") is not None
    assert JOB_ID.problem("a:b") is not None and JOB_ID.problem("a/b") is not None
