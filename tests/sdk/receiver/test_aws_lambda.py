"""The Lambda decorator on the `lambda`, `sqs` and `sns` targets' event shapes (aws_targets.envelope and
message_attributes), and the Powertools route decorator behind API Gateway (REST and HTTP APIs)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from punctual_sdk.receiver import Delivery, InProgress, InvalidDelivery, Receiver
from tests.sdk.receiver.signed import signed_request

KEY = "job-1:2026-12-01T08:00:00Z"


def envelope(token: int = 3, attempt: int = 1, key: str = KEY) -> dict[str, Any]:
    """What the worker's `lambda` target sends (scheduler.adapters.aws_targets.envelope)."""
    return {
        "occurrence_key": key,
        "fencing_token": token,
        "job_id": "job-1",
        "scheduled_for": "2026-12-01T08:00:00Z",
        "attempt": attempt,
        "payload": {"amount": 5},
    }


def attributes(token: int, key: str, style: str) -> dict[str, Any]:
    """aws_targets.message_attributes as an SQS record (`stringValue`) or an SNS record (`Value`) shows them."""
    values = {"occurrence_key": key, "fencing_token": str(token), "job_id": "job-1", "attempt": "1"}
    values["scheduled_for"] = "2026-12-01T08:00:00Z"
    if style == "sqs":
        return {k: {"stringValue": v, "dataType": "String"} for k, v in values.items()}
    return {k: {"Type": "String", "Value": v} for k, v in values.items()}


def sqs_record(message_id: str, token: int = 3, key: str = KEY, fifo: bool = False) -> dict[str, Any]:
    return {
        "messageId": message_id,
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:1:jobs" + (".fifo" if fifo else ""),
        "body": json.dumps({"amount": 5}),
        "messageAttributes": attributes(token, key, "sqs"),
    }


def sns_event(token: int = 3) -> dict[str, Any]:
    return {
        "Records": [
            {
                "EventSource": "aws:sns",
                "Sns": {"Message": json.dumps({"amount": 5}), "MessageAttributes": attributes(token, KEY, "sns")},
            }
        ]
    }


class Effects:
    def __init__(self, fail_on: set[str] | None = None) -> None:
        self.seen: list[Delivery] = []
        self.fail_on = fail_on or set()

    def __call__(self, delivery: Delivery) -> Any:
        if delivery.occurrence_key in self.fail_on:
            raise RuntimeError(f"cannot charge {delivery.occurrence_key}")
        self.seen.append(delivery)
        return {"charged": delivery.payload["amount"]}


def test_the_lambda_target_runs_once_and_a_redelivery_returns_the_first_result(receiver: Receiver) -> None:
    effects = Effects()
    handler = receiver.lambda_handler(effects)

    assert handler(envelope(), None) == {"charged": 5}
    assert handler(envelope(attempt=2), None) == {"charged": 5}
    assert [(d.source, d.fencing_token, d.scheduled_for) for d in effects.seen] == [
        ("lambda", 3, "2026-12-01T08:00:00Z")
    ]


def test_a_stale_token_to_the_lambda_target_returns_a_refusal_without_running(receiver: Receiver) -> None:
    effects = Effects()
    handler = receiver.lambda_handler(effects)
    handler(envelope(token=4), None)

    answer = handler(envelope(token=3), None)

    assert answer["punctual"] == "StaleFencingToken" and "lower than 4" in answer["detail"]
    assert len(effects.seen) == 1


def test_in_progress_and_a_failing_handler_raise_so_the_worker_retries(receiver: Receiver) -> None:
    handler = receiver.lambda_handler(Effects(fail_on={KEY}))
    with pytest.raises(RuntimeError):
        handler(envelope(), None)

    receiver.guard.claim(KEY, 3)
    with pytest.raises(InProgress):
        receiver.lambda_handler(Effects())(envelope(), None)


def test_an_event_that_is_no_delivery_is_refused_clearly(receiver: Receiver) -> None:
    with pytest.raises(InvalidDelivery, match="envelope, an SQS event or an SNS event"):
        receiver.lambda_handler(Effects())({"hello": "world"}, None)
    with pytest.raises(InvalidDelivery, match="fencing_token must be an integer"):
        receiver.lambda_handler(Effects())({**envelope(), "fencing_token": "x"}, None)


