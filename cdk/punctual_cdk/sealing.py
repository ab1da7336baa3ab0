"""The KMS key that seals jobs' secret header values at rest (docs/security.md, "Header secrets").

The api seals (kms:GenerateDataKey: a data key per sealing, bound to the job by the encryption context) and opens the
values a change keeps (kms:Decrypt); the worker opens them to send them (kms:Decrypt). The sweeper never touches them
and gets no grant. Both functions get the key's ARN as `SCHEDULER_HEADER_KEY_ID` (scheduler.adapters.sealing).
"""

from __future__ import annotations

from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from punctual_cdk.config import PunctualConfig
from punctual_cdk.lambda_function import data_removal_policy

HEADER_KEY_VARIABLE = "SCHEDULER_HEADER_KEY_ID"
SEAL_ACTIONS = ("kms:GenerateDataKey", "kms:Decrypt")
OPEN_ACTIONS = ("kms:Decrypt",)


class HeaderSealingKey(Construct):
    """A symmetric KMS key with yearly automatic rotation (old key material still opens what it sealed)."""

    def __init__(self, scope: Construct, construct_id: str, *, config: PunctualConfig) -> None:
        super().__init__(scope, construct_id)
        self.key = kms.Key(
            self,
            "Key",
            description=f"punctual {config.stage}: seals jobs' secret header values at rest",
            enable_key_rotation=True,
            # Losing the key loses every sealed header value: it goes with the tables' data.
            removal_policy=data_removal_policy(config),
        )

    def grant_seal(self, function: lambda_.Function) -> None:
        self.key.grant(function, *SEAL_ACTIONS)
        function.add_environment(HEADER_KEY_VARIABLE, self.key.key_arn)

    def grant_open(self, function: lambda_.Function) -> None:
        self.key.grant(function, *OPEN_ACTIONS)
        function.add_environment(HEADER_KEY_VARIABLE, self.key.key_arn)
