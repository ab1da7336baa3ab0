"""Example `handler` targets shipped with the worker. Importing this package registers them (the handler-target
registry, `scheduler.targets.registry`, imports it so that every worker has them)."""

from scheduler.examples import payments

__all__ = ["payments"]
