"""The fast path's contract (scheduler.adapters.fast_calls): the same answers, errors, signatures and retries as
botocore's own client, from the emulators and from a local server that misbehaves on purpose; and moto's
in-process mock still answers it, so no test reaches AWS."""

from __future__ import annotations

import json
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from unittest import mock

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError, ConnectionClosedError, ParamValidationError

from scheduler.adapters.fast_calls import FastCalls, SigV4, fast_calls

CONFIG = Config(retries={"mode": "standard", "max_attempts": 2}, connect_timeout=2, read_timeout=5)
KEY = {"PK": {"S": "job#1"}, "SK": {"S": "DEF"}}
ITEM = {
    **KEY,
    "state": {"S": "ACTIVE"},
    "version": {"N": "3"},
    "sealed": {"B": b"\x00\xffsealed"},
    "marks": {"BS": [b"a", b"b"]},
    "spec": {"M": {"B": {"S": "a map member named B is not binary"}, "n": {"N": "1.5"}}},
    "labels": {"L": [{"S": "x"}, {"NULL": True}, {"BOOL": False}]},
}


def without_metadata(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in answer.items() if k != "ResponseMetadata"}


# -- the signature ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("token", [None, "session-token"])
@pytest.mark.parametrize("url", ["https://dynamodb.eu-west-1.amazonaws.com/", "http://127.0.0.1:8000/"])
def test_the_signature_is_botocores(token: str | None, url: str) -> None:
    credentials = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    now = datetime(2026, 12, 7, 15, 4, 5, tzinfo=UTC)
    body = json.dumps({"TableName": "jobs", "Key": KEY}).encode()
    headers = {
        "Content-Type": "application/x-amz-json-1.0",
        "User-Agent": "punctual-fast-calls",
        "X-Amz-Target": "DynamoDB_20120810.GetItem",
        "x-amzn-query-mode": "true",
        "Content-Length": str(len(body)),
    }
    reference = AWSRequest("POST", url, data=body, headers=dict(headers))
    with mock.patch("botocore.auth.get_current_datetime", return_value=now.replace(tzinfo=None)):
        SigV4Auth(credentials.get_frozen_credentials(), "dynamodb", "eu-west-1").add_auth(reference)
    host = url.split("/")[2]
    ours = SigV4("dynamodb", "eu-west-1").headers(host, headers, body, credentials.get_frozen_credentials(), now)
    assert ours["Authorization"] == reference.headers["Authorization"]
    assert ours["X-Amz-Date"] == reference.headers["X-Amz-Date"]
    assert ours.get("X-Amz-Security-Token") == reference.headers.get("X-Amz-Security-Token")


def test_the_signing_key_of_a_day_is_kept_and_a_new_day_or_secret_gets_its_own() -> None:
    signer = SigV4("dynamodb", "us-east-1")
    first = signer._signing_key("secret", "20261207")
    assert signer._signing_key("secret", "20261207") is first
    assert signer._signing_key("secret", "20261208") != first
    assert signer._signing_key("rotated", "20261208") != signer._signing_key("secret", "20261208")


# -- the same answers as botocore, from the emulators -----------------------------------------------------------


