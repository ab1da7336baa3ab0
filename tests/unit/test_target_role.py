"""Non-http targets are called with the target role's credentials (AssumeRole), never the worker's own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler.adapters.aws_targets import assumed_role_session, build_aws_targets


class FakeSts:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def assume_role(self, **request: Any) -> dict[str, Any]:
        self.calls.append(request)
        expires = datetime.now(UTC) + timedelta(hours=1)
        return {"Credentials": {"AccessKeyId": f"ASIA{len(self.calls)}", "SecretAccessKey": "s", "SessionToken": "t",
                                "Expiration": expires}}  # fmt: skip


def test_the_session_carries_the_assumed_role_credentials() -> None:
    sts = FakeSts()
    session = assumed_role_session("arn:aws:iam::111111111111:role/punctual-TargetRole", "punctual-worker", sts)
    credentials = session.get_credentials().get_frozen_credentials()
    assert credentials.access_key == "ASIA1" and credentials.token == "t"
    assert sts.calls == [
        {"RoleArn": "arn:aws:iam::111111111111:role/punctual-TargetRole", "RoleSessionName": "punctual-worker",
         "DurationSeconds": 3600}
    ]  # fmt: skip


def test_without_a_target_role_the_invokers_use_the_default_credentials() -> None:
    invokers = build_aws_targets()
    assert all(getattr(invoker, "_session") is None for invoker in invokers.values())  # noqa: B009
    with_role = build_aws_targets(target_role_arn="arn:aws:iam::111111111111:role/r")
    sessions = {id(getattr(invoker, "_session")) for invoker in with_role.values()}  # noqa: B009
    assert len(sessions) == 1 and None not in {getattr(i, "_session") for i in with_role.values()}  # noqa: B009
