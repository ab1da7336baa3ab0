"""The master secret from which each tenant's HMAC signing key for webhook calls is derived."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from infra.config import PunctualConfig
from infra.lambda_function import data_removal_policy

SECRET_LENGTH = 64


class SigningSecret(Construct):
    """A generated secret in Secrets Manager. Functions get its ARN (never the value) and read access."""

    def __init__(self, scope: Construct, construct_id: str, *, config: PunctualConfig) -> None:
        super().__init__(scope, construct_id)
        self.secret = secretsmanager.Secret(
            self,
            "Secret",
            description=f"punctual {config.stage}: master key for per-tenant webhook signing keys",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=SECRET_LENGTH, exclude_punctuation=True, include_space=False
            ),
            # Receivers verify signatures with keys derived from it: losing it breaks every receiver.
            removal_policy=data_removal_policy(config),
        )
        Validations.of(self.secret).acknowledge(
            Acknowledgment(
                id="AwsSolutions-SMG4",
                reason=(
                    "Rotating the signing master key changes every tenant's derived key and breaks "
                    "signature checks at their receivers until they re-fetch it; rotation is a coordinated, "
                    "announced operation, not a scheduled Lambda."
                ),
            )
        )
