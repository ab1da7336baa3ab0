"""The clients the lease's renewals go through give up within the lease's margin at the deployed settings: a renewal
may land up to two heartbeat periods late (`ThreadBeating` keeps a fixed rate), so one request, its retry included,
must fail sooner than that - the functions' other clients would wait 20 s on a hung connection and retry 4 times."""

from __future__ import annotations

import pytest

from scheduler.composition import Configs
from scheduler.handlers import wiring
from scheduler.settings import Settings


def test_one_renewal_request_gives_up_within_the_deployed_leases_margin() -> None:
    execute = Configs.of(Settings()).execute
    assert execute.heartbeat_fraction is not None
    margin = execute.lease.total_seconds() * (1 - execute.heartbeat_fraction)

    assert wiring.worst_request_seconds(wiring._RENEWAL_CONFIG) < margin
    assert wiring.worst_request_seconds(wiring._BOTO_CONFIG) > margin  # why the renewals have clients of their own


def test_the_functions_renewal_clients_are_made_on_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    credentials = {"AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}
    for name, value in credentials.items():
        monkeypatch.setenv(name, value)
    clients = wiring.Clients.default(events=False)
    assert isinstance(clients.renewal_dynamodb, wiring.RenewalClient)
    assert isinstance(clients.renewal_sqs, wiring.RenewalClient)
    assert clients.renewal_dynamodb._client is None  # an api or sweeper container never makes them

    config = clients.renewal_dynamodb.meta.config

    assert config is clients.renewal_dynamodb.client.meta.config  # made once
    assert (config.connect_timeout, config.read_timeout, config.retries["total_max_attempts"]) == (1, 2, 2)
    assert clients.renewal_sqs.meta.service_model.service_name == "sqs"
