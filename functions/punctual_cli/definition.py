"""From command-line flags to a job definition (the body of `POST /v1/jobs`) or a merge patch (`PATCH`).

Only the shape is decided here (which flags make which schedule and target); whether the values are valid is
decided by `JobSpec`, the model the API validates with, so the messages are the API's.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from scheduler.core.model.cron import InvalidSchedule, zone


class UsageError(Exception):
    """The command line itself is wrong (exit code 2): a flag is missing, repeated or malformed."""


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_DURATION = re.compile(r"(\d+)([smhdw])")


def parse_duration(text: str) -> int:
    """Seconds in `90`, `30s`, `5m`, `2h`, `7d`, `1w` or combinations such as `1h30m`."""
    cleaned = text.strip().lower()
    if cleaned.isdigit():
        return int(cleaned)
    parts = _DURATION.findall(cleaned)
    if not parts or "".join(f"{n}{u}" for n, u in parts) != cleaned:
        raise UsageError(f"'{text}' is not a duration; write e.g. 30s, 5m, 2h, 7d or 1h30m")
    return sum(int(n) * _UNITS[u] for n, u in parts)


def parse_instant(text: str, tz: str | None, flag: str) -> str:
    """An RFC 3339 instant with its offset. Without an offset the time is read in `--tz` (never guessed)."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise UsageError(f"{flag} '{text}' is not a time; write e.g. 2026-12-01T09:00:00+01:00") from None
    if value.tzinfo is None:
        if not tz:
            raise UsageError(f"{flag} '{text}' has no UTC offset; add one (e.g. +01:00 or Z) or pass --tz ZONE")
        value = value.replace(tzinfo=_zone(tz))
    return value.isoformat()


def _zone(name: str) -> ZoneInfo:
    try:
        return zone(name)
    except InvalidSchedule as exc:
        raise UsageError(str(exc)) from None


def read_json_argument(text: str, flag: str) -> Any:
    """A JSON value given inline, or `@path` to read it from a file (`@-` reads standard input)."""
    if text.startswith("@"):
        source = text[1:]
        try:
            raw = sys.stdin.read() if source == "-" else Path(source).read_text()
        except OSError as exc:
            raise UsageError(f"{flag}: cannot read '{source}': {exc.strerror}") from None
    else:
        raw = text
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None


