"""The jobs-as-code provider: the CloudFormation custom resource function of `ScheduledJob` (docs/jobs-as-code.md).

CloudFormation invokes it with a Create, Update or Delete of a `Custom::PunctualJob`; it makes the job match
(scheduler.ops.scheduled_jobs) through the API, SigV4-signed as this function's own role (`API_URL_VARIABLE`, set by
the construct, names the stage), and answers CloudFormation at the request's `ResponseURL`: SUCCESS with the job's id
as the physical id, or FAILED with the API's problem detail as the reason. It always answers, whatever failed, so that
no stack waits for it.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

import botocore.session
from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

from scheduler.adapters.signed_api import SignedApi
from scheduler.ops.scheduled_jobs import API_URL_VARIABLE, CREATE_FAILED, Declaration, JobsApi, Refused, ScheduledJobs

#: CloudFormation takes a response body of at most 4,096 bytes; the reason is cut to leave room for the rest.
MAX_REASON = 2000
#: Attempts at delivering the answer to CloudFormation.
RESPONSE_ATTEMPTS = 3

logger = Logger()
copy_config_to_registered_loggers(source_logger=logger, include={"scheduler"})


def lambda_handler(event: dict[str, Any], context: Any) -> None:
    try:
        credentials = botocore.session.get_session().get_credentials()
        if credentials is None:
            raise RuntimeError("this function has no AWS credentials to sign the API's requests with")
        api: JobsApi = SignedApi(os.environ[API_URL_VARIABLE], os.environ["AWS_REGION"], credentials)
        response = answer(event, ScheduledJobs(api))
    except Exception as error:  # an answer even so: a stack must never wait an hour for one
        logger.exception("scheduled job request failed")
        response = _response(event, "FAILED", reason=f"the jobs-as-code provider failed: {error}")
    send(str(event["ResponseURL"]), response)


def answer(event: Mapping[str, Any], jobs: ScheduledJobs) -> dict[str, Any]:
    """CloudFormation's answer to one request (its `ResponseURL` body), after doing what it asks."""
    kind = event["RequestType"]
    physical_id = str(event.get("PhysicalResourceId") or CREATE_FAILED)
    request_id = str(event["RequestId"])
    where = {"request": kind, "logical_id": event.get("LogicalResourceId"), "job_id": physical_id}
    try:
        if kind == "Delete":
            jobs.delete(physical_id)
            logger.info("scheduled job deleted", extra=where)
            return _response(event, "SUCCESS", physical_id)
        declared = Declaration.of(event["ResourceProperties"])
        if kind == "Create":
            outcome = jobs.create(declared, request_id)
        elif kind == "Update":
            previous = Declaration.of(event["OldResourceProperties"])
            outcome = jobs.update(physical_id, declared, previous, request_id)
        else:
            raise Refused(f"unknown request type {kind!r}")
    except Refused as refused:
        logger.warning("scheduled job refused", extra={**where, "reason": str(refused)})
        return _response(event, "FAILED", physical_id, reason=str(refused))
    logger.info("scheduled job matched", extra={**where, "job_id": outcome.job_id, "external_id": declared.external_id})
    return _response(event, "SUCCESS", outcome.job_id, data=outcome.data)


def _response(
    event: Mapping[str, Any],
    status: str,
    physical_id: str | None = None,
    *,
    reason: str = "",
    data: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    reason = reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 3] + "..."
    return {
        "Status": status,
        "Reason": reason or status,
        "PhysicalResourceId": physical_id or str(event.get("PhysicalResourceId") or CREATE_FAILED),
        "StackId": event.get("StackId"),
        "RequestId": event.get("RequestId"),
        "LogicalResourceId": event.get("LogicalResourceId"),
        "NoEcho": False,
        "Data": dict(data or {}),
    }


def send(response_url: str, response: Mapping[str, Any], *, timeout: float = 10.0) -> None:
    """PUT the answer to CloudFormation's pre-signed URL (no content type: the URL is signed without one)."""
    body = json.dumps(response).encode()
    request = urllib.request.Request(
        response_url, data=body, method="PUT", headers={"Content-Type": "", "Content-Length": str(len(body))}
    )
    for attempt in range(1, RESPONSE_ATTEMPTS + 1):
        try:
            with urllib.request.urlopen(request, timeout=timeout) as delivered:
                delivered.read()
            return
        except (OSError, urllib.error.URLError) as error:
            logger.warning("answering CloudFormation failed", extra={"attempt": attempt, "error": str(error)})
            if attempt == RESPONSE_ATTEMPTS:
                raise
            time.sleep(attempt)
