"""What an AWS target names, as one canonical ARN, and how a tenant is told apart at the target role.

Allow-lists, the scheduler's own resources and IAM all speak in full ARNs (partition, region, account, name), so
a target is compared by its ARN and never by a bare name: an entry for `111111111111`'s queue `orders` does not
admit `orders` of another account or region. A target given by a short form is completed the way AWS completes
it for the caller: a Lambda function or an EventBridge bus by name lives in the worker's own account and region
(`Home`), an SQS queue URL names its account in the path and its region in the host.

Names are percent-decoded before they are read (SQS resolves `punctual%2Dprod-ready` to `punctual-prod-ready`),
then held to the service's own name rules, so no spelling of a name can pass for another.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from scheduler.core.jobs.secrecy import redact_url

#: The session tag the worker sets on the target role's session; the role's grants are conditioned on it.
TENANT_TAG = "punctual-tenant"

_SQS_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}(\.fifo)?$")
_LAMBDA_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_LAMBDA_QUALIFIER = re.compile(r"^(\$LATEST|[A-Za-z0-9_-]{1,128})$")
_BUS_NAME = re.compile(r"^[A-Za-z0-9._/-]{1,256}$")
_ARN = re.compile(r"^arn:(aws[a-z-]*):([a-z0-9-]+):([a-z0-9-]*):(\d{12}):(.+)$")
#: SQS hosts: `sqs.<region>.amazonaws.com[.cn]`, the legacy `<region>.queue.amazonaws.com`, and `queue.amazonaws.com`
#: (us-east-1).
_SQS_HOST = re.compile(r"^(?:sqs\.([a-z0-9-]+)|([a-z0-9-]+)\.queue|queue)\.amazonaws\.com(?:\.cn)?$")


class NotAResource(ValueError):
    """The address names no single resource of its type (the message says what shape is expected)."""


@dataclass(frozen=True)
class Home:
    """Where the worker runs: the account and region AWS resolves a bare name in."""

    partition: str
    region: str
    account: str

    @classmethod
    def of(cls, account: str, region: str = "", partition: str = "") -> Home:
        region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        return cls(partition or ("aws-cn" if region.startswith("cn-") else "aws"), region, account)


@dataclass(frozen=True)
class LambdaFunction:
    """A function's unqualified ARN and the qualifier (alias or version) it was named with, if any."""

    arn: str
    qualifier: str | None


def _arn_parts(arn: str, service: str) -> tuple[str, str, str, str]:
    match = _ARN.match(arn)
    if not match or match[2] != service:
        raise NotAResource(f"'{arn}' is not a {service} ARN")
    return match[1], match[3], match[4], match[5]


def sqs_queue_arn(address: str, home: Home) -> str:
    """The ARN of an SQS queue given by URL (`https://<host>/<account>/<name>`) or ARN."""
    if address.startswith("arn:"):
        partition, region, account, name = _arn_parts(address, "sqs")
    else:
        split = urlsplit(address)
        segments = split.path.split("/")
        if split.scheme not in ("http", "https") or split.query or split.fragment or len(segments) != 3:
            raise NotAResource(f"'{redact_url(address)}' is not an SQS queue URL (https://<host>/<account>/<name>)")
        _, account, name = (unquote(segment) for segment in segments)
        host = _SQS_HOST.match((split.hostname or "").lower())
        region = (host[1] or host[2] or "us-east-1") if host else home.region
        partition = home.partition
    if not (account.isdigit() and len(account) == 12) or not _SQS_NAME.match(name):
        shown = address if address.startswith("arn:") else redact_url(address)
        raise NotAResource(f"'{shown}' does not name an SQS queue (an account of 12 digits and a queue name)")
    return f"arn:{partition}:sqs:{region}:{account}:{name}"


def lambda_function(function: str, home: Home) -> LambdaFunction:
    """A Lambda function given by name, partial ARN (`<account>:function:<name>`) or ARN, with its qualifier."""
    parts = unquote(function).split(":")
    if function.startswith("arn:"):
        partition, region, account, rest = _arn_parts(function, "lambda")
        kind, _, rest = rest.partition(":")
        name, _, qualifier = rest.partition(":")
        if kind != "function":
            raise NotAResource(f"'{function}' is not a Lambda function ARN")
    elif len(parts) >= 3 and parts[1] == "function":
        partition, region, account = home.partition, home.region, parts[0]
        name, qualifier = parts[2], ":".join(parts[3:])
    else:
        partition, region, account = home.partition, home.region, home.account
        name, qualifier = parts[0], ":".join(parts[1:])
    if not _LAMBDA_NAME.match(name) or (qualifier and not _LAMBDA_QUALIFIER.match(qualifier)):
        raise NotAResource(f"'{function}' does not name a Lambda function (name[:qualifier], partial ARN or ARN)")
    if not (account.isdigit() and len(account) == 12):
        raise NotAResource(f"'{function}' names no account of 12 digits")
    return LambdaFunction(f"arn:{partition}:lambda:{region}:{account}:function:{name}", qualifier or None)


def event_bus_arn(bus: str, home: Home) -> str:
    """The ARN of an EventBridge bus given by name or ARN."""
    if bus.startswith("arn:"):
        partition, region, account, rest = _arn_parts(bus, "events")
        if not rest.startswith("event-bus/"):
            raise NotAResource(f"'{bus}' is not an event bus ARN")
        name = unquote(rest.removeprefix("event-bus/"))
    else:
        partition, region, account, name = home.partition, home.region, home.account, unquote(bus)
    if not _BUS_NAME.match(name):
        raise NotAResource(f"'{bus}' does not name an event bus")
    return f"arn:{partition}:events:{region}:{account}:event-bus/{name}"


def plain_arn(arn: str, service: str) -> str:
    """An SNS topic's or a state machine's ARN, decoded; refused when it is not one resource of `service`."""
    partition, region, account, rest = _arn_parts(unquote(arn), service)
    if "*" in rest or "?" in rest:
        raise NotAResource(f"'{arn}' is a pattern, not one resource")
    return f"arn:{partition}:{service}:{region}:{account}:{rest}"


def resource_name(arn: str) -> str:
    """The name part of a canonical ARN (after the last `:` or `/`)."""
    return re.split(r"[:/]", arn)[-1]


def tenant_tag(tenant: str) -> str:
    """The value of the tenant's session tag: a digest of the tenant id, since tag values allow neither `#` nor
    every character a tenant id may hold. The same function computes it for the CDK grants."""
    return hashlib.sha256(tenant.encode()).hexdigest()[:32]


def tenant_session_name(tenant: str) -> str:
    """The target role's session name for a tenant: its tag and a readable tail of its id, so CloudTrail tells
    tenants apart (at most 64 characters of `[\\w+=,.@-]`)."""
    tail = re.sub(r"[^\w+=,.@-]", "-", tenant.rsplit("/", 1)[-1].split("#", 1)[0])[:22]
    return f"t-{tenant_tag(tenant)[:16]}-{tail}".rstrip("-")[:64]
