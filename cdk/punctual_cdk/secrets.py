"""The functions' secrets (docs/security.md, "Keys"): generated in Secrets Manager; functions get their ARNs (never the
values) and read access to exactly the ones they use.

| secret          | what it is                                                            | read by             |
|-----------------|-----------------------------------------------------------------------|---------------------|
| `Signing`       | signature v1: the master secret each tenant's v1 key is derived from  | worker, if v1 is on |
| `SigningKeys`   | signature v2: the root keys (by key id) each job's key is derived from | worker, api         |
| `Messages`      | the HMAC key of dispatch messages (the ready queues' bodies)          | api, sweeper, worker |

The v1 secret is created whatever `signature_v1` says, so that turning v1 off and on again keeps every tenant's v1
key; only while v1 is on is it granted to the worker and its ARN passed (punctual_cdk/punctual.py).
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from punctual_cdk.config import PunctualConfig
from punctual_cdk.lambda_function import data_removal_policy

SECRET_LENGTH = 64
#: The key id of the first v2 root key; a rotation adds the next one (docs/security.md, "Rotation").
FIRST_KEY_ID = "k1"


def _secret(
    scope: Construct,
    construct_id: str,
    config: PunctualConfig,
    description: str,
    rotation: str,
    template: str | None = None,
    key: str | None = None,
) -> secretsmanager.Secret:
    secret = secretsmanager.Secret(
        scope,
        construct_id,
        description=f"punctual {config.stage}: {description}",
        generate_secret_string=secretsmanager.SecretStringGenerator(
            password_length=SECRET_LENGTH,
            exclude_punctuation=True,
            include_space=False,
            secret_string_template=template,
            generate_string_key=key,
        ),
        # Receivers verify signatures with keys derived from them: losing one breaks every receiver.
        removal_policy=data_removal_policy(config),
    )
    Validations.of(secret).acknowledge(Acknowledgment(id="AwsSolutions-SMG4", reason=rotation))
    return secret


class SigningSecret(Construct):
    """The three secrets (see the module docstring); `secret` is the v1 master secret."""

    def __init__(self, scope: Construct, construct_id: str, *, config: PunctualConfig) -> None:
        super().__init__(scope, construct_id)
        self.secret = _secret(
            self,
            "Secret",
            config,
            "signature v1 master key for per-tenant webhook signing keys",
            "Signature v1 is kept only for the migration window to v2 (turned off with signature_v1=false); it is "
            "never rotated, it is retired.",
        )
        self.keys = _secret(
            self,
            "Keys",
            config,
            "signature v2 root keys (by key id) for per-job webhook signing keys",
            "Rotating a v2 root key is a documented two-step operation (add a key id, which every call is signed "
            "with at once, let receivers fetch the new job keys, then retire the old id): docs/security.md.",
            template=f'{{"current": "{FIRST_KEY_ID}"}}',
            key=FIRST_KEY_ID,
        )
        self.messages = _secret(
            self,
            "Messages",
            config,
            "HMAC key of dispatch messages on the ready queues",
            "Rotating the message key dead-letters the messages in flight (they are refused, never run); do it "
            "with the sweeper paused, or accept and redrive what lands in the DLQ (docs/security.md).",
        )
