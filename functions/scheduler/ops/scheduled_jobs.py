"""Jobs as code (docs/jobs-as-code.md): the job a CDK `ScheduledJob` declares, created, changed and cancelled
through the API as CloudFormation asks (scheduler.handlers.scheduled_job is the custom resource's function).

A declared job is owned by its stack and its logical id: its external id is `cdk.<stack name>:<logical id>` and its
label `punctual.dev/managed-by` is `cdk.<stack name>`. The custom resource's physical id is the job's id.

- **Create**: `POST /v1/jobs` (with an idempotency key of the request, so a retried request creates one job). Should
  the external id already be held by a job this stack manages and has not cancelled (a create whose answer was
  lost), that job is taken over and made to match the declaration.
- **Update**: nothing when the declaration is unchanged; else the job is changed in place (`PATCH` with `If-Match`:
  the same job id, its run history kept) to exactly the declaration: a field it no longer declares goes back to the
  API's default. A new external id (the construct moved) is a new job; CloudFormation then deletes the old one.
- **Delete**: `DELETE /v1/jobs/{id}` (a cancel, idempotent); a job already gone is deleted.

Any refusal carries the API's problem detail to CloudFormation (`Refused`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

from pydantic import ValidationError

from scheduler.adapters.signed_api import ApiAnswer
from scheduler.core.model.ids import JOB_ID
from scheduler.core.model.job import JobSpec, JobState
from scheduler.core.model.labels import MANAGED_BY_LABEL, external_id_problem, label_value_problem

#: The custom resource's type in the template.
RESOURCE_TYPE = "Custom::PunctualJob"
#: The provider function's variable naming the API's stage URL (the Punctual construct's `api_url`).
API_URL_VARIABLE = "PUNCTUAL_API_URL"
#: The physical id of a job whose create failed: never a job id (job ids have no `:`), so its delete calls nothing.
CREATE_FAILED = "punctual:create-failed"
#: What a managed-by label and an external id of a CDK stack start with.
CDK_OWNER_PREFIX = "cdk."
#: Changes retried when the job moved between the read and the change (a sweep advancing it: 412).
CHANGE_ATTEMPTS = 3


def stack_owner(stack_name: str) -> str:
    """The managed-by label of a stack's jobs: `cdk.<stack name>`."""
    return f"{CDK_OWNER_PREFIX}{stack_name}"


def stack_external_id(stack_name: str, logical_id: str) -> str:
    """The external id of a stack's job: `cdk.<stack name>:<logical id>`."""
    return f"{CDK_OWNER_PREFIX}{stack_name}:{logical_id}"


def ownership_problems(owner: str, external_id: str) -> list[str]:
    """Why `owner` cannot be a managed-by label value or `external_id` an external id (none: they can)."""
    problems = []
    label = label_value_problem(MANAGED_BY_LABEL, owner)
    if label is not None:
        problems.append(label)
    taken = external_id_problem(external_id)
    if taken is not None:
        problems.append(f"{taken}; this one is {external_id!r} ({len(external_id)} characters)")
    return problems


def definition_problems(definition: Mapping[str, Any]) -> list[str]:
    """What a declared definition may not hold: ownership is the stack's (its external id and managed-by label)."""
    problems = []
    if "external_id" in definition:
        problems.append("external_id is the stack's to set (cdk.<stack name>:<logical id>); leave it out")
    labels = definition.get("labels")
    if isinstance(labels, Mapping) and MANAGED_BY_LABEL in labels:
        problems.append(f"the label {MANAGED_BY_LABEL} is the stack's to set (cdk.<stack name>); leave it out")
    return problems


class Refused(Exception):
    """The job could not be made to match its declaration; the message is CloudFormation's reason."""


class DeclarationError(Refused):
    """The custom resource's properties are not a declaration (a template not made by `ScheduledJob`)."""


@dataclass(frozen=True)
class Declaration:
    """What a ScheduledJob declares: the definition (a job as `POST /v1/jobs` takes it, without its ownership), its
    external id and its owner (the managed-by label's value)."""

    definition: Mapping[str, Any]
    external_id: str
    owner: str

    @classmethod
    def of(cls, properties: Mapping[str, Any]) -> Declaration:
        """The declaration in a custom resource's properties (`Definition` as JSON text, `ExternalId`, `ManagedBy`)."""
        try:
            definition = json.loads(str(properties["Definition"]))
            external_id, owner = str(properties["ExternalId"]), str(properties["ManagedBy"])
        except KeyError as missing:
            raise DeclarationError(
                f"the resource has no {missing.args[0]} property; declare it with ScheduledJob"
            ) from None
        except ValueError as error:
            raise DeclarationError(f"the resource's Definition is not JSON: {error}") from None
        if not isinstance(definition, dict):
            raise DeclarationError("the resource's Definition is not a JSON object (a job's definition)")
        problems = definition_problems(definition) + ownership_problems(owner, external_id)
        if problems:
            raise DeclarationError("; ".join(problems))
        return cls(definition, external_id, owner)

    def spec(self) -> dict[str, Any]:
        """The job's whole definition: the declared one with its ownership."""
        labels = self.definition.get("labels", {})
        if isinstance(labels, Mapping):  # (anything else, the API refuses, naming the field)
            labels = {**labels, MANAGED_BY_LABEL: self.owner}
        return {**self.definition, "external_id": self.external_id, "labels": labels}