def add_definition_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of `submit` and `edit` (and the schedule flags of `preview`)."""
    add_schedule_flags(parser)
    target = parser.add_argument_group("target (one of)")
    target.add_argument("--url", help="http target: POST the payload to this URL")
    target.add_argument("--method", choices=["POST", "PUT", "PATCH"], help="http target: method (default POST)")
    target.add_argument(
        "--header", action="append", metavar="NAME:VALUE", help="http target: an extra header (repeatable)"
    )
    target.add_argument("--timeout", metavar="DURATION", help="http target: timeout (default 30s)")
    target.add_argument("--sqs-queue-url", metavar="URL", help="sqs target: the queue's URL")
    target.add_argument("--message-group-id", metavar="ID", help="sqs target: FIFO message group")
    target.add_argument("--sns-topic-arn", metavar="ARN", help="sns target: the topic's ARN")
    target.add_argument("--event-bus", metavar="NAME", help="eventbridge target: the bus name or ARN")
    target.add_argument("--lambda", dest="lambda_function", metavar="FUNCTION", help="lambda target: name or ARN")
    target.add_argument("--state-machine-arn", metavar="ARN", help="stepfunctions target: the state machine")
    target.add_argument("--handler", metavar="NAME", help="handler target: a function registered in the worker")
    job = parser.add_argument_group("job")
    job.add_argument("--name", help="a name for people (1-128 characters)")
    job.add_argument(
        "--label", action="append", metavar="KEY=VALUE", help="a label to find the job by (repeatable; see docs/api.md)"
    )
    job.add_argument("--payload", metavar="JSON|@FILE", help="the payload the target receives")
    job.add_argument("--max-attempts", type=int, metavar="N", help="attempts per occurrence (1-20, default 5)")
    job.add_argument("--initial-backoff", metavar="DURATION", help="first retry delay (default 5s)")
    job.add_argument("--max-backoff", metavar="DURATION", help="longest retry delay (default 15m)")
    job.add_argument("--max-event-age", metavar="DURATION", help="give up retrying after this (default 1d)")
    job.add_argument("--jitter", metavar="DURATION", help="spread each run by up to this much (deterministic)")
    job.add_argument("--misfire", choices=["run_once", "skip", "run_all"], help="after downtime (default run_once)")
    job.add_argument("--overlap", choices=["skip", "buffer_one", "allow"], help="run still going (default skip)")
    job.add_argument("--delivery", choices=["at_least_once", "at_most_once"], help="default at_least_once")
    flow = parser.add_argument_group("flow control (docs/flow-control.md)")
    flow.add_argument("--flow-key", metavar="KEY", help="the destination's flow-control key, shared by your jobs")
    flow.add_argument("--flow-rate", type=int, metavar="N", help="at most N calls of the key started per period")
    flow.add_argument("--flow-period", metavar="DURATION", help="the period of --flow-rate (default 1s, at most 1h)")
    flow.add_argument("--flow-parallelism", type=int, metavar="N", help="at most N calls of the key at once")
    flow.add_argument("--flow-max-backlog", type=int, metavar="N", help="refuse new runs while N are held")


def add_schedule_flags(parser: argparse.ArgumentParser) -> None:
    schedule = parser.add_argument_group("schedule (one of --at, --in, --cron, --every)")
    schedule.add_argument("--at", metavar="TIME", help="once, at a time: 2026-12-01T09:00:00+01:00 (or with --tz)")
    schedule.add_argument("--in", dest="delay", metavar="DURATION", help="once, after a delay: 30s, 5m, 7d")
    schedule.add_argument("--cron", metavar="EXPR", help="5-field cron or @daily/@hourly/..., evaluated in --tz")
    schedule.add_argument("--tz", metavar="ZONE", help="IANA zone of --cron (default UTC) and of offset-less times")
    schedule.add_argument("--every", metavar="DURATION", help="a rate: every 30s, 5m, 1h, ...")
    schedule.add_argument("--start-at", metavar="TIME", help="cron/rate: first possible run")
    schedule.add_argument("--end-at", metavar="TIME", help="cron/rate: no run after this")


def schedule_from_args(args: argparse.Namespace) -> dict[str, Any] | None:
    """The schedule the flags describe, or None when no schedule flag is given."""
    chosen = [flag for flag, value in (("--at", args.at), ("--in", args.delay), ("--cron", args.cron),
                                       ("--every", args.every)) if value is not None]  # fmt: skip
    if len(chosen) > 1:
        raise UsageError(f"give one schedule, not {' and '.join(chosen)}")
    window = {"--start-at": args.start_at, "--end-at": args.end_at}
    if not chosen:
        if any(v is not None for v in window.values()):
            raise UsageError("--start-at/--end-at go with --cron or --every")
        return None
    schedule: dict[str, Any]
    if args.at is not None:
        schedule = {"type": "once", "at": parse_instant(args.at, args.tz, "--at")}
    elif args.delay is not None:
        schedule = {"type": "once", "delay_seconds": parse_duration(args.delay)}
    elif args.cron is not None:
        schedule = {"type": "cron", "expression": args.cron}
        if args.tz:
            schedule["timezone"] = args.tz
    else:
        schedule = {"type": "rate", "every_seconds": parse_duration(args.every)}
    if schedule["type"] == "once" and any(v is not None for v in window.values()):
        raise UsageError("--start-at/--end-at go with --cron or --every, not a one-off schedule")
    for flag, value in window.items():
        if value is not None:
            schedule[flag.removeprefix("--").replace("-", "_")] = parse_instant(value, args.tz, flag)
    return schedule


def target_from_args(args: argparse.Namespace) -> dict[str, Any] | None:
    """The target the flags describe, or None when no target flag is given."""
    kinds = {
        "--url": ("http", "url", args.url),
        "--sqs-queue-url": ("sqs", "queue_url", args.sqs_queue_url),
        "--sns-topic-arn": ("sns", "topic_arn", args.sns_topic_arn),
        "--event-bus": ("eventbridge", "event_bus_name", args.event_bus),
        "--lambda": ("lambda", "function_name", args.lambda_function),
        "--state-machine-arn": ("stepfunctions", "state_machine_arn", args.state_machine_arn),
        "--handler": ("handler", "name", args.handler),
    }
    chosen = [flag for flag, (_, _, value) in kinds.items() if value is not None]
    if len(chosen) > 1:
        raise UsageError(f"give one target, not {' and '.join(chosen)}")
    http_only = {"--method": args.method, "--header": args.header, "--timeout": args.timeout}
    if not chosen:
        extra = [flag for flag, value in {**http_only, "--message-group-id": args.message_group_id}.items() if value]
        if extra:
            raise UsageError(f"{', '.join(extra)} need(s) the target flag it belongs to (--url or --sqs-queue-url)")
        return None
    kind, key, value = kinds[chosen[0]]
    target: dict[str, Any] = {"type": kind, key: value}
    misplaced = [flag for flag, v in http_only.items() if v] if kind != "http" else []
    if args.message_group_id and kind != "sqs":
        misplaced.append("--message-group-id")
    if misplaced:
        raise UsageError(f"{', '.join(misplaced)} do(es) not apply to a {kind} target")
    if kind == "http":
        if args.method:
            target["method"] = args.method
        if args.timeout:
            target["timeout_seconds"] = parse_duration(args.timeout)
        if args.header:
            target["headers"] = dict(_header(h) for h in args.header)
    if kind == "sqs" and args.message_group_id:
        target["message_group_id"] = args.message_group_id
    return target


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise UsageError(f"--header '{text}' should be NAME:VALUE")
    return name.strip(), value.strip()


def label_pair(text: str, separator: str) -> tuple[str, str]:
    """`KEY<separator>VALUE` of a --label flag (the API checks the key and value rules)."""
    key, found, value = text.partition(separator)
    if not found or not key:
        raise UsageError(f"--label '{text}' should be KEY{separator}VALUE")
    return key.strip(), value.strip()


def policies_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Name, payload, retry and policy fields the flags set (only those given)."""
    fields: dict[str, Any] = {}
    if args.name is not None:
        fields["name"] = args.name
    if getattr(args, "label", None):
        fields["labels"] = dict(label_pair(text, "=") for text in args.label)
    if args.payload is not None:
        fields["payload"] = read_json_argument(args.payload, "--payload")
    retry: dict[str, Any] = {}
    if args.max_attempts is not None:
        retry["max_attempts"] = args.max_attempts
    for flag, key in (("initial_backoff", "initial_backoff_seconds"), ("max_backoff", "max_backoff_seconds"),
                      ("max_event_age", "max_event_age_seconds")):  # fmt: skip
        if getattr(args, flag) is not None:
            retry[key] = parse_duration(getattr(args, flag))
    if retry:
        fields["retry"] = retry
    if args.jitter is not None:
        fields["jitter_seconds"] = parse_duration(args.jitter)
    for flag, key in (("misfire", "misfire_policy"), ("overlap", "overlap_policy"), ("delivery", "delivery")):
        if getattr(args, flag) is not None:
            fields[key] = getattr(args, flag)
    flow = flow_from_args(args)
    if flow is not None:
        fields["flow_control"] = flow
    return fields


