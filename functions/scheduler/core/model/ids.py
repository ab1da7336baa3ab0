"""What each kind of identifier a caller names may be: its characters and its length.

Every id a request carries ends up in a store's key (`JOB#{job_id}`, `EXTID#{tenant}#{external_id}`, an occurrence
key, a backfill's or an operation's sort key), and DynamoDB refuses a partition key over 2,048 bytes and a sort key
over 1,024: an id is checked against its rule before anything reads or writes with it, so one that could never have
been handed out is a 4xx naming it, not a 500. The rules take every id the scheduler makes (job ids are uuid4 hex,
`scheduler.core.runtime.ids`; backfill ids hex, `scheduler.core.sweep.backfill`; operation ids a hash's hex,
`scheduler.core.jobs.bulk`) and every external id a caller may give (`scheduler.core.model.labels`), with room.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from scheduler.core.model.labels import MAX_EXTERNAL_ID


@dataclass(frozen=True)
class IdRule:
    """One kind of identifier: a full match of `pattern` (ASCII) of at most `max_length` characters."""

    pattern: str
    max_length: int
    #: What it must be, for the person who sent another: "1-128 printable ASCII characters without ...".
    shape: str

    def problem(self, value: str) -> str | None:
        """Why `value` is not such an id, or None."""
        if len(value) <= self.max_length and re.fullmatch(self.pattern, value, re.ASCII):
            return None
        return f"must be {self.shape}"

    def schema(self) -> dict[str, Any]:
        """The rule as an OpenAPI (JSON Schema) string."""
        return {"type": "string", "minLength": 1, "maxLength": self.max_length, "pattern": f"^{self.pattern}$"}


#: Printable ASCII but space, `/` (a path segment) and `:` (the separator of an occurrence key).
_PLAIN = r"[!-.0-9;-~]"
MAX_JOB_ID = 128

#: A job's id: a uuid4's 32 hex characters as the scheduler makes them, within a wider rule.
JOB_ID = IdRule(f"{_PLAIN}+", MAX_JOB_ID, f"1-{MAX_JOB_ID} printable ASCII characters without spaces, '/' or ':'")
#: A caller's own id of a job (`JobSpec.external_id`, `scheduler.core.model.labels.EXTERNAL_ID`).
EXTERNAL_ID_RULE = IdRule(
    r"[!-.0-~]+", MAX_EXTERNAL_ID, f"1-{MAX_EXTERNAL_ID} printable ASCII characters without spaces or '/'"
)
#: `{job_id}:{scheduled_for}` (RFC 3339), or that instant alone.
OCCURRENCE = IdRule(
    r"[!-.0-~]+",
    MAX_JOB_ID + 64,
    f"an occurrence key '<job id>:<RFC 3339 instant>' (or the instant) of at most {MAX_JOB_ID + 64} characters",
)
#: A backfill's or a bulk operation's id: the hex the scheduler makes, within a wider rule.
#: A flow-control key (`scheduler.core.model.flow.FLOW_KEY`).
FLOW_KEY_ID = IdRule(r"[A-Za-z0-9._:-]+", 128, "1-128 characters of letters, digits, '.', '_', ':' and '-'")
TOKEN_ID = IdRule(r"[A-Za-z0-9_-]+", 64, "1-64 letters, digits, '-' or '_' (as the API returned it)")
