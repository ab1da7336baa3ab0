"""`Punctual`: the whole scheduler as one construct, for an app's own stack (docs/construct.md).

It composes one construct per concern - tables, queues, the signing secret, completion events, the header-sealing
key, the sweeper, the worker, the API and monitoring - and exposes what an app wires to: the API's URL, the ready
queues, the dead-letter queue, the completion-event bus, and grants of the API's routes to the app's own roles.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from aws_cdk import Acknowledgment, CfnElement, Stack, Validations
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from aws_cdk.aws_secretsmanager import ISecret
from constructs import Construct

from punctual_cdk.api import API_VERSION_PATH, HEALTH_PATH, SchedulerApi
from punctual_cdk.bundling import function_code
from punctual_cdk.config import PunctualConfig
from punctual_cdk.environment import (
    MESSAGE_SECRET_ARN_VARIABLE,
    SIGNING_KEYS_ARN_VARIABLE,
    SIGNING_SECRET_ARN_VARIABLE,
    scheduler_environment,
)
from punctual_cdk.events import CompletionEvents
from punctual_cdk.lambda_function import FunctionBuild
from punctual_cdk.monitoring import Monitoring
from punctual_cdk.prescale import grant_prescaling
from punctual_cdk.queues import Queues
from punctual_cdk.sealing import HeaderSealingKey
from punctual_cdk.secrets import SigningSecret
from punctual_cdk.storage import Storage
from punctual_cdk.sweeper import Sweeper
from punctual_cdk.worker import TARGET_ROLE_VARIABLE, Worker

if TYPE_CHECKING:
    from punctual_cdk.scheduled_job import JobsProvider

#: The routes `grant_submit` opens: every change of the caller's own jobs (create, batch, change, cancel, pause,
#: resume, trigger, retry, resolve, backfill, key rotation, bulk actions), all of them under `/v1/jobs`.
SUBMIT_ROUTES = (("POST", "/v1/jobs"), ("POST", "/v1/jobs/*"), ("PATCH", "/v1/jobs/*"), ("DELETE", "/v1/jobs/*"))
#: The routes `grant_read` opens: every read (the caller's own jobs, runs, backfills, bulk operations, forecast,
#: signing keys; the operator's view answers operators only, whatever the grant).
READ_ROUTES = (("GET", "/v1/*"),)


class Punctual(Construct):
    """The scheduler, deployed into the stack it is created in.

    `config` holds the deployment's settings (`PunctualConfig`: validated when it is made; the defaults are what
    `cdk.json` ships). `code` replaces the functions' asset (`punctual_cdk.bundling.function_code()`, built on
    this machine with pip, no Docker).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: PunctualConfig | None = None,
        code: lambda_.Code | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        config = config or PunctualConfig()
        code = code or function_code()
        self.config, self.code = config, code
        storage = Storage(self, "Storage", config=config)
        queues = Queues(self, "Queues")
        signing = SigningSecret(self, "Signing", config=config)
        completion = CompletionEvents(self, "CompletionEvents", config=config)
        sealing = HeaderSealingKey(self, "HeaderSealing", config=config)
        environment = scheduler_environment(
            config,
            jobs_table_name=storage.jobs_table.table_name,
            executions_table_name=storage.executions_table.table_name,
            ready_queue_url=queues.ready_queue.queue_url,
            dlq_url=queues.dead_letter_queue.queue_url,
            event_bus_name=completion.bus.event_bus_name,
            ready_queue_high_url=queues.lanes["high"].queue_url,
            ready_queue_low_url=queues.lanes["low"].queue_url,
        )
        # Each function gets the ARNs of (and read access to) only the secrets it uses (punctual_cdk/secrets.py).
        messages = {MESSAGE_SECRET_ARN_VARIABLE: signing.messages}
        keys = {SIGNING_KEYS_ARN_VARIABLE: signing.keys}
        # Signature v1's master secret: granted to the worker (and its ARN passed) only while v1 is on.
        v1 = {SIGNING_SECRET_ARN_VARIABLE: signing.secret} if config.signature_v1 else {}

        def build(secrets: Mapping[str, ISecret]) -> FunctionBuild:
            return FunctionBuild(config, code, environment, secrets)

        sweeper = Sweeper(self, "Sweeper", build=build(messages), tables=storage, queues=queues)
        worker = Worker(self, "Worker", build=build({**messages, **keys, **v1}), tables=storage, queues=queues)
        grant_prescaling(sweeper.function, worker.event_sources, config)
        if config.completion_events:
            # The worker publishes right after recording an outcome; the sweeper drains what is left.
            completion.grant_publish(worker.function)
            completion.grant_publish(sweeper.function)
            completion.grant_drain(sweeper.function, storage.executions_table)
        api = SchedulerApi(self, "Api", build=build({**messages, **keys}), tables=storage, queues=queues)
        # The api refuses AWS targets at submit when there is no target role to call them with.
        api.function.add_environment(TARGET_ROLE_VARIABLE, worker.target_role.role_arn)
        # Secret header values: the api seals them, the worker opens them to send them (punctual_cdk/sealing.py).
        sealing.grant_seal(api.function)
        sealing.grant_open(worker.function)
        if config.completion_events:
            # The api publishes the outcome an operator records (resolving a RECONCILING run) at once.
            completion.grant_publish(api.function)
        monitoring = Monitoring(
            self,
            "Monitoring",
            config=config,
            ready_queue=queues.ready_queue,
            lanes=queues.lanes,
            dead_letter_queue=queues.dead_letter_queue,
            functions={"api": api.function, "sweeper": sweeper.function, "worker": worker.function},
            rest_api=api.rest_api,
        )

        self.storage, self.queues, self.signing, self.completion = storage, queues, signing, completion
        self.sealing = sealing
        self.sweeper, self.worker, self.api, self.monitoring = sweeper, worker, api, monitoring
        self._jobs_provider: JobsProvider | None = None

    # -- what an app wires to ---------------------------------------------------------------------------------

    @property
    def rest_api(self) -> apigw.RestApi:
        return self.api.rest_api

    @property
    def api_url(self) -> str:
        """The API stage's base URL (ends with `/`): `https://<id>.execute-api.<region>.amazonaws.com/<stage>/`.
        Requests are signed with SigV4 for `execute-api` in the stack's region."""
        return self.api.rest_api.url

    @property
    def health_url(self) -> str:
        """The unauthenticated liveness endpoint."""
        return f"{self.api.rest_api.url}{API_VERSION_PATH}/{HEALTH_PATH}"

    @property
    def jobs_table(self) -> dynamodb.Table:
        return self.storage.jobs_table

    @property
    def executions_table(self) -> dynamodb.Table:
        return self.storage.executions_table

    @property
    def ready_queue(self) -> sqs.Queue:
        """The ready queue of the `normal` priority lane."""
        return self.queues.ready_queue

    @property
    def ready_queues(self) -> dict[str, sqs.Queue]:
        """The ready queue of each priority lane (`high`, `normal`, `low`)."""
        return dict(self.queues.lanes)

    @property
    def dead_letter_queue(self) -> sqs.Queue:
        return self.queues.dead_letter_queue

    @property
    def event_bus(self) -> events.IEventBus:
        """The bus the completion events go to (the stack's own, or the configured `event_bus_name`)."""
        return self.completion.bus

    @property
    def functions(self) -> dict[str, lambda_.Function]:
        """The scheduler's functions by name: `api`, `sweeper`, `worker`."""
        return {"api": self.api.function, "sweeper": self.sweeper.function, "worker": self.worker.function}

    # -- grants ---------------------------------------------------------------------------------------------

    def grant_submit(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let `grantee` (a role, a user, a function) create and change jobs: `execute-api:Invoke` on `SUBMIT_ROUTES`
        of this API's stage. Its jobs are its own: the API's tenant is the calling principal."""
        return self._grant_routes(grantee, SUBMIT_ROUTES)

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let `grantee` read: `execute-api:Invoke` on the API's GET routes (`READ_ROUTES`)."""
        return self._grant_routes(grantee, READ_ROUTES)

    def _grant_routes(self, grantee: iam.IGrantable, routes: tuple[tuple[str, str], ...]) -> iam.Grant:
        rest_api, stage = self.api.rest_api, self.config.stage
        grant = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["execute-api:Invoke"],
            resource_arns=[rest_api.arn_for_execute_api(method, path, stage) for method, path in routes],
        )
        # cdk-nag's IAM5 finding of each route's `*` (a job id, a path below it), acknowledged where the statement is.
        api_id = Stack.of(rest_api).resolve(Stack.of(rest_api).get_logical_id(_cfn(rest_api)))
        reason = (
            "The grant covers the API's routes for any job id (the ids are the API's, made at run time); the API "
            "scopes every job to the calling principal's own tenant, so the wildcard reaches no other tenant's job."
        )
        acknowledgments = [
            Acknowledgment(
                id=(
                    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:"
                    f"<{api_id}>/{stage}/{method}{path}]"
                ),
                reason=reason,
            )
            for method, path in routes
            if "*" in path
        ]
        for holder in {id(c): c for c in (grantee, grantee.grant_principal) if isinstance(c, Construct)}.values():
            Validations.of(holder).acknowledge(*acknowledgments)
        return grant

    # -- jobs as code -----------------------------------------------------------------------------------------

    @property
    def jobs_provider(self) -> JobsProvider:
        """The function that creates, changes and cancels the `ScheduledJob`s of this scheduler on deploy, made
        with the first of them (a stack without one has none)."""
        if self._jobs_provider is None:
            from punctual_cdk.scheduled_job import JobsProvider

            self._jobs_provider = JobsProvider(self, "JobsAsCode", scheduler=self)
        return self._jobs_provider


def _cfn(construct: Construct) -> CfnElement:
    resource = construct.node.default_child
    if not isinstance(resource, CfnElement):
        raise TypeError(f"{construct.node.path} has no CloudFormation resource")
    return resource
