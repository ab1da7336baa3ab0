"""A test scheduler for your own tests: punctual's real core in-process on moto, with a virtual clock.

    from punctual_sdk.testing import TestScheduler

    with TestScheduler(handlers={"billing.charge": charge}) as scheduler:
        scheduler.create({"schedule": {"type": "once", "delay_seconds": 7 * 86400},
                          "target": {"type": "handler", "name": "billing.charge"}, "payload": {"card": "c_1"}})
        scheduler.advance(days=7)

Needs the `testing` extra (`pip install punctual-sdk[testing]`: punctual itself and moto). The pytest fixture
`punctual` comes with `pytest_plugins = ["punctual_sdk.testing.pytest_plugin"]`. See docs/testing-your-app.md.
"""

from punctual_sdk.testing.receivers import Request, Response
from punctual_sdk.testing.scheduler import DEFAULT_TENANT, Delivery, TestScheduler
from scheduler.targets.registry import HandlerContext

__all__ = ["DEFAULT_TENANT", "Delivery", "HandlerContext", "Request", "Response", "TestScheduler"]
