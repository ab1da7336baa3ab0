"""`TestScheduler`: punctual's real core, wired as deployed, in this process on moto, on a virtual clock.

    with TestScheduler(receivers={"https://shop.example.com": app}) as scheduler:
        job = scheduler.create({"schedule": {"type": "once", "delay_seconds": 7 * 86400},
                                "target": {"type": "http", "url": "https://shop.example.com/charge"}})
        scheduler.advance(days=7)
        assert [run.state for run in scheduler.runs(job.job_id)] == ["SUCCEEDED"]

What runs is the deployment's code: the services are built by the Lambda handlers' composition root
(`scheduler.handlers.wiring.build`) on moto's DynamoDB and SQS, the tables and queues are created by the project's
own provisioning (`scheduler.provision`), API calls go through the deployed API handler's routes, the
sweeper is the deployed sweeper, and the worker runs each ready-queue message through the deployed executor as the
worker Lambda does (acknowledge, or keep it for its backoff). So occurrence keys, fencing tokens, signatures,
retries and their backoff, misfire and overlap policies, the DLQ and the run history are the deployed ones.

Time (`advance`): the sweeper runs at every minute boundary, as EventBridge triggers it, and the worker takes each
message the moment it becomes visible (its SQS delay or visibility timeout has run out on the virtual clock; see
`clock.sqs_on`). Minutes in which no sweep can find anything (no timer due within the look-ahead, nothing in the
late lane, no backfill running) are skipped: the watermark is moved over their empty buckets, which is what those
sweeps would have done. So seven idle days cost a few requests to moto, not ten thousand sweeps.

The API's answers come back as the SDK's models (`Job`, `Run`, ...), read by the SDK's own client (`client()`), so a
test reads them as the app's code does. The scheduler is a new deployment (signatures v2 only) and quiet: the core's
log lines are not printed unless `log_level` asks for them.

Differences from a deployment, on purpose: one shard per bucket minute and no tenant dispatch budget by default (a
test's few jobs; pass `settings` to change any Setting), no completion events (no EventBridge), no batch hold (the
worker is this thread and cannot die), and targets other than `http` and `handler` are not delivered.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, Literal

from punctual_sdk.client import Client, Definition
from punctual_sdk.errors import InvalidArgument
from punctual_sdk.models import Job, JobState, Run, SigningKeys, Triggered
from punctual_sdk.receiver.delivery import Delivery
from punctual_sdk.testing.api import ApiTransport, InProcessApi
from punctual_sdk.testing.clock import VirtualClock, aware, sqs_on
from punctual_sdk.testing.receivers import App, InProcessHttp, Request, test_guard
from punctual_sdk.testing.world import Moto
from scheduler.core.model.job import HandlerTarget, JobSpec
from scheduler.core.model.timefmt import rfc3339
from scheduler.core.ports import TargetCall, TargetInvoker
from scheduler.core.runtime.metrics import NullMetrics
from scheduler.handlers import api, wiring
from scheduler.security.signing import KeyRing
from scheduler.settings import Settings
from scheduler.targets.registry import HandlerContext, HandlerRegistry, HandlerTargetInvoker

Json = dict[str, Any]

#: The tenant API calls are made as, unless the test names another.
DEFAULT_TENANT = "arn:aws:iam::123456789012:role/app"
Handler = Callable[[HandlerContext], object]


@dataclass(frozen=True, kw_only=True)
class Delivered(Delivery):
    """One attempt of one occurrence at its target, as the worker made it: the receiver kit's `Delivery` (occurrence
    key, fencing token, job id, scheduled_for as RFC 3339, attempt, payload; `source` "http" or "handler"; `raw` the
    `Request` an http receiver got), plus when it was made and how it ended."""

    #: The virtual time of the call.
    at: datetime
    #: What the target answered ("HTTP 200", a handler's result), when it succeeded.
    result: str | None = None
    #: Why it failed, when it did.
    error: str | None = None


class _Recorded:
    """A target invoker whose calls are kept as `Delivered`s."""

    def __init__(self, invoker: TargetInvoker, scheduler: TestScheduler, source: Literal["http", "handler"]) -> None:
        self.invoker, self.scheduler, self.source = invoker, scheduler, source

    def invoke(self, call: TargetCall) -> str | None:
        at = self.scheduler.now()
        sent = len(self.scheduler.http.sent)

        def delivered(result: str | None, error: str | None = None) -> Delivered:
            requests = [request for request, _ in self.scheduler.http.sent[sent:]] if self.source == "http" else []
            return Delivered(
                occurrence_key=call.occurrence_key,
                fencing_token=call.fencing_token,
                job_id=call.job.job_id,
                scheduled_for=rfc3339(call.scheduled_for),
                attempt=call.attempt,
                payload=call.job.spec.payload,
                source=self.source,
                raw=requests[-1] if requests else None,
                at=at,
                result=result,
                error=error,
            )

        try:
            result = self.invoker.invoke(call)
        except Exception as exc:
            self.scheduler.deliveries.append(delivered(None, f"{type(exc).__name__}: {exc}"))
            raise
        self.scheduler.deliveries.append(delivered(result))
        return result


@dataclass(frozen=True)
class _TestChecks(wiring.TargetChecks):
    """The deployed submit-time checks of a target, with the test's SSRF guard (no DNS) and handler registry."""

    handlers: HandlerRegistry

    @property
    def guard(self) -> Any:
        return test_guard()

    def __call__(self, tenant: str, spec: JobSpec) -> None:
        if isinstance(spec.target, HandlerTarget) and self.handlers.lookup(spec.target.name) is None:
            from scheduler.core.errors import InvalidRequest

            known = ", ".join(self.handlers.names()) or "none"
            raise InvalidRequest(
                f"no handler named '{spec.target.name}' is registered with the test scheduler (registered: "
                f"{known}); pass handlers={{'{spec.target.name}': function}} or use @scheduler.handler(...)",
                field="target.name",
            )
        if not isinstance(spec.target, HandlerTarget):
            super().__call__(tenant, spec)


