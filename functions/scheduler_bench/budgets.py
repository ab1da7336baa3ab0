"""The cost budgets for a fire, each beside what a run measured and the floor of the design under it: the fewest
units the design spends on that fire at full pages and batches (docs/cost.md, "The fire path" and "Submitting a
job"), priced with the run's own Lambda. Rendered into bench/results.md by `scheduler_bench.report`.

The budgets count DynamoDB, SQS, events and Lambda (requests and duration), as the budgets are stated; CloudWatch
Logs, which the benchmark also counts, are shown beside the dollars but not in them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler.settings import Settings
from scheduler_bench import prices
from scheduler_bench.cost import BATCH_SUBMIT

FIRE_PATH = ("sweeper", "worker")


@dataclass(frozen=True)
class Units:
    """Per-fire DynamoDB units and SQS requests."""

    write: float
    read: float
    sqs: float = 0.0

    def __add__(self, other: Units) -> Units:
        return Units(self.write + other.write, self.read + other.read, self.sqs + other.sqs)


#: Occurrences a full message carries (the deployed `occurrences_per_message`, scheduler.core.execution.packing).
PER_MESSAGE = Settings().occurrences_per_message
#: Per 10 full messages a send, a receive, a delete and the batch's hold.
SQS_PER_FIRE = 4 / 10 / PER_MESSAGE
#: What every one-shot fire spends whatever the load: the sweep's conditional advance, the worker's claim and
#: finish (its message carries the job), and its share of the SQS requests.
ONE_SHOT_ITEMS = Units(write=3.0, read=0.0, sqs=SQS_PER_FIRE)
#: A recurring fire adds the chain's next timer and its run's history entry (writes), and reads its job and the
#: run before it (the overlap check: a keys-only query and a read by key).
RECURRING_ITEMS = Units(write=5.0, read=2.0, sqs=SQS_PER_FIRE)
#: A full page's own work (query, checkpoint, the tenant's dispatch budget) shared by its 99 timers.
PAGE_SHARE = Units(write=0.05, read=0.02)
#: The batch's hold alone (one ChangeMessageVisibilityBatch per 10 messages): what bounds a dead worker's batch to
#: 20 s.
HOLD_SQS = 1 / 10 / PER_MESSAGE
#: A create: the job, the tenant's quota counter and the first timer in one transaction (2 W each), and the job's
#: keys-only `by_tenant` entry (1 W).
CREATE_WRITES = 3 * 2.0 + 1.0
#: A job created 25 a request: its job and timer (2 W each), and its share of the batch's quota change (2 W) and of
#: its one job-list entry (the item that names the batch's jobs, 2 W under 1 KB, and its keys-only index entry).
BATCH_CREATE_WRITES = 2 * 2.0 + (2.0 + 2.0 + 1.0) / BATCH_SUBMIT


@dataclass(frozen=True)
class Row:
    """One budget against one run."""

    case: str
    measure: str
    limit: float
    measured: float
    floor: float
    money: bool = False
    #: What to say beside the measurement.
    note: str = ""
    #: The measured dollars with CloudWatch Logs, shown beside them.
    with_logs: float | None = None
    #: What to say beside the floor.
    floor_note: str = ""

    @property
    def met(self) -> bool:
        return self.measured <= self.limit + 1e-9

    @property
    def below_floor(self) -> bool:
        """Whether the budget asks for less than the design can spend at best."""
        return self.limit < self.floor - 1e-9


def fire_units(run: dict[str, Any], phases: tuple[str, ...] = FIRE_PATH) -> Units:
    """A cost run's units and SQS requests per fire over `phases` (the fire path unless told)."""
    by = run["per_fire"]["by_function"]
    return Units(
        write=sum(by[p]["write_units"] for p in phases),
        read=sum(by[p]["read_units"] for p in phases),
        sqs=sum(by[p]["sqs_billed_requests"] for p in phases),
    )


def _lambda_usd(run: dict[str, Any], part: str = "fire_path") -> float:
    usd = run["per_million_fires_usd"][part]
    return float(usd["lambda_requests"] + usd["lambda_duration"])


def _dynamodb_sqs_usd(units: Units) -> float:
    return prices.per_million(units.read, units.write, units.sqs, 0.0, 0.0)["total"]


def _without_logs(run: dict[str, Any], part: str = "fire_path") -> float:
    usd = run["per_million_fires_usd"][part]
    return float(usd["total"] - usd["cloudwatch_logs"])


def batch_submit_usd(
    batch: dict[str, Any], logs: bool = True, units: Units | None = None
) -> tuple[float, float, float]:
    """What submitting one job costs, per million, 25 a request (the batch scenario's measurement, or `units` for
    its DynamoDB and SQS part): the writes, the api Lambda and (with `logs`) the logs, and its share of an API
    Gateway request on an HTTP API and on REST."""
    per_job = batch["per_job"]
    per_request = 1 / batch["jobs_per_request"]
    seconds = per_job["billed_seconds"].get("api", 0.0)
    spent = units or Units(per_job["write_units"], per_job["read_units"], per_job["sqs_billed_requests"])
    submit = prices.per_million(
        read_units=spent.read,
        write_units=spent.write,
        sqs_requests=spent.sqs,
        lambda_requests=per_request,
        lambda_gb_seconds=prices.gb_seconds({"api": seconds}),
        log_bytes=(per_job.get("log_bytes", 0.0) + per_request * prices.API_ACCESS_LOG_BYTES) if logs else 0.0,
    )["total"]
    http = per_request * prices.API_GATEWAY_HTTP_REQUEST * 1e6
    rest = per_request * prices.PRICES["api_gateway_rest_request"] * 1e6
    return submit, http, rest