@pytest.fixture
def table(dynamodb_client: Any) -> Iterator[str]:
    name = f"fast{uuid.uuid4().hex[:10]}"
    plain = getattr(dynamodb_client, "wrapped", dynamodb_client)
    plain.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "PK", "AttributeType": "S"},
            {"AttributeName": "SK", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    yield name
    plain.delete_table(TableName=name)


def both(dynamodb_client: Any) -> tuple[Any, FastCalls]:
    plain = getattr(dynamodb_client, "wrapped", dynamodb_client)
    return plain, FastCalls(plain)


def test_items_come_back_as_botocore_returns_them_binary_attributes_as_bytes(dynamodb_client: Any, table: str) -> None:
    plain, fast = both(dynamodb_client)
    fast.put_item(TableName=table, Item=ITEM)
    read = {"TableName": table, "Key": KEY, "ConsistentRead": True}
    assert without_metadata(fast.get_item(**read)) == without_metadata(plain.get_item(**read))
    assert fast.get_item(**read)["Item"]["sealed"] == {"B": b"\x00\xffsealed"}
    assert fast.get_item(**read)["Item"]["spec"]["M"]["B"] == {"S": "a map member named B is not binary"}
    updated = fast.update_item(
        TableName=table,
        Key=KEY,
        UpdateExpression="SET version = :v ADD marks :m",
        ExpressionAttributeValues={":v": {"N": "4"}, ":m": {"BS": [b"c"]}},
        ReturnValues="ALL_NEW",
    )
    assert sorted(updated["Attributes"]["marks"]["BS"]) == [b"a", b"b", b"c"]
    assert updated["ResponseMetadata"]["HTTPStatusCode"] == 200


def test_a_failed_condition_raises_the_clients_own_exception_with_the_old_item(
    dynamodb_client: Any, table: str
) -> None:
    plain, fast = both(dynamodb_client)
    plain.put_item(TableName=table, Item=ITEM)
    update = {
        "TableName": table,
        "Key": KEY,
        "UpdateExpression": "SET version = :v",
        "ConditionExpression": "version = :old",
        "ExpressionAttributeValues": {":v": {"N": "9"}, ":old": {"N": "1"}},
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    answers = []
    for client in (plain, fast):
        with pytest.raises(plain.exceptions.ConditionalCheckFailedException) as failed:
            client.update_item(**update)
        answers.append(without_metadata(failed.value.response))
    assert answers[0] == answers[1]
    assert answers[1]["Item"]["sealed"] == {"B": b"\x00\xffsealed"}


def test_a_cancelled_transaction_carries_its_reasons(dynamodb_client: Any, table: str) -> None:
    plain, fast = both(dynamodb_client)
    plain.put_item(TableName=table, Item=ITEM)
    check = {
        "ConditionCheck": {
            "TableName": table,
            "Key": KEY,
            "ConditionExpression": "version = :old",
            "ExpressionAttributeValues": {":old": {"N": "1"}},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    }
    reasons = []
    for client in (plain, fast):
        with pytest.raises(ClientError) as failed:
            client.transact_write_items(TransactItems=[check])
        assert failed.value.response["Error"]["Code"] == "TransactionCanceledException"
        reasons.append(failed.value.response["CancellationReasons"])
    assert reasons[0] == reasons[1]
    assert reasons[1][0]["Code"] == "ConditionalCheckFailed" and reasons[1][0]["Item"]["version"] == {"N": "3"}


def test_a_query_pages_as_botocores(dynamodb_client: Any, table: str) -> None:
    plain, fast = both(dynamodb_client)
    for i in range(7):
        plain.put_item(
            TableName=table, Item={"PK": {"S": "bucket"}, "SK": {"S": f"t{i:02}"}, "blob": {"B": bytes([i])}}
        )
    query = {
        "TableName": table,
        "KeyConditionExpression": "PK = :p",
        "ExpressionAttributeValues": {":p": {"S": "bucket"}},
        "Limit": 3,
    }
    pages: list[list[Any]] = []
    for client in (plain, fast):
        seen, start = [], None
        while True:
            page = client.query(**query, **({"ExclusiveStartKey": start} if start else {}))
            seen.append(page["Items"])
            start = page.get("LastEvaluatedKey")
            if not start:
                break
        pages.append(seen)
    assert pages[0] == pages[1] and sum(len(p) for p in pages[1]) == 7


def test_sqs_sends_deletes_and_errors_as_botocore(sqs_client: Any) -> None:
    plain = getattr(sqs_client, "wrapped", sqs_client)
    fast = FastCalls(plain)
    url = plain.create_queue(QueueName=f"fast{uuid.uuid4().hex[:10]}")["QueueUrl"]
    try:
        sent = fast.send_message_batch(
            QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"m{i}", "DelaySeconds": 0} for i in range(10)]
        )
        assert len(sent["Successful"]) == 10 and not sent.get("Failed")
        received = plain.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)["Messages"]
        assert sorted(m["Body"] for m in received) == sorted(f"m{i}" for i in range(10))
        deleted = fast.delete_message_batch(
            QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(received)]
        )
        assert len(deleted["Successful"]) == len(received)
        errors = []
        for client in (plain, fast):
            with pytest.raises(plain.exceptions.QueueDoesNotExist) as failed:
                client.send_message_batch(QueueUrl=url + "-missing", Entries=[{"Id": "1", "MessageBody": "x"}])
            errors.append(failed.value.response["Error"])
        assert errors[0] == errors[1]
    finally:
        plain.delete_queue(QueueUrl=url)


def test_the_clients_events_see_a_fast_call(dynamodb_client: Any, table: str) -> None:
    """The benchmark's meter and any other observer of the client's events see the call as botocore's."""
    _, fast = both(dynamodb_client)
    seen: list[tuple[str, Any]] = []

    def before(params: dict[str, Any], model: Any, **_: Any) -> None:
        params["ReturnConsumedCapacity"] = "TOTAL"
        seen.append(("before", model.name))

    def after(parsed: dict[str, Any], model: Any, **_: Any) -> None:
        seen.append(("after", parsed.get("ConsumedCapacity", {}).get("TableName")))

    fast.meta.events.register("before-parameter-build.dynamodb.PutItem", before)
    fast.meta.events.register("after-call.dynamodb.PutItem", after)
    try:
        fast.put_item(TableName=table, Item=ITEM)
    finally:
        fast.meta.events.unregister("before-parameter-build.dynamodb.PutItem", before)
        fast.meta.events.unregister("after-call.dynamodb.PutItem", after)
    assert seen == [("before", "PutItem"), ("after", table)]


