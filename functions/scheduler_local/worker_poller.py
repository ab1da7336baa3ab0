"""Feeds the ready queue to the worker handler exactly as the Lambda event source mapping does: long-poll a
batch, invoke the handler with an SQS event, delete what succeeded, leave what it lists in
`batchItemFailures` (their visibility was set by the handler). Run several for several "containers"."""

from __future__ import annotations

import os
import sys
import time
import traceback
from typing import Any

import boto3

from scheduler_local.lambda_context import LocalContext

REGION = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")


def to_event(messages: list[dict[str, Any]], queue_arn: str) -> dict[str, Any]:
    records = []
    for m in messages:
        attributes = {k: str(v) for k, v in (m.get("Attributes") or {}).items()}
        records.append(
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": attributes,
                "messageAttributes": {
                    k: {"stringValue": v.get("StringValue"), "dataType": v.get("DataType", "String")}
                    for k, v in (m.get("MessageAttributes") or {}).items()
                },
                "md5OfBody": m.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": REGION,
            }
        )
    return {"Records": records}


def poll_once(sqs: Any, queue_url: str, queue_arn: str, handler: Any, wait_seconds: int) -> int:
    response = sqs.receive_message(
        QueueUrl=queue_url,
        MaxNumberOfMessages=10,
        WaitTimeSeconds=wait_seconds,
        AttributeNames=["All"],
        MessageAttributeNames=["All"],
    )
    messages = response.get("Messages", [])
    if not messages:
        return 0
    result = handler(to_event(messages, queue_arn), LocalContext("punctual-worker", 120))
    failed = {f["itemIdentifier"] for f in (result or {}).get("batchItemFailures", [])}
    done = [
        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
        for i, m in enumerate(messages)
        if m["MessageId"] not in failed
    ]
    if done:
        sqs.delete_message_batch(QueueUrl=queue_url, Entries=done)
    return len(messages)


def main() -> None:
    from scheduler.handlers.worker import lambda_handler

    queue_url = os.environ["SCHEDULER_READY_QUEUE_URL"]
    sqs = boto3.client("sqs")
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    wait = int(os.environ.get("SCHEDULER_POLL_WAIT_SECONDS", "1"))
    print(f"worker polling {queue_url}", flush=True)
    while True:
        try:
            poll_once(sqs, queue_url, queue_arn, lambda_handler, wait)
        except Exception:
            traceback.print_exc(file=sys.stderr)  # the batch stays in the queue and comes back, as on Lambda
            time.sleep(1)


if __name__ == "__main__":
    main()
