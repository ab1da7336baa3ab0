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
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import boto3
from aws_lambda_powertools.metrics import EphemeralMetrics

from scheduler.schema import METRICS_NAMESPACE, SERVICE_NAME
from scheduler_bench import prices
from scheduler_bench.cloudwatch import BenchMetrics
from scheduler_bench.dynamodb_billing import TableShape, item_size, items_read, write_units
from scheduler_bench.spend import Invocation, OperationCount, Totals

READ_OPERATIONS = frozenset({"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"})
WRITE_OPERATIONS = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})
TRANSACTIONAL = frozenset({"TransactWriteItems", "TransactGetItems"})
SQS_CHUNK_BYTES = 64 * 1024


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
        self._remember(params, context)

    def _dynamodb_after(self, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        operation = model.name
        params: dict[str, Any] = context.get("bench_params", {})
        count = OperationCount(calls=1)
        error = (parsed.get("Error") or {}).get("Code")
        if error:
            self._estimate_failure(operation, error, params, parsed, count)
        else:
            self._reported_units(operation, params, parsed, count, context.get("bench_before"))
        count.items_read = items_read(operation, parsed)
        self._add_call(context, "dynamodb", operation, count)

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
        self._remember(params, context)

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
        self._add_call(context, "sqs", operation, count)

    def _events_before(self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        self._remember(params, context)

    def _events_after(self, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        params: dict[str, Any] = context.get("bench_params", {})
        count = OperationCount(calls=1)
        if model.name == "PutEvents":
            entries = params.get("Entries", [])
            sizes = [_event_bytes(e) for e in entries]
            count.messages = len(entries)
            count.payload_bytes = sum(sizes)
            count.billed_requests = sum(max(1, math.ceil(size / SQS_CHUNK_BYTES)) for size in sizes)
        self._add_call(context, "events", model.name, count)

    def _remember(self, params: dict[str, Any], context: dict[str, Any]) -> None:
        """Keep a call's parameters and the phase it was made in for its after-hook (the response has neither)."""
        context["bench_params"] = params
        context["bench_phase"] = self._phase

    def _add_call(self, context: dict[str, Any], service: str, operation: str, count: OperationCount) -> None:
        """Book a call's count to the phase it was made in."""
        self._add(context.get("bench_phase", self._phase), service, operation, count)

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
