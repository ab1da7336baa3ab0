"""Pre-scaling on AWS (docs/capacity.md): the worker mappings in provisioned mode, and the sweeper allowed to read and
set exactly their pollers - `lambda:GetEventSourceMapping` and `lambda:UpdateEventSourceMapping` on exactly those
mappings' ARNs, nothing else."""

from __future__ import annotations

import json
from collections.abc import Mapping

from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources

from punctual_cdk.config import PunctualConfig

#: The provisioned mode floor AWS accepts for SQS; the sweeper lowers the mappings back to it after a peak.
BASELINE_POLLERS = 2
ACTIONS = ("lambda:GetEventSourceMapping", "lambda:UpdateEventSourceMapping")


def provisioned_pollers(config: PunctualConfig) -> lambda_.ProvisionedPollerConfig | None:
    """The mappings' ProvisionedPollerConfig when pre-scaling is on (None: standard mode)."""
    if not config.prescale:
        return None
    return lambda_.ProvisionedPollerConfig(
        minimum_pollers=BASELINE_POLLERS, maximum_pollers=config.prescale_maximum_pollers
    )


def grant_prescaling(
    sweeper: lambda_.Function, sources: Mapping[str, event_sources.SqsEventSource], config: PunctualConfig
) -> None:
    """Tell the sweeper which mappings are its to scale (lane -> UUID) and let it call exactly ACTIONS on them."""
    if not config.prescale:
        return
    sweeper.add_environment("SCHEDULER_PRESCALE_ENABLED", "true")
    mappings = {lane: source.event_source_mapping_id for lane, source in sources.items()}
    sweeper.add_environment("SCHEDULER_PRESCALE_MAPPINGS", json.dumps(mappings))
    sweeper.add_environment("SCHEDULER_PRESCALE_CEILING_POLLERS", str(config.prescale_ceiling_pollers))
    sweeper.add_environment("SCHEDULER_PRESCALE_MAXIMUM_POLLERS", str(config.prescale_maximum_pollers))
    sweeper.add_environment("SCHEDULER_PRESCALE_LEAD_SECONDS", str(config.prescale_lead_seconds))
    sweeper.add_to_role_policy(
        iam.PolicyStatement(
            sid="PrescaleWorkerPollers",
            actions=list(ACTIONS),
            resources=[source.event_source_mapping_arn for source in sources.values()],
        )
    )