def flow_from_args(args: argparse.Namespace) -> dict[str, Any] | None:
    """The `flow_control` the --flow-* flags describe (None without them); the API checks the values."""
    limits = {
        "rate": getattr(args, "flow_rate", None),
        "period_seconds": parse_duration(args.flow_period) if getattr(args, "flow_period", None) else None,
        "parallelism": getattr(args, "flow_parallelism", None),
        "max_backlog": getattr(args, "flow_max_backlog", None),
    }
    given = {name: value for name, value in limits.items() if value is not None}
    key = getattr(args, "flow_key", None)
    if key is None:
        if given:
            raise UsageError("--flow-rate, --flow-period, --flow-parallelism and --flow-max-backlog need --flow-key")
        return None
    return {"key": key, **given}


def definition_from_args(args: argparse.Namespace, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The job definition for `submit`: `base` (from `--file`) with the flags on top."""
    definition = dict(base or {})
    schedule, target = schedule_from_args(args), target_from_args(args)
    if schedule is not None:
        definition["schedule"] = schedule
    if target is not None:
        definition["target"] = target
    policies = policies_from_args(args)
    if "retry" in policies and isinstance(definition.get("retry"), Mapping):
        policies["retry"] = {**definition["retry"], **policies["retry"]}
    definition.update(policies)
    if "schedule" not in definition:
        raise UsageError("say when: --at TIME, --in DURATION, --cron EXPR [--tz ZONE] or --every DURATION")
    if "target" not in definition:
        raise UsageError(
            "say what to call: --url, --sqs-queue-url, --sns-topic-arn, --event-bus, --lambda, "
            "--state-machine-arn or --handler"
        )
    return definition


def replacement(current: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that turns the `current` schedule/target into `new`.

    Same type: the new fields are merged in (a cron keeps its zone when only `--cron` changes), except that a
    one-off schedule's `at` and `delay_seconds` replace each other. Another type: the old type's fields are
    removed (`null`), or the merged result would mix both.
    """
    patch = dict(new)
    if current.get("type") == new.get("type"):
        if new.get("type") == "once":
            for key in ("at", "delay_seconds"):
                patch.setdefault(key, None)
        return patch
    return {**{key: None for key in current if key not in new}, **patch}


def parse_assignment(text: str) -> dict[str, Any]:
    """`--set retry.max_attempts=3` as a merge patch; the value is JSON when it parses, else a string
    (`--set name=report`); `null` removes a field."""
    path, sep, raw = text.partition("=")
    keys = [k for k in path.strip().split(".") if k]
    if not sep or not keys:
        raise UsageError(f"--set '{text}' should be KEY=VALUE, e.g. --set retry.max_attempts=3")
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    for key in reversed(keys):
        value = {key: value}
    assert isinstance(value, dict)
    return value


def edit_patch(args: argparse.Namespace, current: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch for `edit`: flags, then `--patch`, then each `--set`, in that order."""
    patch: dict[str, Any] = {}
    schedule, target = schedule_from_args(args), target_from_args(args)
    if schedule is not None:
        patch["schedule"] = replacement(current.get("schedule") or {}, schedule)
    if target is not None:
        patch["target"] = replacement(current.get("target") or {}, target)
    patch.update(policies_from_args(args))
    if args.patch is not None:
        extra = read_json_argument(args.patch, "--patch")
        if not isinstance(extra, dict):
            raise UsageError("--patch must be a JSON object (a merge patch)")
        patch = _merge_keep_nulls(patch, extra)
    for assignment in args.set or []:
        patch = _merge_keep_nulls(patch, parse_assignment(assignment))
    return patch


def _merge_keep_nulls(patch: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Combine two merge patches into one (a `null` in either stays a `null`: it is an instruction)."""
    combined = dict(patch)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(combined.get(key), Mapping):
            combined[key] = _merge_keep_nulls(dict(combined[key]), value)
        else:
            combined[key] = value
    return combined