class TestScheduler:
    """punctual in-process on moto with a virtual clock (see the module). Use it as a context manager (or call
    `start()` and `close()`); `punctual_sdk.testing.pytest_plugin` gives it as the `punctual` fixture.

    `receivers`: where `http` targets are delivered - one app for every URL, or URL prefix -> app (WSGI, ASGI, or
    a callable taking a `Request`); `handlers`: `handler` targets by name, each called with the deployed
    `HandlerContext`; `start`: the virtual clock's start (aware; default: now, to the minute); `tenant`: who the
    API calls are made as; `settings`: any `scheduler.settings.Settings` field to change; `log_level`: the level
    from which the core's log lines are printed (JSON on stdout, as the deployed functions write them), e.g.
    "INFO" or `logging.WARNING`; None (the default) prints none."""

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(
        self,
        *,
        receivers: App | Mapping[str, App] | None = None,
        handlers: Mapping[str, Handler] | None = None,
        start: datetime | None = None,
        tenant: str = DEFAULT_TENANT,
        settings: Mapping[str, Any] | None = None,
        log_level: int | str | None = None,
    ) -> None:
        self._log_level = _log_level(log_level)
        begin = datetime.now(UTC).replace(second=0, microsecond=0) if start is None else aware(start, "start")
        self.clock = VirtualClock(begin)
        if not isinstance(tenant, str) or not tenant:
            raise InvalidArgument("tenant is a non-empty string (an IAM principal ARN, or any name)")
        self.tenant = tenant
        if receivers is not None and not isinstance(receivers, Mapping):
            receivers = {"": receivers}
        self._apps: dict[str, App] = dict(receivers or {})
        for prefix in self._apps:
            if prefix and not prefix.startswith(("http://", "https://")):
                raise InvalidArgument(
                    f"a receiver's key is a URL prefix such as 'https://shop.example.com', not {prefix!r}"
                )
        self.handlers = HandlerRegistry()
        for name, function in (handlers or {}).items():
            self.handler(name)(function)
        self._overrides = dict(settings or {})
        unknown = set(self._overrides) - set(Settings.model_fields)
        if unknown:
            raise InvalidArgument(f"unknown setting(s) {', '.join(sorted(unknown))}: see scheduler.settings.Settings")
        #: Every attempt the worker made at a target, in order.
        self.deliveries: list[Delivered] = []
        self._stack: contextlib.ExitStack | None = None

    # -- set-up ---------------------------------------------------------------------------------------------

    def handler(self, name: str) -> Callable[[Handler], Handler]:
        """Decorator: deliver the `handler` target `name` to this function (it gets a `HandlerContext`)."""
        try:
            return self.handlers.register(name)
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None

    def start(self) -> TestScheduler:
        if self._stack is not None:
            raise InvalidArgument("this test scheduler is already started")
        stack = contextlib.ExitStack()
        try:
            stack.enter_context(_core_logs_from(self._log_level))
            self.moto = stack.enter_context(Moto.started())
            stack.enter_context(sqs_on(self.clock))
            self._build()
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def close(self) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None

    def __enter__(self) -> TestScheduler:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def _build(self) -> None:
        resources = self.moto.provision()
        given: dict[str, Any] = {
            "jobs_table": resources.jobs_table,
            "executions_table": resources.executions_table,
            "ready_queue_url": resources.ready_queue_url,
            "ready_queue_high_url": resources.ready_queue_high_url,
            "ready_queue_low_url": resources.ready_queue_low_url,
            "dlq_url": resources.dlq_url,
            "local_mode": True,
            "allow_private_targets": True,
            "completion_events": False,
            "shard_count": 1,
            "sweep_concurrency": 1,
            "tenant_dispatch_rate": 0,
            # A new deployment signs with v2 alone (v1 is for receivers written before v2).
            "signature_v1": False,
        }
        try:
            settings = Settings(**{**given, **self._overrides})
        except ValueError as exc:
            raise InvalidArgument(f"settings: {exc}") from None
        if settings.completion_events:
            raise InvalidArgument("completion_events cannot be on in the test scheduler (there is no EventBridge)")
        clients = wiring.Clients(self.moto.dynamodb, self.moto.sqs, None)
        checks = _TestChecks(settings, self.handlers)
        self.container = wiring.build(
            settings, NullMetrics(), clients=clients, clock=self.clock, sleep=self.clock.sleep, checks=checks
        )
        self.settings = settings
        keys = KeyRing.parse(settings.signing_keys)
        self.http = InProcessHttp(self._apps, keys, settings.signing_secret if settings.signature_v1 else None)
        targets: dict[str, TargetInvoker] = {
            "http": _Recorded(self.http, self, "http"),
            "handler": _Recorded(HandlerTargetInvoker(self.handlers), self, "handler"),
        }
        executor = self.container.new_executor("test-worker", clock=self.clock, sleep=self.clock.sleep, targets=targets)
        self.worker = self.moto.worker(self.container, executor)
        self.sweeper = self.container.core.sweeper("test-sweeper")
        self.api = InProcessApi(self.container, self.tenant)
        self._client = Client("http://punctual.test", transport=ApiTransport(self.api), retries=0)
        # The first sweep starts at its own minute (a deployment's first sweep looks 10 minutes back for timers an
        # API with a lagging clock wrote; here there is one clock and nothing was written before).
        self.container.core.stores.timers.init_watermark(self.clock.now().replace(second=0, microsecond=0))
        self._next_sweep = _next_minute(self.clock.now(), inclusive=True)

    # -- time -----------------------------------------------------------------------------------------------

    def now(self) -> datetime:
        """The virtual time (aware UTC)."""
        return self.clock.now()

    def advance(
        self,
        delta: timedelta | None = None,
        *,
        days: float = 0,
        hours: float = 0,
        minutes: float = 0,
        seconds: float = 0,
    ) -> list[Delivered]:
        """Move the clock forward by `delta` (or days/hours/minutes/seconds), sweeping every minute and delivering
        every message when it becomes visible; returns the deliveries made meanwhile. 0 runs what is due now."""
        if delta is not None and not isinstance(delta, timedelta):
            raise InvalidArgument(f"advance(delta) takes a timedelta, not {type(delta).__name__}; or use minutes=...")
        step = (delta or timedelta()) + timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
        if step < timedelta():
            raise InvalidArgument(f"the clock only moves forward: advance() by {step} is negative")
        return self.advance_to(self.now() + step)

    def advance_to(self, when: datetime) -> list[Delivered]:
        """Move the clock forward to `when` (aware); see `advance`."""
        until = aware(when, "when")
        if until < self.now():
            raise InvalidArgument(f"the clock only moves forward: it is {self.now().isoformat()}, not before")
        self._started()
        first = len(self.deliveries)
        while True:
            # A sweep due now runs before the worker (a trigger's timer waits in the current minute's bucket).
            due = max(self._next_sweep, _next_minute(self.now(), inclusive=True))
            sweep_at = self.moto.next_useful_sweep(due, self.container, self.settings)
            if sweep_at is not None and sweep_at <= self.now():
                self._sweep(sweep_at)
                continue
            self.worker.drain()
            self._misuse()
            if self.now() >= until:
                break
            landing = self.moto.next_landing(self.now())
            self.clock.set(min(t for t in (until, sweep_at, landing) if t is not None))
        return self.deliveries[first:]

    def _sweep(self, at: datetime) -> None:
        self.moto.skip_empty_minutes(at, self.container, self.settings)
        self.sweeper.sweep(deadline=self.now() + timedelta(seconds=60))
        self._next_sweep = _next_minute(at, inclusive=False)

    def _misuse(self) -> None:
        if self.http.misuse:
            problem = self.http.misuse.pop(0)
            self.http.misuse.clear()
            raise problem

    def _started(self) -> None:
        if self._stack is None:
            raise InvalidArgument("start the test scheduler first: `with TestScheduler(...) as scheduler:`")

    # -- the API --------------------------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        """Any API call (`/v1/...`) as this scheduler's tenant: its JSON answer, or a typed `ApiError`."""
        self._started()
        return self.api.json(method, path, body, headers)

    def create(self, definition: Definition, idempotency_key: str | None = None) -> Job:
        """`POST /v1/jobs`: the job as the API shows it (raises `Unprocessable` naming the field to fix). The
        definition is a mapping (the JSON of docs/api.md) or a `punctual_sdk.models.JobDefinition`."""
        return self.client().create(definition, idempotency_key)

    def get(self, job_id: str, preview: int = 0) -> Job:
        return self.client().get(_job_id(job_id), preview)

    def update(self, job_id: str, patch: Mapping[str, Any], if_match: int | None = None) -> Job:
        return self.client().update(_job_id(job_id), patch, if_match)

    def pause(self, job_id: str) -> Job:
        return self.client().pause(_job_id(job_id))

    def resume(self, job_id: str) -> Job:
        return self.client().resume(_job_id(job_id))

    def cancel(self, job_id: str) -> Job:
        return self.client().cancel(_job_id(job_id))

    def trigger(self, job_id: str) -> Triggered:
        """`POST /v1/jobs/{id}/trigger`: runs at the next `advance` (even `advance()` of 0)."""
        return self.client().trigger(_job_id(job_id))

    def list(self, state: JobState | str | None = None) -> builtins.list[Job]:
        """Every job of the tenant (all pages)."""
        return builtins.list(self.client().iter_jobs(state))

    def runs(self, job_id: str) -> builtins.list[Run]:
        """The job's run history (all pages, newest first), as `GET /v1/jobs/{id}/runs` gives it."""
        return builtins.list(self.client().iter_runs(_job_id(job_id)))

    def signing_keys(self, job_id: str) -> SigningKeys:
        return self.client().signing_keys(_job_id(job_id))

    def client(self) -> Client:
        """The SDK's `Client` whose requests this scheduler answers in-process: hand it to the code under test
        instead of `Client.aws(...)`. (The reads above are its answers.)"""
        self._started()
        return self._client

    # -- what happened ----------------------------------------------------------------------------------------

    @property
    def requests(self) -> builtins.list[Request]:
        """Every HTTP request delivered to a receiver, in order (what it answered: `self.http.sent`)."""
        return [request for request, _ in self.http.sent]

    def dead_letters(self) -> builtins.list[Json]:
        """The bodies in the DLQ (left there: reading does not remove them)."""
        self._started()
        return self.moto.dead_letters(self.settings.dlq_url)


