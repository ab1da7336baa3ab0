"""The empty-buckets scenario at a tiny size against the emulators: a behaviour test, not a timed one
(`scripts/bench --only empty-buckets` measures the figures, never asserted here)."""

from __future__ import annotations

import pytest

from scheduler_bench import empty_buckets

pytestmark = pytest.mark.emulator


def test_an_empty_deployment_pays_each_shards_bucket_every_minute_and_more_shards_pay_more(
    aws_env: dict[str, str],
) -> None:
    config = empty_buckets.EmptyBucketsConfig(shard_counts=(2, 6), minutes=2, rounds=1)

    result = empty_buckets.run(config, lambda message: None)

    # Each shard's bucket of each minute was claimed, queried and completed: two writes and a read a minute
    two, six = (result["runs"][i]["per_minute"] for i in (0, 1))
    assert two["dynamodb_calls"]["dynamodb:Query"] >= 2 and six["dynamodb_calls"]["dynamodb:Query"] >= 6
    assert six["write_units"] > two["write_units"] >= 2 * 2
    assert result["per_shard"]["6"]["write_units_per_minute"] == pytest.approx(2.0, abs=0.7)
    assert result["per_shard"]["6"]["usd_per_month"] > 0
    section = "\n".join(empty_buckets.empty_buckets_section(result))
    assert "| 2 |" in section and "| 6 |" in section
