"""What a benchmark run spent, in the units AWS bills: per operation of each service, per Lambda invocation, and
summed over phases (`Totals`, what the cost scenario prices)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from scheduler_bench import prices


@dataclass
class DynamoDbSpend:
    """What DynamoDB calls spent, in the units it bills."""

    read_units: float = 0.0
    write_units: float = 0.0
    #: Of the write units, those of transactions (already doubled).
    transactional_write_units: float = 0.0
    #: Of the write units, those of global secondary indexes.
    index_write_units: float = 0.0
    #: Units computed from the rules because the endpoint reported none (see the module docstring).
    estimated_units: float = 0.0
    failed_conditions: int = 0
    items_read: int = 0

    def add_spend(self, other: DynamoDbSpend) -> None:
        """Add what `other` spent on DynamoDB."""
        for spent in fields(DynamoDbSpend):
            setattr(self, spent.name, getattr(self, spent.name) + getattr(other, spent.name))


@dataclass
class OperationCount(DynamoDbSpend):
    """What one phase spent on one operation of one service."""

    calls: int = 0
    #: SQS: billed requests (64 KB chunks), payload bytes, messages carried; empty receives.
    billed_requests: int = 0
    payload_bytes: int = 0
    messages: int = 0
    empty_receives: int = 0

    def add(self, other: OperationCount) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class Invocation:
    """One simulated Lambda invocation (api request, sweep or SQS batch) and its measured duration."""

    function: str
    seconds: float
    records: int = 0
    #: CPU time the invocation used in this process (its own threads; not the in-process target's, not the meter's).
    cpu_seconds: float = 0.0

    @property
    def billed(self) -> float:
        """Billed duration at the function's deployed memory (its CPU time stretched to that fraction of a vCPU),
        rounded up to the millisecond."""
        return math.ceil(prices.lambda_duration(self.function, self.seconds, self.cpu_seconds) * 1000) / 1000


@dataclass
class Totals(DynamoDbSpend):
    """Sums over a set of phases, in the units the prices are quoted in."""

    dynamodb_calls: int = 0
    sqs_requests: int = 0
    sqs_billed_requests: int = 0
    sqs_empty_receives: int = 0
    #: EventBridge PutEvents calls, and the events they carried (64 KB chunks: what is billed).
    events_calls: int = 0
    events_billed: int = 0
    #: CloudWatch Logs: the lines the functions write (theirs, Lambda's START/END/REPORT, the EMF metrics) and
    #: their bytes (what ingestion bills: the uncompressed message bytes).
    log_events: int = 0
    log_bytes: int = 0
    invocations: dict[str, int] = field(default_factory=dict)
    invocation_seconds: dict[str, float] = field(default_factory=dict)
    #: CPU time of the invocations, on this machine's whole core.
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    #: Billed Lambda duration: each invocation at its deployed memory (`Invocation.billed`), to the millisecond.
    billed_seconds: dict[str, float] = field(default_factory=dict)
    by_operation: dict[str, dict[str, float]] = field(default_factory=dict)

    def _figures(self) -> list[str]:
        """The names of the single figures (the rest are per function or per operation)."""
        return [f.name for f in fields(self) if not isinstance(getattr(self, f.name), dict)]

    def scaled(self, factor: float) -> dict[str, Any]:
        """Every figure multiplied by `factor` (e.g. 1/fires for per-occurrence figures)."""
        out: dict[str, Any] = {name: getattr(self, name) * factor for name in self._figures()}
        for attr in ("invocations", "invocation_seconds", "cpu_seconds", "billed_seconds"):
            out[attr] = {k: v * factor for k, v in getattr(self, attr).items()}
        out["by_operation"] = {op: {k: v * factor for k, v in row.items()} for op, row in self.by_operation.items()}
        return out

    def minus(self, other: Totals) -> Totals:
        """This run less a baseline run (same virtual timeline without the jobs): the marginal spend."""
        out = Totals(**{name: getattr(self, name) - getattr(other, name) for name in self._figures()})
        for attr in ("invocations", "invocation_seconds", "cpu_seconds", "billed_seconds"):
            mine: dict[str, Any] = getattr(self, attr)
            theirs: dict[str, Any] = getattr(other, attr)
            setattr(out, attr, {k: mine.get(k, 0) - theirs.get(k, 0) for k in set(mine) | set(theirs)})
        ops = set(self.by_operation) | set(other.by_operation)
        out.by_operation = {
            op: {
                k: self.by_operation.get(op, {}).get(k, 0.0) - other.by_operation.get(op, {}).get(k, 0.0)
                for k in set(self.by_operation.get(op, {})) | set(other.by_operation.get(op, {}))
            }
            for op in ops
        }
        return out
