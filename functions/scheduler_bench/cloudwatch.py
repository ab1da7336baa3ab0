"""What the functions write to CloudWatch in the benchmark: the lines the core logs, sized as a deployed function
writes them, and the counts of the core's Metrics port, which go into each invocation's EMF document."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

from scheduler.handlers.wiring import REDUNDANT_LOG_KEYS
from scheduler.schema import SERVICE_NAME

if TYPE_CHECKING:
    from scheduler_bench.metering import Meter


#: The keys `@logger.inject_lambda_context` adds to every line, at the length of a deployed function's.
LAMBDA_CONTEXT_KEYS: dict[str, Any] = {
    "cold_start": False,
    "function_name": "punctual-dev-WorkerFunction3A1B2C3D-AbCdEfGhIjKl",
    "function_memory_size": 512,
    "function_arn": "arn:aws:lambda:us-east-1:123456789012:function:punctual-dev-WorkerFunction3A1B2C3D-AbCdEfGhIjKl",
    "function_request_id": "3f2a1c9e-8d7b-4e6f-9a1b-2c3d4e5f6a7b",
}


class BenchMetrics:
    """The core's Metrics port in the benchmark: each count goes into the current invocation's EMF document."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter

    def count(self, name: str, value: float = 1, unit: str = "Count") -> None:
        self.meter.metric(name, value, unit)


class LogLines(logging.Handler):
    """Counts the bytes of each line the core logs, formatted as the deployed functions write it: the formatter of a
    handler's Powertools logger (`scheduler.handlers.wiring.handler_logger`, which the `scheduler.*` loggers write
    through) with the Lambda context's keys as `wiring.lambda_context` leaves them. Attach it to the `scheduler`
    logger at the deployed level (`log_level`, INFO by default)."""

    def __init__(self, meter: Meter, level: int = logging.INFO) -> None:
        super().__init__(level)
        self.meter = meter
        self.lines = LambdaPowertoolsFormatter()
        # (`name`: the logger's, as copy_config_to_registered_loggers adds it to the lines of the loggers it wires)
        self.lines.append_keys(service=SERVICE_NAME, name="%(name)s", **LAMBDA_CONTEXT_KEYS)
        self.lines.remove_keys(list(REDUNDANT_LOG_KEYS))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.lines.format(record)
        except Exception:  # a line the formatter cannot render is not the benchmark's concern
            return
        self.meter.log_line(len(line.encode()))
