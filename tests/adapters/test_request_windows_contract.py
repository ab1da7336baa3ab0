"""RequestWindows contract (memory and DynamoDB Local): a window counts up to its limit and refuses beyond it,
per tenant and per window, and concurrent takes never count past the limit."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from scheduler.adapters.dynamodb import DynamoRequestWindows
from scheduler.adapters.memory import MemoryRequestWindows
from tests.adapters.conftest import BACKENDS, jobs_table_store


@pytest.fixture(params=BACKENDS)
def windows(request: pytest.FixtureRequest) -> Any:
    return jobs_table_store(request, MemoryRequestWindows, DynamoRequestWindows)


def test_a_window_admits_up_to_its_limit(windows, make) -> None:
    expires = make.t0 + timedelta(minutes=1)
    assert [windows.take("tenant-a", 7, 3, expires) for _ in range(5)] == [True, True, True, False, False]
    assert windows.take("tenant-b", 7, 3, expires)  # another tenant's count
    assert windows.take("tenant-a", 8, 3, expires)  # the next window starts again


def test_concurrent_takes_never_count_past_the_limit(windows, make) -> None:
    expires = make.t0 + timedelta(minutes=1)
    admitted: list[bool] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(5):
            result = windows.take("tenant-a", 1, 12, expires)
            with lock:
                admitted.append(result)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert admitted.count(True) == 12


def test_a_take_of_many_counts_them_all_or_none(windows, make) -> None:
    # A bulk action's page counts as its jobs: all of them fit in what the window has left, or none is counted
    expires = make.t0 + timedelta(minutes=1)
    assert windows.take("tenant-a", 3, 10, expires, 4)
    assert windows.take("tenant-a", 3, 10, expires, 5)
    assert not windows.take("tenant-a", 3, 10, expires, 2)  # 9 counted: 2 more would pass 10
    assert windows.take("tenant-a", 3, 10, expires)  # ... while the last one fits
    assert not windows.take("tenant-a", 3, 10, expires)
    assert windows.take("tenant-a", 4, 10, expires, 10)  # a whole window, in the next one
