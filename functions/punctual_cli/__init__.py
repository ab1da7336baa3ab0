"""punctual's client library and command line.

`punctual_cli.client.SchedulerClient` is the typed client of the API (SigV4 on AWS, a dev token locally);
`punctual_cli.main` is the `punctual` command built on it.
"""

from punctual_cli.client import (
    ApiError,
    BearerAuth,
    InvalidDefinition,
    JobView,
    Page,
    RunView,
    SchedulerClient,
    SigV4Auth,
    TransportError,
)

__all__ = [
    "ApiError",
    "BearerAuth",
    "InvalidDefinition",
    "JobView",
    "Page",
    "RunView",
    "SchedulerClient",
    "SigV4Auth",
    "TransportError",
]
