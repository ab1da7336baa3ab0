"""Header secrets kept secret (docs/security.md, "Header secrets"): what a read shows of a target, which secret
headers a change of a job carries, and how secret header values are sealed at rest and opened to be sent.

Every header value of an http target is a secret unless the header is public
(`scheduler.core.model.job.is_secret_header`). A stored job holds REDACTED in the spec in place of each secret value,
and the values themselves sealed together in `Job.sealed_headers` (a `SecretSealer`, bound to the job). Only the worker
opens them, to send them; a change of the job opens them to carry them to its next version. A job stored before sealing
keeps clear values in its spec: they are read and sent as they are, and sealed at its next change (nothing accepted is
lost).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from scheduler.core.errors import InvalidRequest
from scheduler.core.model.job import REDACTED, HttpTarget, Job, JobSpec, is_secret_header
from scheduler.core.ports import SealFailed, SecretSealer

_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> tuple[str, str, int | None]:
    """The origin (scheme, host, port) of a URL: where a request to it goes (RFC 6454)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").rstrip(".").lower(), parts.port or _DEFAULT_PORTS.get(scheme)


def url_problem(url: str) -> str | None:
    """Why a target URL may not be submitted, or None. Credentials in the URL (`user:pass@`) are refused: the
    scheduler never sends them (userinfo is deprecated, RFC 9110 4.2.4) and a URL is not write-only."""
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        return (
            "the target url carries credentials (user:password@host); the scheduler does not send URL credentials. "
            "Send them in a header instead (e.g. Authorization: Basic ...): header values are write-only and "
            "sealed at rest"
        )
    return None