def test_an_sqs_batch_reports_only_the_records_to_deliver_again(receiver: Receiver) -> None:
    # Given a batch: a new occurrence, a duplicate of it, a failing one, a stale token, and a stray message
    effects = Effects(fail_on={"job-1:bad"})
    handler = receiver.lambda_handler(effects)
    receiver.guard.run("job-1:old", 9, lambda: "done")
    stray = {"messageId": "m5", "eventSource": "aws:sqs", "body": "{}", "messageAttributes": {}}
    batch = [
        sqs_record("m1"),
        sqs_record("m2"),
        sqs_record("m3", key="job-1:bad"),
        sqs_record("m4", token=1, key="job-1:old"),
        stray,
    ]

    answer = handler({"Records": batch}, None)

    # Then the failing and the stray message come back; the duplicate and the stale one are dropped
    assert answer == {"batchItemFailures": [{"itemIdentifier": "m3"}, {"itemIdentifier": "m5"}]}
    assert [d.occurrence_key for d in effects.seen] == [KEY]
    assert effects.seen[0].source == "sqs" and effects.seen[0].payload == {"amount": 5}


def test_on_a_fifo_queue_every_record_after_a_failure_is_delivered_again(receiver: Receiver) -> None:
    effects = Effects(fail_on={"job-1:bad"})
    batch = [sqs_record("m1", key="job-1:bad", fifo=True), sqs_record("m2", fifo=True)]

    answer = receiver.lambda_handler(effects)({"Records": batch}, None)

    assert answer == {"batchItemFailures": [{"itemIdentifier": "m1"}, {"itemIdentifier": "m2"}]}
    assert effects.seen == []


def test_an_sns_notification_delivered_to_a_queue_is_read_from_its_own_attributes(receiver: Receiver) -> None:
    effects = Effects()
    notification = {
        "Type": "Notification",
        "Message": json.dumps({"amount": 5}),
        "MessageAttributes": attributes(3, KEY, "sns"),
    }
    record = {"messageId": "m1", "eventSource": "aws:sqs", "body": json.dumps(notification)}

    assert receiver.lambda_handler(effects)({"Records": [record]}, None) == {"batchItemFailures": []}
    assert [(d.source, d.occurrence_key) for d in effects.seen] == [("sns", KEY)]


def test_the_sns_target_runs_once_drops_a_stale_token_and_raises_to_be_retried(receiver: Receiver) -> None:
    effects = Effects()
    handler = receiver.lambda_handler(effects)

    handler(sns_event(token=3), None)
    handler(sns_event(token=3), None)
    handler(sns_event(token=2), None)
    assert [(d.source, d.fencing_token) for d in effects.seen] == [("sns", 3)]

    receiver.guard.claim("job-1:busy", 1)
    busy = sns_event()
    busy["Records"][0]["Sns"]["MessageAttributes"]["occurrence_key"]["Value"] = "job-1:busy"
    with pytest.raises(InProgress):
        handler(busy, None)


# -- Powertools routes ---------------------------------------------------------------------------------------


def rest_event(request: Any, route: str) -> dict[str, Any]:
    """A REST API proxy event: `path` is the route, `requestContext.path` what the client called (with the stage)."""
    stage_path, _, query = request.path.partition("?")
    path = route
    params = dict(p.split("=", 1) for p in query.split("&")) if query else None
    return {
        "resource": "/hooks/pay",
        "path": path,
        "httpMethod": request.method,
        "headers": request.headers,
        "multiValueHeaders": {k: [v] for k, v in request.headers.items()},
        "queryStringParameters": params,
        "multiValueQueryStringParameters": {k: [v] for k, v in params.items()} if params else None,
        "requestContext": {"path": stage_path, "stage": "prod", "httpMethod": request.method, "resourcePath": path},
        "body": base64.b64encode(request.body).decode(),
        "isBase64Encoded": True,
    }


def http_api_event(request: Any) -> dict[str, Any]:
    path, _, query = request.path.partition("?")
    return {
        "version": "2.0",
        "routeKey": "POST /hooks/pay",
        "rawPath": path,
        "rawQueryString": query,
        "headers": {k.lower(): v for k, v in request.headers.items()},
        "requestContext": {"http": {"method": request.method, "path": path}, "stage": "$default"},
        "body": request.body.decode(),
        "isBase64Encoded": False,
    }


def pay_route(app: Any, receiver: Receiver) -> Effects:
    """Route `POST /hooks/pay` of a Powertools resolver through the receiver to the Effects it returns."""
    effects = Effects()

    @app.post("/hooks/pay")
    @receiver.powertools_route(app)
    def pay(delivery: Delivery) -> Any:
        return effects(delivery)

    return effects


