"""Flags to request bodies: which flags make which schedule, target and policies, and the merge patch of
`edit`. No network: everything here is decided before a request is built."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from punctual_cli.client import validate_definition
from punctual_cli.definition import (
    UsageError,
    definition_from_args,
    edit_patch,
    parse_assignment,
    parse_duration,
    replacement,
)
from punctual_cli.main import build_parser

pytestmark = pytest.mark.usefixtures("no_network")


def submit_args(*flags: str) -> argparse.Namespace:
    return build_parser().parse_args(["submit", *flags])


def edit_args(*flags: str) -> argparse.Namespace:
    return build_parser().parse_args(["edit", "job-1", *flags])


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("30s", 30), ("5m", 300), ("2h", 7200), ("7d", 604_800), ("1w", 604_800), ("1h30m", 5400)],
)
def test_durations_read_as_seconds(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5x", "m5", "1.5h", "5m 3"])
def test_a_malformed_duration_is_a_usage_error_that_shows_the_form(text: str) -> None:
    with pytest.raises(UsageError, match=r"write e\.g\. 30s"):
        parse_duration(text)


def test_cron_in_a_zone_with_a_window() -> None:
    definition = definition_from_args(submit_args(
        "--cron", "0 9 * * 1-5", "--tz", "Europe/Berlin", "--start-at", "2026-12-01T00:00:00Z",
        "--end-at", "2027-01-01T00:00:00+01:00", "--url", "https://example.com/hook",
    ))  # fmt: skip

    assert definition["schedule"] == {
        "type": "cron",
        "expression": "0 9 * * 1-5",
        "timezone": "Europe/Berlin",
        "start_at": "2026-12-01T00:00:00+00:00",
        "end_at": "2027-01-01T00:00:00+01:00",
    }
    validate_definition(definition)


def test_in_and_every_are_delays_and_rates_in_seconds() -> None:
    assert definition_from_args(submit_args("--in", "7d", "--handler", "x"))["schedule"] == {
        "type": "once",
        "delay_seconds": 604_800,
    }
    assert definition_from_args(submit_args("--every", "30s", "--handler", "x"))["schedule"] == {
        "type": "rate",
        "every_seconds": 30,
    }


def test_at_without_an_offset_is_read_in_the_given_zone() -> None:
    # Given a wall time in Berlin in winter (UTC+1)
    definition = definition_from_args(
        submit_args("--at", "2026-12-01T09:00", "--tz", "Europe/Berlin", "--handler", "x")
    )

    # Then the instant carries Berlin's offset
    assert definition["schedule"] == {"type": "once", "at": "2026-12-01T09:00:00+01:00"}


def test_at_without_an_offset_or_zone_is_refused_rather_than_guessed() -> None:
    with pytest.raises(UsageError, match="no UTC offset"):
        definition_from_args(submit_args("--at", "2026-12-01T09:00", "--handler", "x"))


@pytest.mark.parametrize(
    ("flags", "target"),
    [
        (["--url", "https://example.com/h", "--method", "PUT", "--timeout", "1m", "--header", "X-Team: billing"],
         {"type": "http", "url": "https://example.com/h", "method": "PUT", "timeout_seconds": 60,
          "headers": {"X-Team": "billing"}}),
        (["--sqs-queue-url", "https://sqs.eu-west-1.amazonaws.com/123456789012/q.fifo", "--message-group-id", "g"],
         {"type": "sqs", "queue_url": "https://sqs.eu-west-1.amazonaws.com/123456789012/q.fifo",
          "message_group_id": "g"}),
        (["--sns-topic-arn", "arn:aws:sns:eu-west-1:123456789012:topic"],
         {"type": "sns", "topic_arn": "arn:aws:sns:eu-west-1:123456789012:topic"}),
        (["--event-bus", "orders"], {"type": "eventbridge", "event_bus_name": "orders"}),
        (["--lambda", "charge-card"], {"type": "lambda", "function_name": "charge-card"}),
        (["--state-machine-arn", "arn:aws:states:eu-west-1:123456789012:stateMachine:billing"],
         {"type": "stepfunctions", "state_machine_arn": "arn:aws:states:eu-west-1:123456789012:stateMachine:billing"}),
        (["--handler", "payments.charge"], {"type": "handler", "name": "payments.charge"}),
    ],
)  # fmt: skip
def test_each_target_flag_makes_its_target(flags: list[str], target: dict[str, Any]) -> None:
    definition = definition_from_args(submit_args("--in", "5m", *flags))

    assert definition["target"] == target
    validate_definition(definition)  # the shape is one the API accepts


def test_policies_retry_and_payload_flags() -> None:
    definition = definition_from_args(submit_args(
        "--in", "5m", "--handler", "x", "--name", "charge", "--payload", '{"card": 42}', "--max-attempts", "3",
        "--initial-backoff", "10s", "--max-backoff", "1h", "--max-event-age", "2d", "--jitter", "30s",
        "--misfire", "skip", "--overlap", "allow", "--delivery", "at_most_once",
    ))  # fmt: skip

    assert {k: v for k, v in definition.items() if k not in ("schedule", "target")} == {
        "name": "charge",
        "payload": {"card": 42},
        "retry": {"max_attempts": 3, "initial_backoff_seconds": 10, "max_backoff_seconds": 3600,
                  "max_event_age_seconds": 172_800},
        "jitter_seconds": 30,
        "misfire_policy": "skip",
        "overlap_policy": "allow",
        "delivery": "at_most_once",
    }  # fmt: skip


def test_payload_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "payload.json"
    path.write_text('{"report": "daily"}')

    definition = definition_from_args(submit_args("--in", "5m", "--handler", "x", "--payload", f"@{path}"))

    assert definition["payload"] == {"report": "daily"}


def test_a_payload_that_is_not_json_says_where() -> None:
    with pytest.raises(UsageError, match=r"--payload is not valid JSON: .* line 1 column"):
        definition_from_args(submit_args("--in", "5m", "--handler", "x", "--payload", "{card: 42}"))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--in", "5m", "--every", "1m", "--handler", "x"], "give one schedule, not --in and --every"),
        (["--in", "5m", "--url", "https://e.com", "--handler", "x"], "give one target, not --url and --handler"),
        (["--in", "5m", "--handler", "x", "--timeout", "5s"], "--timeout do.*not apply to a handler target"),
        (["--in", "5m", "--start-at", "2026-01-01T00:00:00Z", "--handler", "x"], "go with --cron or --every"),
        (["--handler", "x"], "say when"),
        (["--in", "5m"], "say what to call"),
    ],
)
def test_contradicting_or_missing_flags_are_usage_errors(flags: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        definition_from_args(submit_args(*flags))


def test_flags_override_a_definition_file() -> None:
    base = {
        "name": "from-file",
        "schedule": {"type": "once", "delay_seconds": 60},
        "target": {"type": "handler", "name": "x"},
        "retry": {"max_attempts": 2, "initial_backoff_seconds": 7},
    }

    definition = definition_from_args(submit_args("--name", "from-flags", "--max-attempts", "4"), base)

    assert definition["name"] == "from-flags"
    assert definition["retry"] == {"max_attempts": 4, "initial_backoff_seconds": 7}
    assert definition["schedule"] == base["schedule"]


CRON_JOB = {
    "schedule": {"type": "cron", "expression": "0 9 * * 1-5", "timezone": "Europe/Berlin"},
    "target": {"type": "http", "url": "https://example.com/hook", "method": "PUT", "timeout_seconds": 30},
}


def test_edit_a_cron_expression_keeps_its_zone() -> None:
    patch = edit_patch(edit_args("--cron", "30 8 * * 1-5"), CRON_JOB)

    assert patch == {"schedule": {"type": "cron", "expression": "30 8 * * 1-5"}}


def test_edit_to_another_schedule_type_removes_the_old_fields() -> None:
    patch = edit_patch(edit_args("--every", "1h", "--handler", "reports.run"), CRON_JOB)

    assert patch["schedule"] == {"expression": None, "timezone": None, "type": "rate", "every_seconds": 3600}
    assert patch["target"] == {"url": None, "method": None, "timeout_seconds": None, "type": "handler",
                               "name": "reports.run"}  # fmt: skip


def test_edit_a_one_off_from_at_to_delay_drops_at() -> None:
    current = {"schedule": {"type": "once", "at": "2026-12-01T09:00:00+01:00"}}

    assert replacement(current["schedule"], {"type": "once", "delay_seconds": 60}) == {
        "type": "once",
        "delay_seconds": 60,
        "at": None,
    }


def test_set_builds_a_nested_merge_patch_with_json_values() -> None:
    patch = edit_patch(edit_args("--set", "retry.max_attempts=3", "--set", "name=nightly", "--set", "payload=null",
                                 "--set", "retry.initial_backoff_seconds=9"), CRON_JOB)  # fmt: skip

    assert patch == {"retry": {"max_attempts": 3, "initial_backoff_seconds": 9}, "name": "nightly", "payload": None}


def test_a_patch_document_and_set_combine_and_keep_nulls() -> None:
    patch = edit_patch(edit_args("--patch", json.dumps({"name": None, "retry": {"max_attempts": 2}}),
                                 "--set", "retry.max_backoff_seconds=60"), CRON_JOB)  # fmt: skip

    assert patch == {"name": None, "retry": {"max_attempts": 2, "max_backoff_seconds": 60}}


def test_set_without_a_value_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="KEY=VALUE"):
        parse_assignment("retry.max_attempts")


def test_flow_flags_name_the_destinations_key_and_its_limits() -> None:
    definition = definition_from_args(submit_args(
        "--in", "5m", "--url", "https://example.com/hook", "--flow-key", "payments-api", "--flow-rate", "50",
        "--flow-period", "2s", "--flow-parallelism", "10",
    ))  # fmt: skip
    assert definition["flow_control"] == {"key": "payments-api", "rate": 50, "period_seconds": 2, "parallelism": 10}
    validate_definition(definition)
    patch = edit_patch(edit_args("--flow-key", "payments-api", "--flow-parallelism", "3"), {})
    assert patch == {"flow_control": {"key": "payments-api", "parallelism": 3}}


def test_flow_limits_without_a_key_are_a_usage_error() -> None:
    with pytest.raises(UsageError, match="need --flow-key"):
        definition_from_args(submit_args("--in", "5m", "--url", "https://example.com/hook", "--flow-rate", "5"))
