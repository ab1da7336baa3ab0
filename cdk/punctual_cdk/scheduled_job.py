"""Jobs as code: `ScheduledJob`, a job declared in the app, and the provider function that keeps it
(docs/jobs-as-code.md).

    ScheduledJob(self, "Nightly", scheduler=punctual, definition={"schedule": {...}, "target": {...}})

Each `ScheduledJob` is a CloudFormation custom resource (`Custom::PunctualJob`) whose properties are the declared
definition and its ownership; the provider (one function a `Punctual`, made with its first job) creates, changes and
cancels the job through the API as its own role (scheduler.handlers.scheduled_job, scheduler.ops.scheduled_jobs).
CloudFormation calls it only when the properties change, so a deploy that changes nothing calls nothing; removing the
construct, or deleting the stack, cancels the job.

The job belongs to the stack and to the resource's logical id: its external id is `cdk.<stack name>:<logical id>`
and its label `punctual.dev/managed-by` is `cdk.<stack name>`; both are checked when the app is synthesized.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import jsii
from aws_cdk import CfnResource, CustomResource, Duration, IStableStringProducer, Lazy, Stack, Token
from constructs import Construct, IValidation
from pydantic import ValidationError

from punctual_cdk.lambda_function import Entry, FunctionBuild, SchedulerFunction
from scheduler.core.model.job import JobSpec
from scheduler.core.model.labels import MANAGED_BY_LABEL, label_value_problem
from scheduler.core.model.validation import field_errors
from scheduler.ops.scheduled_jobs import (
    API_URL_VARIABLE,
    RESOURCE_TYPE,
    definition_problems,
    ownership_problems,
    stack_external_id,
    stack_owner,
)
from scheduler.schema import SERVICE_NAME

if TYPE_CHECKING:
    from punctual_cdk.punctual import Punctual

HANDLER = "scheduler.handlers.scheduled_job.lambda_handler"
#: A request makes at most a handful of API calls, each bounded (scheduler.adapters.signed_api).
TIMEOUT = Duration.minutes(2)
PROVIDER = Entry("Provider", HANDLER, "creates, changes and cancels the stack's ScheduledJobs", TIMEOUT, 256)
#: How long CloudFormation waits for the provider's answer (it always answers well within its own timeout).
SERVICE_TIMEOUT = Duration.minutes(5)


class JobsProvider(Construct):
    """The function behind every ScheduledJob of one `Punctual`: it calls that scheduler's API as its own role, which
    may submit and read jobs (`grant_submit`, `grant_read`), nothing else.

    It is deployed after the rest of the scheduler (the API, its tables and queues, the workers), so a job is
    created on a scheduler that runs; and, on a stack's deletion, CloudFormation deletes the jobs (cancels them
    through the API) before anything they need."""

    def __init__(self, scope: Construct, construct_id: str, *, scheduler: Punctual) -> None:
        super().__init__(scope, construct_id)
        self.scheduler = scheduler
        config = scheduler.config
        environment = {
            API_URL_VARIABLE: scheduler.api_url,
            "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
            "POWERTOOLS_LOG_LEVEL": config.log_level,
        }
        self.handler = SchedulerFunction(self, PROVIDER, FunctionBuild(config, scheduler.code, environment))
        self.function = self.handler.function
        scheduler.grant_submit(self.function)
        scheduler.grant_read(self.function)
        siblings = [child for child in scheduler.node.children if child is not self]
        self.function.node.add_dependency(*siblings)


class ScheduledJob(Construct):
    """A job of `scheduler`, declared in the app: created on the first deploy, changed in place when `definition`
    changes (the same job id, its run history kept), cancelled when the construct is removed or the stack deleted.

    `definition` is a job as `POST /v1/jobs` takes it (docs/api.md), without `external_id` and without the label
    `punctual.dev/managed-by`, which are the stack's. It may hold tokens (a queue's URL, a function's ARN); without
    them it is checked here, with the API's own rules, when the app is synthesized.

    `job_id` is the job's id (`Ref`), for the app to pass on (e.g. to its receiver's environment).
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, scheduler: Punctual, definition: Mapping[str, Any]
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.owner = stack_owner(stack.stack_name)
        owner_problem = label_value_problem(MANAGED_BY_LABEL, self.owner)
        if owner_problem is not None:
            raise ValueError(
                f"{self.node.path}: the stack's name {stack.stack_name!r} is too long for its jobs' label "
                f"{MANAGED_BY_LABEL}=cdk.<stack name> ({owner_problem}): name the stack in at most 59 characters"
            )
        self.definition = declared_definition(definition, owner=self.owner, where=self.node.path)
        provider = scheduler.jobs_provider
        # `Default`: CDK leaves the id out of the logical id, so a job declared at the stack's top is `Nightly`.
        self.resource = CustomResource(
            self,
            "Default",
            service_token=provider.function.function_arn,
            resource_type=RESOURCE_TYPE,
            service_timeout=SERVICE_TIMEOUT,
            properties={
                "Definition": stack.to_json_string(self.definition),
                # Lazy: the logical id is this very resource's, final only at synthesis.
                "ExternalId": Lazy.string(_ExternalId(self)),
                "ManagedBy": self.owner,
            },
        )
        self.node.add_validation(_Ownership(self))

    @property
    def job_id(self) -> str:
        """The job's id (the resource's physical id)."""
        return self.resource.ref

    @property
    def external_id(self) -> str:
        """`cdk.<stack name>:<logical id>`, as the app's synthesis resolves it."""
        stack = Stack.of(self)
        cfn = self.resource.node.default_child
        assert isinstance(cfn, CfnResource)
        return stack_external_id(stack.stack_name, str(stack.resolve(stack.get_logical_id(cfn))))


