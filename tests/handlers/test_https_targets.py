"""The API refuses a plain-http target where the deployment requires https (on AWS), with a 422 naming
`target.url`, and takes it in local mode."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.handlers import api, wiring

pytestmark = [pytest.mark.emulator, pytest.mark.filterwarnings("ignore:No application metrics:UserWarning")]

SCHEDULE = {"type": "cron", "expression": "0 9 * * 1-5"}
TENANT_A = "arn:aws:iam::111111111111:user/alice"
PUBLIC = "93.184.216.34"  # a literal public address: no DNS


def on_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    """The deployed stack's target settings, on this test's container (its secrets stay the local ones; the test's
    caller is mapped to its tenant, as local mode's bearer tokens carry no principal id)."""
    container = wiring.container(api.metrics)
    update = {"local_mode": False, "allow_private_targets": False, "tenant_map": {TENANT_A: TENANT_A}}
    aws = container.core.settings.model_copy(update=update)
    checks = wiring.TargetChecks(aws)
    monkeypatch.setattr(container, "core", replace(container.core, settings=aws, check_target=checks))
    monkeypatch.setattr(container, "checks", checks)


def test_plain_http_is_a_422_on_aws_and_changes_nothing(api_call, snapshot, monkeypatch) -> None:
    on_aws(monkeypatch)
    before = snapshot()
    for verb, path in (("POST", "/v1/jobs"), ("POST", "/v1/jobs/batch")):
        job = {"schedule": SCHEDULE, "target": {"type": "http", "url": f"http://{PUBLIC}/hook"}}
        response = api_call(verb, path, job if path == "/v1/jobs" else {"items": [{"job": job}]})
        if path.endswith("batch"):
            assert response.status == 200, response.text
            problem = response.body["results"][0]["problem"]
        else:
            problem = response.body
        assert problem["status"] == 422, problem
        assert problem["errors"][0]["field"] == "target.url"
        assert "https" in problem["detail"]
    assert snapshot() == before
    created = api_call(
        "POST", "/v1/jobs", {"schedule": SCHEDULE, "target": {"type": "http", "url": f"https://{PUBLIC}/"}}
    )
    assert created.status == 201, created.text


def test_plain_http_is_refused_by_patch_on_aws(api_call, snapshot, monkeypatch) -> None:
    job = {"schedule": SCHEDULE, "target": {"type": "http", "url": f"https://{PUBLIC}/hook"}}
    job_id = api_call("POST", "/v1/jobs", job).body["job_id"]
    on_aws(monkeypatch)
    before = snapshot()
    response = api_call("PATCH", f"/v1/jobs/{job_id}", {"target": {"type": "http", "url": f"http://{PUBLIC}/hook"}})
    assert response.status == 422, response.text
    assert response.body["errors"][0]["field"] == "target.url"
    assert snapshot() == before


def test_plain_http_is_accepted_in_local_mode(api_call) -> None:
    job = {"schedule": SCHEDULE, "target": {"type": "http", "url": "http://127.0.0.1:9/hook"}}
    assert api_call("POST", "/v1/jobs", job).status == 201