def _job_id(job_id: str) -> str:
    if not isinstance(job_id, str) or not job_id:
        raise InvalidArgument(f"job_id is the job's id (`job.job_id`), not {job_id!r}")
    return job_id


def _log_level(level: int | str | None) -> int:
    """A `log_level` as a logging level; None: above every level (nothing is printed)."""
    if level is None:
        return logging.CRITICAL + 1
    if isinstance(level, str) and isinstance(named := logging.getLevelName(level.upper()), int):
        return named
    if isinstance(level, int) and not isinstance(level, bool):
        return level
    raise InvalidArgument(f"log_level is a logging level (e.g. 'INFO', logging.WARNING) or None, not {level!r}")


@contextlib.contextmanager
def _core_logs_from(level: int) -> Iterator[None]:
    """The core's loggers (`scheduler.*`, and the API handler's Powertools logger) at `level` while the block runs,
    writing to the `sys.stdout` of the moment (a test runner's capture of this test, not the stream that was
    `sys.stdout` when the core was imported); as they were afterwards. Your own loggers are left alone."""
    names = {"scheduler", api.logger.name}
    names |= {name for name in logging.root.manager.loggerDict if name.startswith("scheduler.")}
    loggers = [logging.getLogger(name) for name in sorted(names)]
    before = [logger.level for logger in loggers]
    streams = {
        handler: handler.stream
        for logger in loggers
        for handler in logger.handlers
        if type(handler) is logging.StreamHandler
    }
    for logger in loggers:
        logger.setLevel(level)
    for handler in streams:
        handler.setStream(sys.stdout)
    try:
        yield
    finally:
        for logger, was in zip(loggers, before, strict=True):
            logger.setLevel(was)
        for handler, stream in streams.items():
            handler.setStream(stream)


def _next_minute(when: datetime, *, inclusive: bool) -> datetime:
    minute = when.replace(second=0, microsecond=0)
    return minute if inclusive and minute == when else minute + timedelta(minutes=1)
