"""The API's routes of flow-control keys (docs/flow-control.md): set a key's limits, read a key and its live state,
list the tenant's keys."""

from __future__ import annotations

from aws_lambda_powertools.event_handler import Response

from scheduler.core.model.flow import FlowControl
from scheduler.core.model.timefmt import rfc3339
from scheduler.core.tenancy.flow_control import FlowKeys, KeyView, flow_owner
from scheduler.handlers import wiring
from scheduler.handlers.api_caller import logger, metrics, tenant
from scheduler.handlers.api_models import FlowControlKey, FlowControlKeys
from scheduler.handlers.api_problems import Problem, validated
from scheduler.handlers.api_requests import json_body
from scheduler.handlers.api_routes import Param, route
from scheduler.handlers.api_views import json_response

_KEY = Param.path("flow_key", "the flow-control key")
NO_KEY = "no such flow-control key for this caller"


def _flow() -> FlowKeys:
    flow = wiring.container(metrics).core.flow
    if flow is None:
        raise Problem(404, "Not Found", "flow control is not available in this deployment")
    return flow


@route.put(
    "/v1/flow-controls/<flow_key>",
    summary="set a flow-control key's limits",
    description=(
        "The key's limits become these (the most recent write naming a key - this, or a job created or changed "
        "with it in `flow_control` - sets them); they apply to every job of the tenant that names the key. The body "
        "is a job's `flow_control` with or without `key` (if given, it must be the path's)."
    ),
    params=(_KEY,),
    body="FlowControlLimits",
    responses={
        200: ("the key as it is now", "FlowControlKey"),
        422: "neither rate nor parallelism, a value out of range, a rate one key cannot hold to, or another key",
    },
)
def put_flow_control(flow_key: str) -> Response[str]:
    who = tenant()
    body = json_body()
    if not isinstance(body, dict):
        raise Problem.unprocessable('send the limits as a JSON object: {"rate": 50, "period_seconds": 1, ...}')
    given = body.get("key", flow_key)
    if given != flow_key:
        raise Problem.unprocessable(
            f"the body's key {given!r} is not the path's {flow_key!r}: leave it out or give the same",
            ("key", "must be the path's key"),
        )
    limits = validated(FlowControl, {**body, "key": flow_key})
    flow = _flow()
    flow.declare(who, limits)
    logger.info("flow-control key set", extra={"tenant": who, "flow_key": flow_key})
    return json_response(200, _key_view(flow, who, flow_key))


@route.get(
    "/v1/flow-controls/<flow_key>",
    summary="a flow-control key: its limits, backlog, calls in flight, rate of the last minute",
    params=(_KEY,),
    responses={200: ("the key", "FlowControlKey"), 404: NO_KEY},
)
def get_flow_control(flow_key: str) -> Response[str]:
    who = tenant()
    return json_response(200, _key_view(_flow(), who, flow_key))


@route.get(
    "/v1/flow-controls",
    summary="the caller's flow-control keys",
    responses={200: ("the keys, by key", "FlowControlKeys")},
)
def list_flow_controls() -> Response[str]:
    who = tenant()
    flow = _flow()
    shown = [_view(flow, who, state.limits.key) for state in flow.keys.list(who)]
    body: FlowControlKeys = {"keys": [view for view in shown if view is not None]}
    return json_response(200, body)


def _key_view(flow: FlowKeys, who: str, key: str) -> FlowControlKey:
    view = _view(flow, who, key)
    if view is None:
        raise Problem(404, "Not Found", f"{NO_KEY}: {key!r} (a job naming it, or a PUT, creates it)")
    return view


def _view(flow: FlowKeys, who: str, key: str) -> FlowControlKey | None:
    state = flow.keys.get(who, key)
    if state is None:
        return None
    now = flow.clock.now()
    seen: KeyView = flow.view(state, flow.slots.in_use(flow_owner(who, key), now))
    limits = state.limits
    paused = state.paused_until if state.paused_until is not None and state.paused_until > now else None
    shown: FlowControlKey = {
        "key": limits.key,
        "rate": limits.rate,
        "period_seconds": limits.period_seconds,
        "parallelism": limits.parallelism,
        "max_backlog": limits.max_backlog,
        "updated_at": rfc3339(state.updated_at),
        "backlog": seen.backlog,
        "in_flight": seen.in_flight,
        "rate_last_minute": seen.rate_last_minute,
        "oldest_held_lateness_seconds": seen.oldest_held_lateness,
        "rate_factor": seen.rate_factor,
        "paused_until": rfc3339(paused) if paused is not None else None,
    }
    return shown
