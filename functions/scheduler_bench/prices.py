"""On-demand list prices (us-east-1) and the conversion of measured units into dollars per million fires.

Prices change; these are the ones the figures were computed with, and they are written into results.json.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.schema import FUNCTION_MEMORY_MB

PRICES: dict[str, float] = {
    #: DynamoDB on-demand, per unit (transactional writes are already doubled in the units).
    "dynamodb_write_request_unit": 0.625 / 1e6,
    "dynamodb_read_request_unit": 0.125 / 1e6,
    #: SQS standard queue, per request; every 64 KB chunk of a request's payload is a request.
    "sqs_request": 0.40 / 1e6,
    #: Lambda, per request and per GB-second (arm64).
    "lambda_request": 0.20 / 1e6,
    "lambda_gb_second_arm64": 0.0000133334,
    #: SQS event source mapping in provisioned mode, per event poller-hour (us-east-1; docs/capacity.md).
    "lambda_provisioned_poller_hour": 0.00925,
    #: API Gateway REST API, per request (the first 333 million a month).
    "api_gateway_rest_request": 3.50 / 1e6,
    #: EventBridge custom events (PutEvents), per event (each 64 KB chunk of an event): completion events.
    "eventbridge_custom_event": 1.00 / 1e6,
    #: EventBridge Scheduler, per scheduled invocation.
    "eventbridge_scheduler_invocation": 1.00 / 1e6,
    #: CloudWatch Logs, per byte ingested (the functions' log lines, Lambda's own, the EMF metrics): $0.50 per GB
    #: (Lambda's logs are billed at that rate for the first 10 TB a month).
    "cloudwatch_logs_ingested_byte": 0.50 / 1e9,
}
#: DynamoDB provisioned capacity (us-east-1): per write and read capacity unit-hour. One unit-hour serves 3,600
#: writes (reads) of 1 KB (4 KB, strongly consistent) at full use; at `utilisation` each costs 1/utilisation more.
PROVISIONED: dict[str, float] = {"wcu_hour": 0.00065, "rcu_hour": 0.00013}
#: API Gateway HTTP API, per request (the first 300 million a month; IAM authorization is included).
API_GATEWAY_HTTP_REQUEST = 1.00 / 1e6
#: Lambda time is priced at each function's deployed memory (scheduler.schema.FUNCTION_MEMORY_MB, what infra/
#: deploys); the alternative's function is priced at the worker's (the same target call, the same runtime).
LAMBDA_MEMORY_GB: dict[str, float] = {name: mb / 1024 for name, mb in FUNCTION_MEMORY_MB.items()}
MINUTES_PER_MONTH = 30 * 24 * 60
#: Assumed idle polling of the worker's SQS event source mapping: 5 pollers long-polling 20 s each.
IDLE_POLLS_PER_MINUTE = 5 * 3

#: The Lambda runtime's own lines per invocation (text format), at their usual length.
LAMBDA_PLATFORM_LINES = (
    "START RequestId: 3f2a1c9e-8d7b-4e6f-9a1b-2c3d4e5f6a7b Version: $LATEST",
    "END RequestId: 3f2a1c9e-8d7b-4e6f-9a1b-2c3d4e5f6a7b",
    "REPORT RequestId: 3f2a1c9e-8d7b-4e6f-9a1b-2c3d4e5f6a7b\tDuration: 41.37 ms\tBilled Duration: 42 ms\t"
    "Memory Size: 512 MB\tMax Memory Used: 97 MB\t",
)
LAMBDA_PLATFORM_BYTES = sum(len(line.encode()) for line in LAMBDA_PLATFORM_LINES)
#: API Gateway's access log line of one request, in the format cdk/punctual_cdk/api.py deploys (ACCESS_LOG_FIELDS), at
#: its usual length: what a submission adds to the logs besides the api function's own lines.
API_ACCESS_LOG_LINE = (
    '{"requestId": "3f2a1c9e-8d7b-4e6f-9a1b-2c3d4e5f6a7b", "extendedRequestId": "Qx3ZrFp8IAMEbCw=", '
    '"requestTime": "02/Dec/2026:18:41:03 +0000", "sourceIp": "203.0.113.17", "caller": "AROAEXAMPLEID:session", '
    '"userArn": "arn:aws:sts::123456789012:assumed-role/app-role/session", "httpMethod": "POST", '
    '"resourcePath": "/v1/{proxy+}", "status": "201", "protocol": "HTTP/1.1", "responseLength": "412", '
    '"responseLatency": "48", "integrationStatus": "200", "integrationLatency": "45", "errorType": "-"}'
)
API_ACCESS_LOG_BYTES = len(API_ACCESS_LOG_LINE.encode())

#: Powertools idempotency per call (items under 1 KB): a conditional PutItem (INPROGRESS) and an UpdateItem
#: (COMPLETED), 1 write unit each. A repeat adds a failed conditional PutItem (1 write unit) and a
#: strongly consistent GetItem (1 read unit); the headline figure assumes no repeats.
POWERTOOLS_WRITE_UNITS_PER_CALL = 2
POWERTOOLS_REPEAT_WRITE_UNITS = 1
POWERTOOLS_REPEAT_READ_UNITS = 1


#: Lambda allocates CPU in proportion to memory: one vCPU's worth at 1,769 MB
#: (https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html).
LAMBDA_MB_PER_VCPU = 1769


def cpu_stretch(memory_mb: int) -> float:
    """How many seconds a CPU second measured on a whole core takes at `memory_mb`: 1,769 / MB below a vCPU, and
    1 from a vCPU up (one Python process uses one core)."""
    return max(1.0, LAMBDA_MB_PER_VCPU / memory_mb)


def lambda_duration(function: str, wall_seconds: float, cpu_seconds: float) -> float:
    """An invocation's duration at the function's deployed memory, from its wall time and the CPU time it used
    here on a whole core: below 1,769 MB the function has that fraction of a vCPU, so each CPU second takes
    1,769 / MB seconds there. Counted as if the stretch added to the wall time (the CPU work and the waits not
    overlapping: an upper bound where the records of a batch overlap their waits with each other's work)."""
    return wall_seconds + cpu_seconds * (cpu_stretch(FUNCTION_MEMORY_MB[function]) - 1)


def gb_seconds(seconds_by_function: Mapping[str, float]) -> float:
    """GB-seconds of billed Lambda time, each function's seconds at its deployed memory."""
    return sum(seconds * LAMBDA_MEMORY_GB[function] for function, seconds in seconds_by_function.items())


def per_million(
    read_units: float,
    write_units: float,
    sqs_requests: float,
    lambda_requests: float,
    lambda_gb_seconds: float,
    api_requests: float = 0.0,
    eventbridge_invocations: float = 0.0,
    completion_events: float = 0.0,
    log_bytes: float = 0.0,
) -> dict[str, float]:
    """Dollars per million fires, by service, from per-fire quantities."""
    dynamodb = read_units * PRICES["dynamodb_read_request_unit"] + write_units * PRICES["dynamodb_write_request_unit"]
    parts = {
        "dynamodb": dynamodb * 1e6,
        "sqs": sqs_requests * PRICES["sqs_request"] * 1e6,
        "lambda_requests": lambda_requests * PRICES["lambda_request"] * 1e6,
        "lambda_duration": lambda_gb_seconds * PRICES["lambda_gb_second_arm64"] * 1e6,
        "api_gateway": api_requests * PRICES["api_gateway_rest_request"] * 1e6,
        "eventbridge_scheduler": eventbridge_invocations * PRICES["eventbridge_scheduler_invocation"] * 1e6,
        "completion_events": completion_events * PRICES["eventbridge_custom_event"] * 1e6,
        "cloudwatch_logs": log_bytes * PRICES["cloudwatch_logs_ingested_byte"] * 1e6,
    }
    parts["total"] = sum(parts.values())
    return parts


def eventbridge_rows(worker_seconds_per_fire: float) -> list[dict[str, Any]]:
    """The alternatives, priced from their documented per-call work (see the assumptions in each row)."""
    alone = per_million(0, 0, 0, 0, 0, eventbridge_invocations=1)
    with_lambda = per_million(
        0, POWERTOOLS_WRITE_UNITS_PER_CALL, 0, 1, gb_seconds({"worker": worker_seconds_per_fire}),
        eventbridge_invocations=1, log_bytes=LAMBDA_PLATFORM_BYTES,
    )  # fmt: skip
    return [
        {
            "design": "EventBridge Scheduler alone",
            "per_million": alone,
            "assumptions": [
                "$1.00 per million scheduled invocations; creating schedules is not charged",
                "the target's own cost is extra; delivery is at-least-once with no deduplication",
            ],
        },
        {
            "design": "EventBridge Scheduler + Lambda + Powertools idempotency",
            "per_million": with_lambda,
            "assumptions": [
                f"1 scheduler invocation + 1 Lambda invocation (arm64, {FUNCTION_MEMORY_MB['worker']} MB as our "
                "worker) per fire",
                f"Lambda duration per fire = our worker's measured execution time per occurrence "
                f"({worker_seconds_per_fire * 1000:.1f} ms): the same target call, fewer table calls",
                "Powertools idempotency: conditional PutItem (INPROGRESS) + UpdateItem (COMPLETED) = 2 write units "
                "per fire; a repeat would add 1 write unit (failed put) + 1 read unit (GetItem); 0 % repeats assumed",
                "no run history, no fencing token, no misfire or overlap policy",
                f"CloudWatch Logs: Lambda's START, END and REPORT lines of each invocation ({LAMBDA_PLATFORM_BYTES} "
                "bytes), nothing the function logs itself",
            ],
        },
    ]


def provisioned_dynamodb_per_million(read_units: float, write_units: float, utilisation: float = 0.7) -> float:
    """Dollars per million fires of `read_units` and `write_units` each, on provisioned capacity used at
    `utilisation` on average."""
    per_write = PROVISIONED["wcu_hour"] / 3600 / utilisation
    per_read = PROVISIONED["rcu_hour"] / 3600 / utilisation
    return (read_units * per_read + write_units * per_write) * 1e6
