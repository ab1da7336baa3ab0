"""A test scheduler for your own tests: punctual's real core in-process on moto, with a virtual clock.

    from punctual_sdk.testing import TestScheduler

    with TestScheduler(handlers={"billing.charge": charge}) as scheduler:
        scheduler.create({"schedule": {"type": "once", "delay_seconds": 7 * 86400},
                          "target": {"type": "handler", "name": "billing.charge"}, "payload": {"card": "c_1"}})
        scheduler.advance(days=7)

Needs the `testing` extra (`pip install "punctual-sdk[testing]"`: punctual's core and moto); without it, importing
this package raises an ImportError that says so. The pytest fixture `punctual` comes with
`pytest_plugins = ["punctual_sdk.testing.pytest_plugin"]`. See docs/testing-your-app.md.

Everything the guide uses is here: `TestScheduler`, what a handler gets (`HandlerContext`) and raises to fail
(`TargetFailure`), what a receiver gets and answers (`Request`, `Response`), and what the scheduler delivered
(`Delivered`, a `punctual_sdk.receiver.Delivery`).
"""

from importlib.util import find_spec

#: What the `testing` extra brings, by a module this package imports from it.
_EXTRA = {"moto": "moto", "scheduler.handlers.wiring": "punctual-core (punctual's core)", "boto3": "boto3"}


def _missing() -> list[str]:
    missing = []
    for module, distribution in _EXTRA.items():
        try:
            found = find_spec(module) is not None
        except ModuleNotFoundError:  # its package is not there (or is someone else's `scheduler` module)
            found = False
        except ValueError:  # imported already, without a spec
            found = True
        if not found:
            missing.append(distribution)
    return missing


if _absent := _missing():
    raise ImportError(
        f"punctual_sdk.testing needs the `testing` extra, which brings {', '.join(_absent)}: pip install "
        '"punctual-sdk[testing]" (from a clone of punctual: scripts/build-dist, then pip install --find-links dist '
        '"punctual-sdk[testing]"; see docs/testing-your-app.md)',
        name=__name__,
    )

from punctual_sdk.testing.receivers import Request, Response  # noqa: E402
from punctual_sdk.testing.scheduler import DEFAULT_TENANT, Delivered, TestScheduler  # noqa: E402
from scheduler.core.ports import TargetFailure  # noqa: E402
from scheduler.targets.registry import HandlerContext  # noqa: E402

__all__ = [
    "DEFAULT_TENANT",
    "Delivered",
    "HandlerContext",
    "Request",
    "Response",
    "TargetFailure",
    "TestScheduler",
]
