"""The receiver the framework tests put in front of their apps: JOB_ID's keys (signed.py), in-memory dedupe, and a
clock stopped at the moment the test calls are signed."""

from __future__ import annotations

import pytest

from punctual_sdk.receiver import InMemoryDedupeStore, Receiver
from tests.sdk.receiver.signed import JOB_ID, KEYS, NOW


@pytest.fixture
def receiver() -> Receiver:
    return Receiver(InMemoryDedupeStore(), lambda job_id: KEYS if job_id == JOB_ID else {}, clock=lambda: NOW)