def test_what_is_not_plain_json_goes_to_botocore(dynamodb_client: Any, table: str) -> None:
    """botocore judges it (here: refuses it), exactly as without the fast path."""
    _, fast = both(dynamodb_client)
    with pytest.raises(ParamValidationError):
        fast.put_item(TableName=table, Item={**KEY, "at": {"S": datetime.now(UTC)}})


def test_other_operations_are_the_clients_own(dynamodb_client: Any, table: str) -> None:
    plain, fast = both(dynamodb_client)
    assert fast.describe_table(TableName=table)["Table"]["TableName"] == table
    assert fast.meta is plain.meta and fast_calls(fast) is fast


def test_a_client_behind_a_proxy_keeps_botocores_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    plain = boto3.client(
        "dynamodb",
        endpoint_url="https://127.0.0.1:9",  # were it sent on the fast path, a closed local port
        region_name="us-east-1",
        aws_access_key_id="a",
        aws_secret_access_key="b",
        config=CONFIG,
    )
    plain.get_item = lambda **params: {"via": "botocore", **params}  # nothing is sent anywhere
    fast = FastCalls(plain)
    monkeypatch.delenv("HTTPS_PROXY")  # decided when the client was wrapped
    assert fast.get_item(TableName="jobs", Key=KEY) == {"via": "botocore", "TableName": "jobs", "Key": KEY}


# -- moto's in-process mock answers it: no test reaches AWS -------------------------------------------------------


