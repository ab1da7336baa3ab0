"""A job's webhook signing keys: read them, rotate them."""

from __future__ import annotations

from punctual_sdk.calls import ApiCalls, _job
from punctual_sdk.models import (
    SigningKeys,
)


class SigningKeysApi(ApiCalls):
    """A job's webhook signing keys: read them, rotate them."""

    def signing_keys(self, job_id: str) -> SigningKeys:
        """`GET /v1/jobs/{id}/signing-keys`: every key that may sign the job's calls now. Keep them secret."""
        return SigningKeys.from_json(self._call("GET", _job(job_id) + "/signing-keys"))

    def rotate_signing_key(
        self, job_id: str, overlap_seconds: int | None = None, if_match: int | None = None
    ) -> SigningKeys:
        """`POST /v1/jobs/{id}/signing-keys/rotate`: make the next version of the job's key current; the replaced one
        keeps signing for `overlap_seconds` (the API's default: a day; 0 revokes it now). Never retried after a lost
        answer (a repeat would rotate twice): read `signing_keys` to see whether it took."""
        body = {"overlap_seconds": overlap_seconds} if overlap_seconds is not None else None
        headers = {"If-Match": f'"{if_match}"'} if if_match is not None else {}
        path = _job(job_id) + "/signing-keys/rotate"
        return SigningKeys.from_json(self._call("POST", path, body=body, headers=headers, retry=False))
