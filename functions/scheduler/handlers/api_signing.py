"""The API's routes of a job's webhook signing keys (signature v2, docs/security.md): read them, rotate them."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

from aws_lambda_powertools.event_handler import Response

from scheduler.core.jobs.signing_keys import DEFAULT_KEY_OVERLAP, MAX_KEY_OVERLAP
from scheduler.core.model.job import Job
from scheduler.core.model.timefmt import rfc3339
from scheduler.handlers import wiring
from scheduler.handlers.api_caller import key_rotation, logger, metrics, reads, tenant
from scheduler.handlers.api_models import SigningKey, SigningKeys
from scheduler.handlers.api_problems import Problem
from scheduler.handlers.api_requests import IF_MATCH, if_match, json_body
from scheduler.handlers.api_routes import route
from scheduler.handlers.api_views import json_response
from scheduler.security.signing import signing_versions, versioned_key_id


@route.get(
    "/v1/jobs/<job_id>/signing-keys",
    summary="the job's webhook signing keys (signature v2), for its receivers",
    responses={200: ("the keys, current first", "SigningKeys")},
)
def signing_keys(job_id: str) -> Response[str]:
    """The job's signature v2 keys (the current version under every active root key, then the replaced version
    while its overlap lasts): only its own tenant gets them (another tenant's job is a 404), and a key verifies that
    job's calls only (docs/security.md)."""
    who = tenant()
    job = reads().get(who, job_id)
    return _signing_keys_response(job, 200)


@route.post(
    "/v1/jobs/<job_id>/signing-keys/rotate",
    summary="rotate (or, with overlap_seconds 0, revoke) the job's webhook signing key",
    description=(
        "Makes the next version of the job's key current. The replaced version keeps signing every call (a second "
        "v2 signature) until the overlap ends, so receivers fetch the new key meanwhile; only the version just "
        "replaced overlaps. A change of the job: its version (ETag) goes up."
    ),
    params=(replace(IF_MATCH, description='the job version you read, e.g. "3"'),),
    body="SigningKeyRotation",
    body_required=False,
    responses={
        200: ("the keys after the rotation, current first", "SigningKeys"),
        409: "the job is cancelled",
        422: "overlap_seconds out of range, or an unknown field",
    },
)
def rotate_signing_key(job_id: str) -> Response[str]:
    """Make the next version of the job's key current; the replaced one keeps signing for `overlap_seconds` (0: a
    revoke). Answers like the GET, with the job's new version as ETag; `If-Match` refuses a stale read (412)."""
    who = tenant()
    body = json_body(required=False)
    unknown = set(body) - {"overlap_seconds"}
    if unknown:
        detail = f'unknown field(s): {", ".join(sorted(unknown))}; send {{"overlap_seconds": n}} or no body'
        raise Problem.unprocessable(detail, *((name, "unknown field") for name in sorted(unknown)))
    overlap = body.get("overlap_seconds", int(DEFAULT_KEY_OVERLAP.total_seconds()))
    limit = int(MAX_KEY_OVERLAP.total_seconds())
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap <= limit:
        raise Problem.unprocessable(
            f"overlap_seconds is a whole number of seconds 0-{limit} (7 days; 0 revokes the old key at once), "
            f"not {json.dumps(overlap)}",
            ("overlap_seconds", f"must be an integer 0-{limit}"),
        )
    job = key_rotation().rotate(who, job_id, timedelta(seconds=overlap), if_match())
    return _signing_keys_response(job, 200)


def _signing_keys_response(job: Job, status: int) -> Response[str]:
    ring = wiring.container(metrics).key_ring
    now = wiring.container(metrics).core.clock.now()
    keys: list[SigningKey] = []
    for version in signing_versions(job.key_version, job.previous_key_until, now):
        until = job.previous_key_until if version != job.key_version else None
        expires = rfc3339(until) if until is not None else None
        keys += [
            {"key_id": kid, "key": key, "version": version, "expires_at": expires}
            for kid, key in ring.job_keys(job.job_id, version).items()
        ]
    body: SigningKeys = {
        "job_id": job.job_id,
        "signature": "v2",
        "algorithm": "HMAC-SHA256",
        "current_key_id": versioned_key_id(ring.current, job.key_version),
        "key_version": job.key_version,
        "keys": keys,
    }
    shown = [k["key_id"] for k in keys]
    logger.info("signing keys handed out", extra={"job_id": job.job_id, "tenant": job.tenant, "key_ids": shown})
    return json_response(status, body, {"Cache-Control": "no-store", "ETag": f'"{job.version}"'})