def redact_url(url: str) -> str:
    """A target URL as anything shows or writes it - a read, an error message (a run's `last_error`, hence the
    dead-letter log line and the completion event), a log line: its userinfo, every query value and its fragment
    replaced by REDACTED (the query parameters' names stay). A query may carry a token (`?sig=...`), so no value of
    it is shown. The one place a URL is redacted: every message that names a target URL builds it with this."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rsplit('@', 1)[1]}"
    query = "&".join(
        f"{item.split('=', 1)[0]}={REDACTED}" if "=" in item else REDACTED for item in parts.query.split("&") if item
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, REDACTED if parts.fragment else ""))


def spec_view(spec: JobSpec) -> dict[str, Any]:
    """A definition as a read shows it: no secret header value (nor a sealed one's placeholder is told apart from
    it), no URL credential, no query value."""
    shown = spec.model_dump(mode="json", exclude_none=True)
    target = spec.target
    if isinstance(target, HttpTarget):
        shown["target"]["url"] = redact_url(str(target.url))
        if target.headers:
            shown["target"]["headers"] = {
                name: REDACTED if is_secret_header(name, target.public_headers) else value
                for name, value in target.headers.items()
            }
    return shown


def submitted_problem(spec: JobSpec, *, placeholders: bool = False) -> InvalidRequest | None:
    """What a submitted definition may not hold (checked at create and change): URL credentials, and - unless
    `placeholders` (a change's merged definition, whose REDACTED values keep stored ones) - a header whose value is
    REDACTED (a value copied from a read)."""
    target = spec.target
    if not isinstance(target, HttpTarget):
        return None
    problem = url_problem(str(target.url))
    if problem is not None:
        return InvalidRequest(problem, field="target.url")
    for name, value in target.headers.items():
        if value == REDACTED and not placeholders:
            return InvalidRequest(
                f"header '{name}' is '{REDACTED}', the placeholder a read shows; send the value itself",
                field=f"target.headers.{name}",
            )
    return None


def carry_secrets(old: Job, merged: dict[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """The merged definition of a change (a JSON merge patch `changes` applied to `old`'s definition) with `old`'s
    secret headers carried as they may be:

    - a header the change sends as REDACTED (a client that read the job and sends its whole target back) keeps its
      stored value; InvalidRequest if the job has no such header;
    - when the target URL moves to another origin (scheme, host, port), every secret header the change does not
      send again is dropped: a credential given for one server is never sent to another. Sending one as REDACTED
      then is refused (InvalidRequest), since that is not sending it again."""
    stored = old.spec.target
    target = merged.get("target")
    if not isinstance(stored, HttpTarget) or not isinstance(target, dict) or target.get("type") != "http":
        return merged
    patch_target = changes.get("target")
    sent = patch_target.get("headers") if isinstance(patch_target, dict) else None
    sent = sent if isinstance(sent, dict) else {}
    headers = target.get("headers")
    if not isinstance(headers, dict):
        return merged
    headers = dict(headers)
    moved = isinstance(target.get("url"), str) and origin(target["url"]) != origin(str(stored.url))
    for name, value in sent.items():
        if value != REDACTED:
            continue
        if moved:
            raise InvalidRequest(
                f"header '{name}' is '{REDACTED}' but the target moves to another origin "
                f"({'://'.join(origin(target['url'])[:2])}); secret headers are not carried to another server, so "
                "send its value again",
                field=f"target.headers.{name}",
            )
        if name not in stored.headers:
            raise InvalidRequest(
                f"header '{name}' is '{REDACTED}' but the job has no such header; send the value itself",
                field=f"target.headers.{name}",
            )
        headers[name] = stored.headers[name]
    if moved:
        for name in stored.headers:
            if name in headers and name not in sent and is_secret_header(name, stored.public_headers):
                del headers[name]
    return {**merged, "target": {**target, "headers": headers}}


def _context(job: Job) -> dict[str, str]:
    """What a job's sealed values are bound to: a sealed value copied into another job's item does not open."""
    return {"purpose": "punctual job headers", "job_id": job.job_id, "tenant": job.tenant}


def opened_headers(job: Job, sealer: SecretSealer | None) -> dict[str, str]:
    """The job's sealed header values, opened (none for a job with nothing sealed). SealFailed when they do not
    open, or there is no sealer to open them."""
    if job.sealed_headers is None:
        return {}
    if sealer is None:
        raise SealFailed("the job's header values are sealed and no sealer is configured")
    opened = json.loads(sealer.open(job.sealed_headers, _context(job)))
    if not isinstance(opened, dict) or not all(isinstance(v, str) for v in opened.values()):
        raise SealFailed("the job's sealed header values are not a map of strings")
    return opened


def sealed(job: Job, sealer: SecretSealer | None, carried: Mapping[str, str]) -> Job:
    """The job as it is stored: each secret header value replaced by REDACTED in its spec, and the values sealed
    together in `sealed_headers`. A header whose value is already REDACTED keeps its `carried` value (the previous
    version's, opened) and stays sealed even if now declared public: a write-only value is never made readable;
    sending it again makes it public. Without a sealer (a deployment that seals nothing) the job is stored as it is.
    """
    target = job.spec.target
    if sealer is None or not isinstance(target, HttpTarget):
        return job
    secrets: dict[str, str] = {}
    headers = dict(target.headers)
    for name, value in target.headers.items():
        if value == REDACTED:
            if name not in carried:
                raise InvalidRequest(
                    f"header '{name}' is '{REDACTED}' but the job has no stored value for it; send the value itself",
                    field=f"target.headers.{name}",
                )
            secrets[name] = carried[name]
        elif is_secret_header(name, target.public_headers):
            secrets[name] = value
            headers[name] = REDACTED
    spec = job.spec.model_copy(update={"target": target.model_copy(update={"headers": headers})})
    seal = sealer.seal(json.dumps(secrets, separators=(",", ":")).encode(), _context(job)) if secrets else None
    return job.model_copy(update={"spec": spec, "sealed_headers": seal})


def headers_to_send(job: Job, sealer: SecretSealer | None) -> dict[str, str]:
    """The http target's headers as they are sent: sealed values opened in place of their placeholders (a job
    stored before sealing sends its clear values). SealFailed when sealed values do not open."""
    target = job.spec.target
    assert isinstance(target, HttpTarget)
    if job.sealed_headers is None:
        return dict(target.headers)
    opened = opened_headers(job, sealer)
    missing = [name for name, value in target.headers.items() if value == REDACTED and name not in opened]
    if missing:
        raise SealFailed(f"the sealed header values lack {', '.join(missing)}")
    return {name: opened[name] if value == REDACTED else value for name, value in target.headers.items()}
