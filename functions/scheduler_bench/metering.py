"""Exact request accounting by hooking boto3 clients (botocore event handlers).

DynamoDB: every call that accepts `ReturnConsumedCapacity` gets `INDEXES` (the total plus the per-table and
per-index split, so index writes show), and the units in each response are summed as read or write units by
operation. Where the endpoint reports nothing, units are computed from the DynamoDB rules and marked estimated:

- a failed conditional write returns no ConsumedCapacity, yet AWS bills it: the larger of the existing item
  (when `ReturnValuesOnConditionCheckFailure=ALL_OLD` returned it) and the written item, in 1 KB steps, at least 1;
- a cancelled transaction: 2 units per item (items here are under 1 KB);
- an empty Query or Scan: AWS bills a minimum of 1 read unit (0.5 if eventually consistent) even when nothing
  is found; DynamoDB Local reports 0, so the minimum is applied.

Transactional writes: AWS bills 2 units per KB of each item written. DynamoDB Local's figure for a transaction
of several items is not that: it reports 2 table units and 2 units per index whatever the number of items (three
1-unit items come back as 2 units; `probe_transactions` records what this endpoint says). So the meter computes
every TransactWriteItems itself, from each item's image before the transaction and after it (read with an
unmetered GetItem whose time is taken out of the invocation's duration) and the table's key schema and indexes
(DescribeTable, once a table):

- the table: 2 x the larger image in 1 KB steps for each Put, Update and Delete, and for a ConditionCheck (billed
  as a write) the image it checked;
- each global secondary index: what the same write costs outside a transaction, the change to what the index
  stores (the doubling is the base table's alone; measured against DynamoDB by the dynoxide emulator's authors,
  nubo-db/dynoxide#188): nothing when the item's entry is unchanged or it has none, its size in 1 KB steps when
  it enters, leaves or changes in place, both sizes when its index key moves.

SQS: every request is counted, and billed in 64 KB chunks of its payload (message bodies plus attributes).
EventBridge (completion events): every PutEvents entry is an event, billed in 64 KB chunks.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any

import boto3
from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter
from aws_lambda_powertools.metrics import EphemeralMetrics

from scheduler.handlers.wiring import REDUNDANT_LOG_KEYS
from scheduler.schema import METRICS_NAMESPACE, SERVICE_NAME
from scheduler_bench import prices

READ_OPERATIONS = frozenset({"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"})
WRITE_OPERATIONS = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})
TRANSACTIONAL = frozenset({"TransactWriteItems", "TransactGetItems"})
SQS_CHUNK_BYTES = 64 * 1024


def attribute_size(value: dict[str, Any]) -> int:
    """Bytes of one DynamoDB attribute value, per the documented item-size rules."""
    kind, inner = next(iter(value.items()))
    if kind == "S":
        return len(str(inner).encode())
    if kind == "N":
        digits = str(inner).lstrip("-").replace(".", "").lstrip("0") or "0"
        return (len(digits) + 1) // 2 + 1
    if kind == "B":
        return len(inner) if isinstance(inner, bytes | bytearray) else len(str(inner))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind in ("SS", "BS"):
        return sum(len(str(v).encode()) for v in inner)
    if kind == "NS":
        return sum(attribute_size({"N": v}) for v in inner)
    if kind == "L":
        return 3 + sum(attribute_size(v) + 1 for v in inner)
    if kind == "M":
        return 3 + sum(len(k.encode()) + attribute_size(v) + 1 for k, v in inner.items())
    return 1


def item_size(item: dict[str, Any]) -> int:
    """Bytes of a DynamoDB item: attribute names plus values."""
    return sum(len(name.encode()) + attribute_size(value) for name, value in item.items())


def write_units(size: int) -> int:
    """Write units of an item of `size` bytes: 1 KB steps, at least 1."""
    return max(1, math.ceil(size / 1024))


@dataclass(frozen=True)
class IndexShape:
    """A global secondary index: its key attributes and what it stores of an item."""

    name: str
    keys: tuple[str, ...]
    #: "ALL", "KEYS_ONLY" or "INCLUDE" (with `included`).
    projection: str
    included: tuple[str, ...] = ()

    def entry(self, item: dict[str, Any] | None, table_keys: tuple[str, ...]) -> dict[str, Any] | None:
        """What this index stores of `item`: None when the item lacks one of its key attributes (sparse)."""
        if not item or any(name not in item for name in self.keys):
            return None
        if self.projection == "ALL":
            return item
        kept = {*table_keys, *self.keys, *(self.included if self.projection == "INCLUDE" else ())}
        return {name: value for name, value in item.items() if name in kept}


@dataclass(frozen=True)
class TableShape:
    """A table's key attributes and its global secondary indexes, as DescribeTable tells them."""

    keys: tuple[str, ...]
    indexes: tuple[IndexShape, ...] = ()

    @classmethod
    def described(cls, table: dict[str, Any]) -> TableShape:
        def keys(schema: list[dict[str, str]]) -> tuple[str, ...]:
            return tuple(key["AttributeName"] for key in schema)

        indexes = tuple(
            IndexShape(
                index["IndexName"],
                keys(index["KeySchema"]),
                index["Projection"]["ProjectionType"],
                tuple(index["Projection"].get("NonKeyAttributes", ())),
            )
            for index in table.get("GlobalSecondaryIndexes", [])
        )
        return cls(keys(table["KeySchema"]), indexes)

    def index_units(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> int:
        """Write units the indexes take for a write that turns the item `old` into `new` (None: no item), as a
        write outside a transaction: nothing for an unchanged entry, its size (1 KB steps) for an entry that
        appears, goes or changes in place, both sizes for one whose index key moves."""
        units = 0
        for index in self.indexes:
            was, now = index.entry(old, self.keys), index.entry(new, self.keys)
            if was == now:
                continue
            if was is None or now is None:
                units += write_units(item_size(was or now or {}))
            elif any(was[name] != now[name] for name in index.keys):
                units += write_units(item_size(was)) + write_units(item_size(now))
            else:
                units += write_units(max(item_size(was), item_size(now)))
        return units


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


#: The keys `@logger.inject_lambda_context` adds to every line, at the length of a deployed function's.
LAMBDA_CONTEXT_KEYS: dict[str, Any] = {
    "cold_start": False,
    "function_name": "punctual-dev-WorkerFunction3A1B2C3D-AbCdEfGhIjKl",
    "function_memory_size": 512,
    "function_arn": "arn:aws:lambda:us-east-1:123456789012:function:punctual-dev-WorkerFunction3A1B2C3D-AbCdEfGhIjKl",
    "function_request_id": "3f2a1c9e-8d7b-4e6f-9a1b-2c3d4e5f6a7b",
}


class BenchMetrics:
    """The core's Metrics port in the benchmark: each count goes into the current invocation's EMF document."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter

    def count(self, name: str, value: float = 1, unit: str = "Count") -> None:
        self.meter.metric(name, value, unit)


class LogLines(logging.Handler):
    """Counts the bytes of each line the core logs, formatted as the deployed functions write it: the formatter of a
    handler's Powertools logger (`scheduler.handlers.wiring.handler_logger`, which the `scheduler.*` loggers write
    through) with the Lambda context's keys as `wiring.lambda_context` leaves them. Attach it to the `scheduler`
    logger at the deployed level (`log_level`, INFO by default)."""

    def __init__(self, meter: Meter, level: int = logging.INFO) -> None:
        super().__init__(level)
        self.meter = meter
        self.lines = LambdaPowertoolsFormatter()
        # (`name`: the logger's, as copy_config_to_registered_loggers adds it to the lines of the loggers it wires)
        self.lines.append_keys(service=SERVICE_NAME, name="%(name)s", **LAMBDA_CONTEXT_KEYS)
        self.lines.remove_keys(list(REDUNDANT_LOG_KEYS))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.lines.format(record)
        except Exception:  # a line the formatter cannot render is not the benchmark's concern
            return
        self.meter.log_line(len(line.encode()))


class Meter:
    """Counts what hooked clients spend, per phase (`with meter.phase("sweep"): ...`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._phase = "unattributed"
        self.counts: dict[tuple[str, str, str], OperationCount] = defaultdict(OperationCount)
        self.invocations: dict[str, list[Invocation]] = defaultdict(list)
        #: Seconds the meter itself spent (reading back transaction items), taken out of invocation durations.
        self._overhead = 0.0
        self._lookup: Any = None
        #: The tables' key schemas and indexes (`table_shape`).
        self._shapes: dict[str, TableShape] = {}
        #: Set DelaySeconds to 0 on every send (virtual-time runs: the price of a request does not depend on it).
        self.zero_delays = False
        #: With a clock (the senders' virtual one): when each sent message lands - becomes visible - by occurrence
        #: key: the send time plus its whole-second DelaySeconds, recorded before the delay is zeroed.
        self.clock: Any = None
        self.landing: dict[str, datetime] = {}
        #: CPU seconds so far of this process's threads that are not the functions' (the in-process target), taken
        #: out of each invocation's CPU time.
        self.cpu_elsewhere: Callable[[], float] = lambda: 0.0
        #: The metrics counted since the invocation began (name, value, unit): its EMF document.
        self._metrics: list[tuple[str, float, str]] = []

    # -- phases and invocations ----------------------------------------------------------------------------

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Attribute the calls made inside the block to `name`."""
        previous = self._phase
        self._phase = name
        try:
            yield
        finally:
            self._phase = previous

    @contextmanager
    def invocation(self, function: str, records: int = 0) -> Iterator[None]:
        """Time one simulated Lambda invocation and attribute the calls inside it to the phase `function`."""
        started, overhead = time.perf_counter(), self._overhead
        cpu, elsewhere = time.process_time(), self.cpu_elsewhere()
        with self.phase(function):
            yield
        own = self._overhead - overhead
        seconds = time.perf_counter() - started - own
        cpu_seconds = time.process_time() - cpu - (self.cpu_elsewhere() - elsewhere) - own
        self.invocations[function].append(Invocation(function, seconds, records, max(0.0, cpu_seconds)))
        self._invocation_logs(function)

    # -- logs -------------------------------------------------------------------------------------------------

    def log_line(self, size: int) -> None:
        """A line a function wrote to its log (attributed to the current phase)."""
        self._add(self._phase, "logs", "lines", OperationCount(calls=1, payload_bytes=size))

    def _invocation_logs(self, function: str) -> None:
        """What Lambda and Powertools add to the log per invocation: the runtime's START, END and REPORT lines, and
        the EMF document of the metrics the invocation counted (`@metrics.log_metrics` flushes one, up to 100
        metrics in it), as the handlers deploy it."""
        lines = OperationCount(calls=len(prices.LAMBDA_PLATFORM_LINES), payload_bytes=prices.LAMBDA_PLATFORM_BYTES)
        self._add(function, "logs", "platform", lines)
        with self._lock:
            counted, self._metrics = self._metrics, []
        if not counted:
            return
        emf = EphemeralMetrics(namespace=METRICS_NAMESPACE, service=SERVICE_NAME)
        for begin in range(0, len(counted), 100):
            for name, value, unit in counted[begin : begin + 100]:
                emf.add_metric(name=name, unit=unit, value=value)
            size = len(json.dumps(emf.serialize_metric_set(), separators=(",", ":")).encode())
            self._add(function, "logs", "metrics", OperationCount(calls=1, payload_bytes=size))
            emf.clear_metrics()

    @property
    def metrics(self) -> BenchMetrics:
        """The core's Metrics port, counting what each invocation would put in its EMF document."""
        return BenchMetrics(self)

    def metric(self, name: str, value: float, unit: str) -> None:
        """A metric the current invocation counted: it goes into that invocation's EMF document."""
        with self._lock:
            self._metrics.append((name, value, unit))

    def reset(self) -> None:
        """Forget what was counted (e.g. after a warm-up)."""
        with self._lock:
            self.counts.clear()
            self.invocations.clear()
            self._metrics.clear()

    # -- hooks -------------------------------------------------------------------------------------------

    def attach(self, client: Any) -> Any:
        """Register the accounting handlers on a boto3 DynamoDB or SQS client; returns the client."""
        service = client.meta.service_model.service_name
        events = client.meta.events
        if service == "dynamodb":
            if self._lookup is None:
                self._lookup = boto3.client("dynamodb", config=client.meta.config)
            events.register("before-parameter-build.dynamodb.*", self._dynamodb_before)
            events.register("after-call.dynamodb.*", self._dynamodb_after)
        elif service == "sqs":
            events.register("before-parameter-build.sqs.*", self._sqs_before)
            events.register("after-call.sqs.*", self._sqs_after)
        elif service == "events":
            # botocore names events by service id: EventBridge's is "eventbridge" (its endpoint prefix "events").
            events.register("before-parameter-build.eventbridge.*", self._events_before)
            events.register("after-call.eventbridge.*", self._events_after)
        else:
            raise ValueError(f"no accounting for {service}")
        return client

    def _dynamodb_before(self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        if "ReturnConsumedCapacity" in model.input_shape.members:
            params["ReturnConsumedCapacity"] = "INDEXES"
        if model.name == "TransactWriteItems" and self._lookup is not None:
            context["bench_before"] = self._read_images(params.get("TransactItems", []))
        context["bench_params"] = params
        context["bench_phase"] = self._phase

    def _dynamodb_after(self, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        operation = model.name
        params: dict[str, Any] = context.get("bench_params", {})
        count = OperationCount(calls=1)
        error = (parsed.get("Error") or {}).get("Code")
        if error:
            self._estimate_failure(operation, error, params, parsed, count)
        else:
            self._reported_units(operation, params, parsed, count, context.get("bench_before"))
        count.items_read = _items_read(operation, parsed)
        self._add(context.get("bench_phase", self._phase), "dynamodb", operation, count)

    def _reported_units(
        self,
        operation: str,
        params: dict[str, Any],
        parsed: dict[str, Any],
        count: OperationCount,
        images_before: list[dict[str, Any] | None] | None = None,
    ) -> None:
        consumed = parsed.get("ConsumedCapacity")
        entries: list[dict[str, Any]] = consumed if isinstance(consumed, list) else [consumed] if consumed else []
        units = sum(float(e.get("CapacityUnits", 0.0)) for e in entries)
        index_units = sum(
            float(index.get("CapacityUnits", 0.0))
            for e in entries
            for index in (e.get("GlobalSecondaryIndexes") or {}).values()
        )
        if operation in ("Query", "Scan"):
            floor = 1.0 if params.get("ConsistentRead") else 0.5
            if units < floor:
                count.estimated_units += floor - units
                units = floor
        if operation == "TransactWriteItems":
            table_units, index_units = self._transaction_units(
                params.get("TransactItems", []), images_before, index_units
            )
            count.write_units = table_units + index_units
            count.index_write_units = index_units
            count.transactional_write_units = table_units
        elif operation in READ_OPERATIONS:
            count.read_units = units * (2.0 if operation == "TransactGetItems" else 1.0)
        else:
            count.write_units = units
            count.index_write_units = index_units

    def _read_images(self, actions: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
        """The current image of each item `actions` write (None where there is none), read without the meter."""
        began = time.perf_counter()
        try:
            images: list[dict[str, Any] | None] = []
            for action in actions:
                (_, body), *_ = action.items()
                shape = self.table_shape(body["TableName"])
                key = body.get("Key") or {name: body["Item"][name] for name in shape.keys if name in body["Item"]}
                found = self._lookup.get_item(TableName=body["TableName"], Key=key, ConsistentRead=True)
                images.append(found.get("Item"))
            return images
        finally:
            self._overhead += time.perf_counter() - began

    def table_shape(self, table: str) -> TableShape:
        """The key schema and global secondary indexes of `table` (DescribeTable, once; set it directly in a test).
        Called inside the meter's own timed work (`_read_images`, `_transaction_units`), which takes its time out."""
        with self._lock:
            known = self._shapes.get(table)
        if known is not None:
            return known
        shape = TableShape.described(self._lookup.describe_table(TableName=table)["Table"])
        with self._lock:
            self._shapes[table] = shape
        return shape

    def _transaction_units(
        self, actions: list[dict[str, Any]], before: list[dict[str, Any] | None] | None, reported_index_units: float
    ) -> tuple[float, float]:
        """The table's and the indexes' write units of a TransactWriteItems (see the module docstring). Without
        the images before it (a meter not attached to a client) the indexes' units are the endpoint's."""
        began = time.perf_counter()
        table_units = 0
        index_units = 0
        try:
            for action, old in zip(actions, before if before is not None else [None] * len(actions), strict=True):
                (kind, body), *_ = action.items()
                if kind == "Put":
                    new: dict[str, Any] | None = body["Item"]
                elif kind == "Update":
                    found = self._lookup.get_item(TableName=body["TableName"], Key=body["Key"], ConsistentRead=True)
                    new = found.get("Item") or body["Key"]
                elif kind == "Delete":
                    new = None
                else:  # ConditionCheck: writes nothing, billed on the image it checked
                    new = old
                sizes = [item_size(image) for image in (old, new) if image]
                table_units += 2 * write_units(max(sizes, default=1))
                if before is not None and kind != "ConditionCheck":
                    index_units += self.table_shape(body["TableName"]).index_units(old, new)
        finally:
            self._overhead += time.perf_counter() - began
        return float(table_units), float(index_units) if before is not None else reported_index_units

    @staticmethod
    def _estimate_failure(
        operation: str, error: str, params: dict[str, Any], parsed: dict[str, Any], count: OperationCount
    ) -> None:
        if error == "ConditionalCheckFailedException" and operation in ("PutItem", "UpdateItem", "DeleteItem"):
            sizes = [item_size(params["Item"])] if "Item" in params else []
            old = parsed.get("Item")
            if isinstance(old, dict) and old:
                sizes.append(item_size(old))
            units = float(write_units(max(sizes, default=1)))
            count.write_units = count.estimated_units = units
            count.failed_conditions = 1
        elif error == "TransactionCanceledException":
            units = 2.0 * len(params.get("TransactItems", []))
            count.write_units = count.transactional_write_units = count.estimated_units = units
            count.failed_conditions = 1

    def _sqs_before(self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        if self.clock is not None and model.name in ("SendMessageBatch", "SendMessage"):
            now = self.clock.now()
            for entry in params.get("Entries", []) if model.name == "SendMessageBatch" else [params]:
                key = ((entry.get("MessageAttributes") or {}).get("occurrence_key") or {}).get("StringValue")
                if key:
                    with self._lock:
                        self.landing[key] = now + timedelta(seconds=int(entry.get("DelaySeconds", 0)))
        if self.zero_delays:
            if model.name == "SendMessageBatch":
                for entry in params.get("Entries", []):
                    entry["DelaySeconds"] = 0
            elif model.name == "SendMessage":
                params["DelaySeconds"] = 0
        context["bench_params"] = params
        context["bench_phase"] = self._phase

    def _sqs_after(self, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        operation = model.name
        params: dict[str, Any] = context.get("bench_params", {})
        count = OperationCount(calls=1)
        if operation == "SendMessage":
            count.payload_bytes = _message_bytes(params)
            count.messages = 1
        elif operation == "SendMessageBatch":
            entries = params.get("Entries", [])
            count.payload_bytes = sum(_message_bytes(e) for e in entries)
            count.messages = len(entries)
        elif operation == "ReceiveMessage":
            received = parsed.get("Messages") or []
            count.payload_bytes = sum(_message_bytes(m) for m in received)
            count.messages = len(received)
            count.empty_receives = 0 if received else 1
        count.billed_requests = max(1, math.ceil(count.payload_bytes / SQS_CHUNK_BYTES))
        self._add(context.get("bench_phase", self._phase), "sqs", operation, count)

    def _events_before(self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        context["bench_params"] = params
        context["bench_phase"] = self._phase

    def _events_after(self, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        params: dict[str, Any] = context.get("bench_params", {})
        count = OperationCount(calls=1)
        if model.name == "PutEvents":
            entries = params.get("Entries", [])
            sizes = [_event_bytes(e) for e in entries]
            count.messages = len(entries)
            count.payload_bytes = sum(sizes)
            count.billed_requests = sum(max(1, math.ceil(size / SQS_CHUNK_BYTES)) for size in sizes)
        self._add(context.get("bench_phase", self._phase), "events", model.name, count)

    def _add(self, phase: str, service: str, operation: str, count: OperationCount) -> None:
        with self._lock:
            self.counts[(phase, service, operation)].add(count)

    # -- reading ------------------------------------------------------------------------------------------

    def totals(self, phases: set[str] | None = None) -> Totals:
        """Sums over `phases` (all when None). Empty receives are counted apart from the billed requests of
        the work: on Lambda they are the event source mapping's idle polling, a fixed cost."""
        out = Totals()
        with self._lock:
            rows = [(k, v) for k, v in self.counts.items() if phases is None or k[0] in phases]
            invocations = {f: list(v) for f, v in self.invocations.items() if phases is None or f in phases}
        for (_, service, operation), c in rows:
            key = f"{service}:{operation}"
            row = out.by_operation.setdefault(key, defaultdict(float))
            row["calls"] += c.calls
            if service == "dynamodb":
                out.dynamodb_calls += c.calls
                out.add_spend(c)
                row["read_units"] += c.read_units
                row["write_units"] += c.write_units
                row["items_read"] += c.items_read
            elif service == "logs":
                out.log_events += c.calls
                out.log_bytes += c.payload_bytes
                row["bytes"] += c.payload_bytes
            elif service == "events":
                out.events_calls += c.calls
                out.events_billed += c.billed_requests
                row["billed_requests"] += c.billed_requests
                row["messages"] += c.messages
            else:
                work = c.calls - c.empty_receives
                out.sqs_requests += work
                out.sqs_billed_requests += c.billed_requests - c.empty_receives
                out.sqs_empty_receives += c.empty_receives
                row["billed_requests"] += c.billed_requests - c.empty_receives
                row["calls"] -= c.empty_receives
                row["messages"] += c.messages
        out.by_operation = {k: dict(v) for k, v in out.by_operation.items()}
        for function, calls in invocations.items():
            out.invocations[function] = len(calls)
            out.invocation_seconds[function] = sum(c.seconds for c in calls)
            out.cpu_seconds[function] = sum(c.cpu_seconds for c in calls)
            out.billed_seconds[function] = sum(c.billed for c in calls)
        return out


def _items_read(operation: str, parsed: dict[str, Any]) -> int:
    if operation in ("Query", "Scan"):
        return int(parsed.get("ScannedCount", 0))
    if operation == "GetItem":
        return 1 if parsed.get("Item") else 0
    if operation == "BatchGetItem":
        return sum(len(items) for items in (parsed.get("Responses") or {}).values())
    return 0


def _message_bytes(message: dict[str, Any]) -> int:
    body = message.get("MessageBody", message.get("Body", ""))
    size = len(str(body).encode())
    for name, attribute in (message.get("MessageAttributes") or {}).items():
        size += len(name.encode()) + len(str(attribute.get("DataType", "")).encode())
        size += len(str(attribute.get("StringValue", "")).encode())
    return size


def _event_bytes(entry: dict[str, Any]) -> int:
    """An event's billed size: its Time (14 bytes when given), Source, DetailType, Detail and Resources."""
    size = 14 if entry.get("Time") else 0
    for name in ("Source", "DetailType", "Detail"):
        size += len(str(entry.get(name, "")).encode())
    return size + sum(len(str(r).encode()) for r in entry.get("Resources", []))


def probe_transactions(client: Any, table: str) -> dict[str, Any]:
    """What this endpoint reports for a transaction of three small new items (AWS bills 6 units: 2 per item), and
    for an empty strongly consistent Query (AWS bills at least 1): recorded with the results."""
    keys = [{"PK": {"S": "BENCH#PROBE"}, "SK": {"S": f"{time.time_ns()}-{i}"}} for i in range(3)]
    response = client.transact_write_items(
        TransactItems=[{"Put": {"TableName": table, "Item": key}} for key in keys], ReturnConsumedCapacity="INDEXES"
    )
    consumed = response.get("ConsumedCapacity") or []
    units = sum(float((c.get("Table") or c).get("CapacityUnits", 0.0)) for c in consumed)
    for key in keys:
        client.delete_item(TableName=table, Key=key)
    empty = client.query(
        TableName=table,
        KeyConditionExpression="PK = :p",
        ExpressionAttributeValues={":p": {"S": "BENCH#NOTHING"}},
        ConsistentRead=True,
        ReturnConsumedCapacity="TOTAL",
    )
    empty_units = float((empty.get("ConsumedCapacity") or {}).get("CapacityUnits", 0.0))
    return {
        "transaction_of_three_small_items": {"reported_table_units": units, "aws_bills": 6.0},
        "empty_consistent_query": {"reported_units": empty_units, "aws_bills_at_least": 1.0},
        "transaction_units": "computed by the meter from the items' images: 2 per KB an item, and each index's change",
        "empty_query_minimum_applied": empty_units < 1.0,
    }