def declared_definition(definition: Mapping[str, Any], *, owner: str, where: str) -> dict[str, Any]:
    """`definition` without its null values (in a JSON merge patch, null means "remove"), keys sorted (the template
    reads the same on every synth), checked: ValueError naming each problem."""
    if not isinstance(definition, Mapping):
        raise ValueError(f"{where}: the definition must be a mapping (a job as POST /v1/jobs takes it)")
    cleaned: dict[str, Any] = _without_nulls(definition)
    problems = definition_problems(cleaned)
    if not problems and not _has_tokens(cleaned):
        problems = _spec_problems(cleaned, owner)
    if problems:
        raise ValueError(f"{where}: the job's definition is refused:\n" + "\n".join(f"  {p}" for p in problems))
    return cleaned


def _spec_problems(definition: Mapping[str, Any], owner: str) -> list[str]:
    """The API's own refusal of the definition (JobSpec) with its ownership, as `field: message` lines. (The external
    id is checked on its own once the logical id is final, `_Ownership`.)"""
    labels = definition.get("labels", {})
    if isinstance(labels, Mapping):
        labels = {**labels, MANAGED_BY_LABEL: owner}
    try:
        JobSpec.model_validate({**definition, "external_id": f"{owner}:check", "labels": labels})
    except ValidationError as error:
        return [f"{field}: {message}" for field, message in field_errors(error)]
    return []


def _without_nulls(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _without_nulls(v) for k, v in sorted(value.items()) if v is not None}
    if isinstance(value, list | tuple):
        return [_without_nulls(v) for v in value]
    return value


def _has_tokens(value: Any) -> bool:
    if isinstance(value, Mapping):
        return any(_has_tokens(k) or _has_tokens(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_tokens(v) for v in value)
    return isinstance(value, str | int | float) and Token.is_unresolved(value)


@jsii.implements(IStableStringProducer)
class _ExternalId:
    def __init__(self, job: ScheduledJob) -> None:
        self.job = job

    def produce(self) -> str:
        return self.job.external_id


@jsii.implements(IValidation)
class _Ownership:
    """At synthesis, when the logical id is final: the job's external id and label as the API takes them."""

    def __init__(self, job: ScheduledJob) -> None:
        self.job = job

    def validate(self) -> list[str]:
        problems = ownership_problems(self.job.owner, self.job.external_id)
        hint = "shorten the stack's name or the construct's path (the logical id)"
        return [f"ScheduledJob {self.job.node.path}: {problem}; {hint}" for problem in problems]