def test_under_motos_mock_the_call_never_leaves_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto import mock_aws

    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")

    def refuse(*args: Any, **kwargs: Any) -> socket.socket:
        raise AssertionError(f"a connection was opened: {args}")

    with mock_aws():
        plain = boto3.client("dynamodb", region_name="us-east-1", config=CONFIG)
        plain.create_table(
            TableName="jobs",
            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
            AttributeDefinitions=[
                {"AttributeName": "PK", "AttributeType": "S"},
                {"AttributeName": "SK", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        fast = FastCalls(plain)
        monkeypatch.setattr(socket, "create_connection", refuse)
        fast.put_item(TableName="jobs", Item=ITEM)
        assert fast.get_item(TableName="jobs", Key=KEY)["Item"]["sealed"] == {"B": b"\x00\xffsealed"}
        with pytest.raises(plain.exceptions.ConditionalCheckFailedException):
            fast.put_item(TableName="jobs", Item=ITEM, ConditionExpression="attribute_not_exists(PK)")


# -- retries and connections, against a server that misbehaves ---------------------------------------------------


class Script:
    """What the local server answers, request by request: (status, headers, body) or "close" (hang up)."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.requests: list[dict[str, Any]] = []
        self.connections: set[int] = set()


def serve(script: Script) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            body = self.rfile.read(length)
            script.requests.append({"headers": dict(self.headers), "body": json.loads(body)})
            script.connections.add(self.client_address[1])
            answer = script.answers.pop(0) if script.answers else (200, {}, b"{}")
            if answer == "close":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            status, headers, content = answer
            self.send_response(status)
            chunked = headers.pop("chunked", False)
            for name, value in headers.items():
                self.send_header(name, value)
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(0, len(content), 7):
                    piece = content[i : i + 7]
                    self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
            else:
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def local_server() -> Iterator[Callable[[list[Any]], tuple[Script, Any]]]:
    servers: list[ThreadingHTTPServer] = []

    def start(answers: list[Any]) -> tuple[Script, Any]:
        script = Script(answers)
        server, url = serve(script)
        servers.append(server)
        client = boto3.client(
            "dynamodb",
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id="local",
            aws_secret_access_key="local",
            config=CONFIG,
        )
        return script, FastCalls(client)

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def error(code: str, status: int = 400, **fields: Any) -> tuple[int, dict[str, str], bytes]:
    body = {"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": code, **fields}
    return status, {"Content-Type": "application/x-amz-json-1.0"}, json.dumps(body).encode()


def ok(body: dict[str, Any], **headers: Any) -> tuple[int, dict[str, Any], bytes]:
    return 200, {"Content-Type": "application/x-amz-json-1.0", **headers}, json.dumps(body).encode()


def test_a_throttled_call_is_retried_by_the_standard_rules(local_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr("scheduler.adapters.fast_calls.time.sleep", waits.append)
    script, fast = local_server(
        [
            error("ProvisionedThroughputExceededException"),
            error("InternalServerError", 500),
            ok({"Item": {**KEY, "sealed": {"B": "AP9zZWFsZWQ="}}}),
        ]
    )
    answer = fast.get_item(TableName="jobs", Key=KEY)
    assert answer["Item"]["sealed"] == {"B": b"\x00\xffsealed"}
    assert answer["ResponseMetadata"]["RetryAttempts"] == 2 and len(script.requests) == 3 and len(waits) == 2
    assert all(r["headers"]["X-Amz-Target"] == "DynamoDB_20120810.GetItem" for r in script.requests)
    assert all(r["headers"]["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=local/") for r in script.requests)


def test_retries_stop_at_the_clients_attempts_and_raise_its_exception(
    local_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("scheduler.adapters.fast_calls.time.sleep", lambda _: None)
    script, fast = local_server([error("ThrottlingException")] * 5)
    with pytest.raises(ClientError) as failed:
        fast.update_item(
            TableName="jobs", Key=KEY, UpdateExpression="SET a = :a", ExpressionAttributeValues={":a": {"S": "x"}}
        )
    assert failed.value.response["Error"]["Code"] == "ThrottlingException"
    assert len(script.requests) == 3  # max_attempts 2: three in all, as botocore counts them


def test_a_refused_condition_is_not_retried(local_server: Any) -> None:
    script, fast = local_server([error("ConditionalCheckFailedException", Item={"version": {"N": "2"}})])
    with pytest.raises(fast.exceptions.ConditionalCheckFailedException) as failed:
        fast.put_item(TableName="jobs", Item=ITEM)
    assert failed.value.response["Item"] == {"version": {"N": "2"}} and len(script.requests) == 1


def test_a_damaged_answer_is_retried(local_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("scheduler.adapters.fast_calls.time.sleep", lambda _: None)
    script, fast = local_server(
        [ok({"Item": {"a": {"S": "x"}}}, **{"x-amz-crc32": "1"}), ok({"Item": {"a": {"S": "y"}}})]
    )
    assert fast.get_item(TableName="jobs", Key=KEY)["Item"] == {"a": {"S": "y"}}
    assert len(script.requests) == 2


def test_a_connection_is_kept_then_replaced_when_the_server_hangs_up(
    local_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("scheduler.adapters.fast_calls.time.sleep", lambda _: None)
    script, fast = local_server([ok({}), ok({}), "close", ok({"Count": 0, "Items": []})])
    fast.put_item(TableName="jobs", Item=ITEM)
    fast.put_item(TableName="jobs", Item=ITEM)
    assert len(script.connections) == 1  # kept alive
    assert (
        fast.query(TableName="jobs", KeyConditionExpression="PK = :p", ExpressionAttributeValues={":p": {"S": "x"}})[
            "Count"
        ]
        == 0
    )
    assert len(script.requests) == 4 and len(script.connections) == 2


def test_threads_made_anew_share_the_kept_connections(local_server: Any) -> None:
    """A sweep's bucket threads and a worker's record threads are new for each minute and batch: they take the
    connections the earlier ones left, rather than a handshake each."""
    script, fast = local_server([ok({}) for _ in range(8)])

    def call() -> None:
        fast.put_item(TableName="jobs", Item=ITEM)

    for _ in range(4):  # one after another, each on a thread of its own
        thread = threading.Thread(target=call)
        thread.start()
        thread.join()
    assert len(script.requests) == 4 and len(script.connections) == 1
    both = [threading.Thread(target=call) for _ in range(2)]  # at once: at most a connection each
    for thread in both:
        thread.start()
    for thread in both:
        thread.join()
    assert len(script.requests) == 6 and len(script.connections) <= 2


def test_a_chunked_answer_is_read_whole(local_server: Any) -> None:
    items = [{"PK": {"S": f"p{i}"}, "SK": {"S": "DEF"}} for i in range(20)]
    script, fast = local_server([ok({"Count": 20, "Items": items}, chunked=True), ok({})])
    assert (
        fast.query(TableName="jobs", KeyConditionExpression="PK = :p", ExpressionAttributeValues={":p": {"S": "x"}})[
            "Items"
        ]
        == items
    )
    fast.put_item(TableName="jobs", Item=ITEM)  # the connection is still in step
    assert len(script.connections) == 1


def test_a_server_that_never_answers_fails_as_a_connection_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("scheduler.adapters.fast_calls.time.sleep", lambda _: None)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    accepted: list[socket.socket] = []

    def hang_up() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(conn)
            conn.recv(65536)
            conn.close()

    threading.Thread(target=hang_up, daemon=True).start()
    client = boto3.client(
        "dynamodb",
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
        config=CONFIG,
    )
    try:
        with pytest.raises(ConnectionClosedError):
            FastCalls(client).get_item(TableName="jobs", Key=KEY)
        assert len(accepted) == 3
    finally:
        listener.close()