class JobsApi(Protocol):
    """The API as its caller's own tenant (scheduler.adapters.signed_api.SignedApi; in tests, the api handler)."""

    def request(
        self, method: str, path: str, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> ApiAnswer: ...


@dataclass(frozen=True)
class Outcome:
    """The job as CloudFormation learns it: the physical id (the job's id) and the resource's attributes."""

    job_id: str
    external_id: str

    @property
    def data(self) -> dict[str, str]:
        """`Fn::GetAtt` attributes of the resource: `JobId`, `ExternalId`."""
        return {"JobId": self.job_id, "ExternalId": self.external_id}


class ScheduledJobs:
    """The declared jobs of one caller (the provider function's role), kept as their declarations say."""

    def __init__(self, api: JobsApi) -> None:
        self.api = api

    def create(self, declared: Declaration, request_id: str) -> Outcome:
        answer = self.api.request(
            "POST", "v1/jobs", declared.spec(), {"Idempotency-Key": f"cloudformation-{request_id}"[:255]}
        )
        if answer.ok:
            return Outcome(str(answer.body["job_id"]), declared.external_id)
        if answer.status == 409 and answer.body.get("external_id") == declared.external_id:
            return self._take_over(declared, answer)
        raise Refused(f"creating the job failed: {answer.problem}")

    def update(self, job_id: str, declared: Declaration, previous: Declaration, request_id: str) -> Outcome:
        if JOB_ID.problem(job_id) is not None:
            return self.create(declared, request_id)  # its create failed and was kept (no rollback): create it now
        if declared == previous:
            return Outcome(job_id, declared.external_id)
        if declared.external_id != previous.external_id:
            # A job's external id never changes: another id is another job (CloudFormation deletes the old one).
            return self.create(declared, request_id)
        self._match(job_id, declared)
        return Outcome(job_id, declared.external_id)

    def delete(self, job_id: str) -> None:
        if JOB_ID.problem(job_id) is not None:
            return  # no job was created (CREATE_FAILED, or a physical id CloudFormation made up)
        answer = self.api.request("DELETE", f"v1/jobs/{quote(job_id, safe='')}")
        if answer.ok or answer.status == 404:
            return
        raise Refused(f"cancelling job {job_id} failed: {answer.problem}")

    # -- internals ------------------------------------------------------------------------------------------

    def _take_over(self, declared: Declaration, conflict: ApiAnswer) -> Outcome:
        """The job holding the declaration's external id, if this stack made it and it still runs."""
        found = self.api.request("GET", f"v1/jobs/by-external-id/{quote(declared.external_id, safe='')}")
        if not found.ok:
            raise Refused(f"creating the job failed: {conflict.problem}; reading that job failed: {found.problem}")
        job = found.body
        job_id = str(job["job_id"])
        owner = (job.get("labels") or {}).get(MANAGED_BY_LABEL)
        if owner != declared.owner:
            raise Refused(
                f"external id {declared.external_id!r} is held by job {job_id}, which {declared.owner} does not "
                f"manage (its {MANAGED_BY_LABEL} label is {owner!r}): {conflict.problem}"
            )
        if job.get("state") == JobState.CANCELLED.value:
            raise Refused(
                f"external id {declared.external_id!r} is held by job {job_id}, cancelled when this stack last "
                "removed the ScheduledJob of that id (an external id stays with a cancelled job): give the "
                "ScheduledJob another id"
            )
        self._match(job_id, declared)
        return Outcome(job_id, declared.external_id)

    def _match(self, job_id: str, declared: Declaration) -> None:
        """Change the job to exactly the declaration (nothing if it already is), at the version read."""
        path = f"v1/jobs/{quote(job_id, safe='')}"
        for _ in range(CHANGE_ATTEMPTS):
            current = self.api.request("GET", path)
            if current.status == 404:
                raise Refused(f"job {job_id} is not found (deleted outside this stack?): {current.problem}")
            if not current.ok:
                raise Refused(f"reading job {job_id} failed: {current.problem}")
            if current.body.get("state") == JobState.CANCELLED.value:
                raise Refused(
                    f"job {job_id} was cancelled outside this stack and cannot change; give the ScheduledJob "
                    "another id to declare a new job"
                )
            patch = definition_patch(current.body, declared.spec())
            if not patch:
                return
            version = current.body.get("version")
            changed = self.api.request("PATCH", path, patch, {"If-Match": f'"{version}"'})
            if changed.ok:
                return
            if changed.status != 412:
                raise Refused(f"changing job {job_id} failed: {changed.problem}")
        raise Refused(f"changing job {job_id} failed: it kept changing while it was read ({CHANGE_ATTEMPTS} times)")


def definition_patch(shown: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch that makes the definition a read shows (`GET /v1/jobs/{id}`: the job's view, whose
    definition fields are JobSpec's, defaults included) exactly `wanted`: `wanted` is compared with its defaults
    (what it leaves out is the API's default), an object is patched key by key, anything else is replaced; empty when
    nothing differs. A value a read hides (a secret header, a URL's query: REDACTED) differs from the real one, so it
    is sent again."""
    current = {key: value for key, value in shown.items() if key in JobSpec.model_fields}
    return _merge_patch(current, _with_defaults(wanted))


def _with_defaults(wanted: Mapping[str, Any]) -> Mapping[str, Any]:
    """`wanted` as the API stores and shows it (its defaults filled in); as it is if the API would refuse it (the
    patch then carries it, and the API's refusal names the field)."""
    try:
        return JobSpec.model_validate(dict(wanted)).model_dump(mode="json", exclude_none=True)
    except ValidationError:
        return wanted


def _merge_patch(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any]:
    patch: dict[str, Any] = {key: None for key in current if key not in wanted}
    for key, value in wanted.items():
        if value is None:
            if key in current:
                patch[key] = None
        elif isinstance(value, Mapping) and isinstance(current.get(key), Mapping):
            nested = _merge_patch(current[key], value)
            if nested:
                patch[key] = nested
        elif current.get(key) != value:
            patch[key] = value
    return patch