def test_a_powertools_rest_route_verifies_dedupes_and_fences(receiver: Receiver) -> None:
    from aws_lambda_powertools.event_handler import APIGatewayRestResolver

    app = APIGatewayRestResolver()
    effects = pay_route(app, receiver)

    def post(request: Any) -> tuple[int, Any]:
        answer = app.resolve(rest_event(request, "/hooks/pay"), {})
        return answer["statusCode"], json.loads(answer["body"])

    # the worker calls https://<api>/prod/hooks/pay?x=1: the stage is part of what it signed
    assert post(signed_request(path="/prod/hooks/pay?x=1")) == (200, {"charged": 5})
    assert post(signed_request(path="/prod/hooks/pay?x=1", attempt=2)) == (200, {"charged": 5})
    status, problem = post(signed_request(path="/prod/hooks/pay?x=1", token=6))
    assert (status, problem["title"]) == (409, "StaleFencingToken")
    assert post(signed_request(path="/prod/hooks/pay?x=1", keys={"k1": "forged"}))[0] == 401
    assert len(effects.seen) == 1


def test_a_powertools_http_api_route_verifies_the_raw_path_and_query(receiver: Receiver) -> None:
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

    app = APIGatewayHttpResolver()
    effects = pay_route(app, receiver)

    request = signed_request(path="/hooks/pay?b=2&a=1")
    assert app.resolve(http_api_event(request), {})["statusCode"] == 200
    moved = signed_request(path="/hooks/pay?b=2&a=1")
    moved.path = "/hooks/pay?a=1&b=2"
    assert app.resolve(http_api_event(moved), {})["statusCode"] == 401
    assert len(effects.seen) == 1


def test_an_overlong_number_in_an_event_is_an_invalid_delivery(receiver: Receiver) -> None:
    with pytest.raises(InvalidDelivery, match="fencing_token must be an integer"):
        receiver.lambda_handler(Effects())({**envelope(), "fencing_token": "9" * 5000}, None)


def test_a_powertools_route_refuses_a_body_over_the_limit_with_413() -> None:
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, APIGatewayRestResolver

    from punctual_sdk.receiver import InMemoryDedupeStore
    from tests.sdk.receiver.signed import KEYS, NOW

    small = Receiver(InMemoryDedupeStore(), lambda job_id: KEYS, max_body_bytes=1024, clock=lambda: NOW)
    http_app, rest_app = APIGatewayHttpResolver(), APIGatewayRestResolver()
    effects = [pay_route(http_app, small), pay_route(rest_app, small)]
    big = signed_request(body={"amount": 5, "pad": "x" * 2000}, path="/hooks/pay")

    answers = [http_app.resolve(http_api_event(big), {}), rest_app.resolve(rest_event(big, "/hooks/pay"), {})]

    assert [a["statusCode"] for a in answers] == [413, 413]
    assert [json.loads(a["body"])["title"] for a in answers] == ["RequestTooLarge"] * 2
    assert [e.seen for e in effects] == [[], []]


def test_a_duplicate_of_a_result_too_large_to_keep_gets_none_and_the_handler_runs_once(receiver: Receiver) -> None:
    runs: list[int] = []

    def report(delivery: Delivery) -> Any:
        runs.append(1)
        return {"report": "x" * 200_000}

    handler = receiver.lambda_handler(report)

    assert len(handler(envelope(), None)["report"]) == 200_000
    assert handler(envelope(attempt=2), None) is None
    assert len(runs) == 1


def test_a_powertools_route_replays_a_result_too_large_to_keep_as_an_empty_200(receiver: Receiver) -> None:
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

    app = APIGatewayHttpResolver()
    runs: list[int] = []

    @app.post("/hooks/pay")
    @receiver.powertools_route(app)
    def pay(delivery: Delivery) -> Any:
        runs.append(1)
        return {"report": "x" * 200_000}

    first = app.resolve(http_api_event(signed_request(path="/hooks/pay")), {})
    again = app.resolve(http_api_event(signed_request(path="/hooks/pay", attempt=2)), {})

    assert first["statusCode"] == 200 and len(json.loads(first["body"])["report"]) == 200_000
    assert (again["statusCode"], again["body"]) == (200, "")
    assert again["headers"]["X-Punctual-Body-Not-Kept"] == "true"
    assert len(runs) == 1
