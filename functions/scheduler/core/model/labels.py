"""Labels and external ids on jobs, and the label selectors of the job list (`GET /v1/jobs?label=...`; the whole
filter, `JobQuery`, is in `scheduler.core.model.job`).

Labels follow Kubernetes' rules, so a selector written for one reads the same here: a key is an optional prefix (a
DNS subdomain of at most 253 characters) and `/`, then a name of 1-63 characters that begins and ends with a letter
or digit and has `-`, `_` and `.` between; a value is empty or 1-63 characters of the same form. At most
MAX_LABELS labels a job.

A selector `key:value` matches a job whose label `key` equals `value`; `key:` (nothing after the colon) matches a
job that has the label `key`, whatever its value. Several selectors are ANDed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

MAX_LABELS = 20
MAX_LABEL_NAME = 63
MAX_LABEL_PREFIX = 253
MAX_EXTERNAL_ID = 128
#: Label selectors one list request takes at most.
MAX_SELECTORS = 10
MAX_NAME_PREFIX = 128
#: The label of a job declared as code: its value names the owner that created it and may change or delete it (a
#: CDK stack's `ScheduledJob`s: `cdk.<stack name>`), so that a tool reconciling its own jobs never touches another's.
MANAGED_BY_LABEL = "punctual.dev/managed-by"

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
#: Printable ASCII but space and `/` (an external id is a path segment of `GET /v1/jobs/by-external-id/{id}`).
EXTERNAL_ID = re.compile(r"^[!-.0-~]{1,128}$")


def external_id_problem(external_id: str) -> str | None:
    """Why `external_id` cannot be a job's external id, or None."""
    if not EXTERNAL_ID.fullmatch(external_id) or external_id in (".", ".."):
        return (
            f"external_id must be 1-{MAX_EXTERNAL_ID} printable ASCII characters without spaces or '/' "
            "(and not '.' or '..')"
        )
    return None


def label_key_problem(key: str) -> str | None:
    """Why `key` is not a label key, or None."""
    prefix, slash, name = key.rpartition("/")
    bad_prefix = (
        not prefix or len(prefix) > MAX_LABEL_PREFIX or not all(_DNS_LABEL.fullmatch(p) for p in prefix.split("."))
    )
    if slash and bad_prefix:
        return (
            f"label key {key[:300]!r}: the prefix before '/' must be a DNS subdomain (lowercase letters, digits, "
            f"'-' and '.', at most {MAX_LABEL_PREFIX} characters)"
        )
    if not name or len(name) > MAX_LABEL_NAME or not _NAME.fullmatch(name):
        return (
            f"label key {key[:300]!r}: the name must be 1-{MAX_LABEL_NAME} letters, digits, '-', '_' or '.', "
            "beginning and ending with a letter or digit"
        )
    return None


def label_value_problem(key: str, value: str) -> str | None:
    """Why `value` is not a value of label `key`, or None."""
    if value == "":
        return None
    if len(value) > MAX_LABEL_NAME or not _NAME.fullmatch(value):
        return (
            f"label {key!r}: the value must be empty or 1-{MAX_LABEL_NAME} letters, digits, '-', '_' or '.', "
            "beginning and ending with a letter or digit"
        )
    return None


def labels_problem(labels: Mapping[str, str]) -> str | None:
    """Why `labels` cannot be a job's labels, or None."""
    if len(labels) > MAX_LABELS:
        return f"a job has at most {MAX_LABELS} labels; this one has {len(labels)}"
    for key, value in labels.items():
        problem = label_key_problem(key) or label_value_problem(key, value)
        if problem is not None:
            return problem
    return None


@dataclass(frozen=True)
class LabelSelector:
    """`key:value` (value None: `key:`, the key is present)."""

    key: str
    value: str | None

    @classmethod
    def parse(cls, text: str) -> LabelSelector:
        """A selector from `key:value` or `key:`; ValueError with a message a person can act on."""
        key, colon, value = text.partition(":")
        if not colon:
            raise ValueError(f"label selector {text[:300]!r} is not 'key:value' or 'key:' (the key is present)")
        problem = label_key_problem(key) or (label_value_problem(key, value) if value else None)
        if problem is not None:
            raise ValueError(problem)
        return cls(key, value or None)

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.key not in labels:
            return False
        return self.value is None or labels[self.key] == self.value


def label_entries(labels: Mapping[str, str]) -> Iterable[tuple[str, str]]:
    """The (key, value) pairs a job is indexed under, in a stable order."""
    return sorted(labels.items())
