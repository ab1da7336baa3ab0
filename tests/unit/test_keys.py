"""Derived identities: occurrence keys, deterministic jitter, shards."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from scheduler.core.model.keys import jitter_offset, occurrence_key, shard_of, split_occurrence_key
from scheduler.core.model.timefmt import truncate_ms
from tests.unit.fixtures import at


def test_occurrence_key_is_job_id_and_rfc3339_utc_instant() -> None:
    assert occurrence_key("job42", at("2026-01-05T09:00")) == "job42:2026-01-05T09:00:00Z"


def test_occurrence_key_normalises_offsets_to_z() -> None:
    berlin_ten = datetime(2026, 1, 5, 10, 0, tzinfo=timezone(timedelta(hours=1)))

    assert occurrence_key("job42", berlin_ten) == "job42:2026-01-05T09:00:00Z"


def test_occurrence_key_keeps_milliseconds_when_present() -> None:
    assert occurrence_key("j", datetime(2026, 1, 5, 9, 0, 0, 250_000, tzinfo=UTC)) == "j:2026-01-05T09:00:00.250Z"


def test_occurrence_key_of_an_instant_is_that_of_its_millisecond_truncated_form() -> None:
    # (what a message body or a stored item carries: the key read back must be the key sent; it used to be
    # "...09:00:00.000Z" for an instant 412 microseconds past the second, and "...09:00:00Z" once truncated)
    for micro in (412, 999, 250_412, 999_999):
        instant = datetime(2026, 1, 5, 9, 0, 0, micro, tzinfo=UTC)
        assert occurrence_key("j", instant) == occurrence_key("j", truncate_ms(instant))
    assert occurrence_key("j", datetime(2026, 1, 5, 9, 0, 0, 412, tzinfo=UTC)) == "j:2026-01-05T09:00:00Z"


def test_occurrence_key_refuses_naive_times() -> None:
    with pytest.raises(ValueError, match="explicit UTC offset"):
        occurrence_key("j", datetime(2026, 1, 5, 9, 0))


def test_occurrence_key_is_stable_and_distinguishes_occurrences() -> None:
    nine, ten = at("2026-01-05T09:00"), at("2026-01-05T10:00")

    assert occurrence_key("j", nine) == occurrence_key("j", datetime(2026, 1, 5, 9, tzinfo=UTC))
    assert occurrence_key("j", nine) != occurrence_key("j", ten)
    assert occurrence_key("j", nine) != occurrence_key("k", nine)


def test_split_occurrence_key_round_trips() -> None:
    key = occurrence_key("job42", at("2026-01-05T09:00"))

    assert split_occurrence_key(key) == ("job42", "2026-01-05T09:00:00Z")
    with pytest.raises(ValueError, match="not an occurrence key"):
        split_occurrence_key("no-colon-here")


def test_jitter_is_zero_without_jitter_seconds() -> None:
    assert jitter_offset("j:2026-01-05T09:00:00Z", 0) == timedelta(0)


def test_jitter_is_deterministic_per_key() -> None:
    key = "j:2026-01-05T09:00:00Z"

    assert jitter_offset(key, 300) == jitter_offset(key, 300)


def test_jitter_stays_in_bounds_and_spreads_a_herd() -> None:
    # Given 1000 jobs all due at midnight with 60 s of jitter
    keys = [occurrence_key(f"job{i}", at("2026-01-06T00:00")) for i in range(1000)]

    offsets = [jitter_offset(k, 60) for k in keys]

    # Then every offset is within [0, 60 s], never negative (jitter only delays) ...
    assert all(timedelta(0) <= o <= timedelta(seconds=60) for o in offsets)
    # ... in millisecond steps ...
    assert all(o.microseconds % 1000 == 0 for o in offsets)
    # ... and they spread: many distinct values, covering both ends of the window
    assert len(set(offsets)) > 950
    assert min(offsets) < timedelta(seconds=5)
    assert max(offsets) > timedelta(seconds=55)


def test_jitter_differs_between_occurrences_of_the_same_job() -> None:
    offsets = {jitter_offset(occurrence_key("j", at("2026-01-05T00:00") + timedelta(hours=h)), 600) for h in range(48)}

    assert len(offsets) > 40


def test_shard_is_in_range_and_stable() -> None:
    shards = [shard_of(f"job{i}", 8) for i in range(500)]

    assert all(0 <= s < 8 for s in shards)
    assert shards == [shard_of(f"job{i}", 8) for i in range(500)]
    # And it spreads a hot minute over all shards
    assert set(shards) == set(range(8))


def test_single_shard_is_always_zero() -> None:
    assert {shard_of(f"job{i}", 1) for i in range(50)} == {0}