def _provisioned(units: Units, on_demand: float) -> float:
    """`on_demand` with its DynamoDB part on provisioned capacity at 70 % instead."""
    return (
        on_demand
        - prices.per_million(units.read, units.write, 0, 0, 0)["dynamodb"]
        + prices.provisioned_dynamodb_per_million(units.read, units.write)
    )


def _fire_rows(
    case: str, run: dict[str, Any], floor: Units, floor_usd: float, limits: dict[str, float], why: str = ""
) -> list[Row]:
    """The unit and dollar rows of one fire; `floor_usd` is the floor's units priced with a herd's Lambda (full
    pages and batches); `why` says why the run's units may differ from a steady fire's."""
    measured = fire_units(run)
    with_logs = run["per_million_fires_usd"]["fire_path"]["total"]
    rows = [
        Row(case, "write units", limits["write"], measured.write, floor.write, note=why),
        Row(case, "read units", limits["read"], measured.read, floor.read, note=why),
    ]
    if "sqs" in limits:
        rows.append(
            Row(
                case,
                "SQS requests",
                limits["sqs"],
                measured.sqs,
                floor.sqs,
                floor_note=f"{floor.sqs - HOLD_SQS:.2f} without the batch's hold; {PER_MESSAGE} occurrences a message",
            )
        )
    rows.append(Row(case, "$ / M", limits["usd"], _without_logs(run), floor_usd, money=True, with_logs=with_logs))
    if "provisioned" in limits:
        rows.append(
            Row(
                case,
                "$ / M, provisioned at 70 %",
                limits["provisioned"],
                _provisioned(measured, _without_logs(run)),
                _provisioned(floor, floor_usd),
                money=True,
            )
        )
    return rows


def _submit_rows(case: str, run: dict[str, Any], batch: dict[str, Any] | None, fire_floor: float) -> list[Row]:
    """Submit + fire of a one-shot job on an HTTP API: one by one, and 25 a request as the batch scenario measured."""
    http = prices.API_GATEWAY_HTTP_REQUEST * 1e6
    api = run["per_fire"]["by_function"]["api"]
    api_lambda = _lambda_usd(run, "with_submission") - _lambda_usd(run)
    fire = _without_logs(run)
    one = fire + _dynamodb_sqs_usd(fire_units(run, ("api",))) + api_lambda + http
    rows = [
        Row(
            case,
            "$ / M, submitted one by one",
            6.50,
            one,
            fire_floor + _dynamodb_sqs_usd(Units(CREATE_WRITES, 0.0)) + api_lambda + http,
            money=True,
            note=f"the create {api['write_units']:.2f} W",
        )
    ]
    if batch:
        submitted, share, _ = batch_submit_usd(batch, logs=False)
        floor, _, _ = batch_submit_usd(batch, logs=False, units=Units(BATCH_CREATE_WRITES, 0.0))
        rows.append(
            Row(
                case,
                f"$ / M, submitted {batch['jobs_per_request']} a request",
                5.00,
                fire + submitted + share,
                fire_floor + floor + share,
                money=True,
                note=f"{batch['per_job']['write_units']:.2f} W a job",
            )
        )
    return rows


def rows(cost: dict[str, Any]) -> list[Row]:
    """Every budget against the cost scenario `cost` (a results.json "cost" section). The floors in
    dollars take the herd rows' Lambda (full pages and batches), for the busy rows too."""
    runs = {kind: {r["batch_size"]: r for r in cost.get(kind, [])} for kind in ("one_shot", "recurring",
            "one_shot_herd", "recurring_herd")}  # fmt: skip
    batch = cost.get("batch_submit")
    out: list[Row] = []
    herd, busy = runs["one_shot_herd"].get(10), runs["one_shot"].get(10)
    if herd:
        floor = ONE_SHOT_ITEMS + PAGE_SHARE
        floor_usd = _dynamodb_sqs_usd(floor) + _lambda_usd(herd)
        limits = {"write": 3.5, "read": 1.2, "sqs": 0.35, "usd": 2.40, "provisioned": 1.20}
        out += _fire_rows("one-shot fire, herd", herd, floor, floor_usd, limits)
        events = sum(herd["per_fire"]["by_function"][p]["events_billed"] for p in FIRE_PATH)
        out.append(Row("one-shot fire, herd", "events (none unless the job asks)", 0.0, events, 0.0))
        out += _submit_rows("one-shot submit + fire, herd", herd, batch, floor_usd)
        if busy:
            out += _fire_rows("one-shot fire, busy minutes", busy, floor, floor_usd, limits)
            out += _submit_rows("one-shot submit + fire, busy minutes", busy, batch, floor_usd)
    recurring_herd = runs["recurring_herd"].get(10)
    if recurring_herd:
        floor = RECURRING_ITEMS + PAGE_SHARE
        floor_usd = _dynamodb_sqs_usd(floor) + _lambda_usd(recurring_herd)
        limits = {"write": 6.5, "read": 2.0, "usd": 4.50}
        why = _fires_a_job(recurring_herd)
        out += _fire_rows("recurring fire, herd", recurring_herd, floor, floor_usd, limits, why)
        recurring = runs["recurring"].get(10)
        if recurring:
            out += _fire_rows(
                "recurring fire, busy minutes", recurring, floor, floor_usd, limits, _fires_a_job(recurring)
            )
    return out


def _fires_a_job(run: dict[str, Any]) -> str:
    """Why a run's recurring fire may read and write less than a steady one (the floor): its jobs' first and last."""
    fires = run.get("occurrences_per_job")
    return f"{fires} fires a job: the first reads no run before, the last writes no next timer" if fires else ""
