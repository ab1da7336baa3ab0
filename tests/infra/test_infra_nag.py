"""cdk-nag (AWS Solutions pack): no finding is left unacknowledged, and each acknowledgment is specific."""

from __future__ import annotations

import pytest
from aws_cdk import App, Stack, Validations
from aws_cdk import aws_sqs as sqs
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct


def _violations(scope: IConstruct) -> list[str]:
    report = AwsSolutionsChecks(verbose=True).validate_scope(scope)
    return [
        f"{violation.rule_name} ({violation.severity}) at "
        + ", ".join(resource.construct_path for resource in violation.violating_resources)
        for violation in report.violations
    ]


def _acknowledgments(scope: IConstruct) -> dict[str, dict[str, str]]:
    """{construct path: {rule id: reason}} for every acknowledgment under `scope`."""
    found: dict[str, dict[str, str]] = {}
    for construct in scope.node.find_all():
        for entry in construct.node.metadata:
            if entry.type == Validations.ACKNOWLEDGED_RULES_METADATA_KEY:
                found.setdefault(construct.node.path, {}).update(entry.data)
    return found


@pytest.mark.parametrize("variant", ["default", "configured"])
def test_no_unacknowledged_findings(variant: str, request: pytest.FixtureRequest) -> None:
    synthesized = request.getfixturevalue(variant)
    assert _violations(synthesized.app) == []


def test_the_checks_do_find_problems() -> None:
    # Guards the test above against passing vacuously: a plain queue breaks several AWS Solutions rules.
    app = App()
    sqs.Queue(Stack(app, "Bare"), "Queue")
    assert any(finding.startswith("AwsSolutions-SQS") for finding in _violations(app))


def test_nothing_is_acknowledged_for_the_whole_app_or_stack(default) -> None:
    acknowledged = _acknowledgments(default.app)

    assert default.stack.node.path not in acknowledged
    assert "" not in acknowledged  # the app itself


def test_each_acknowledgment_names_its_rule_and_gives_a_reason(default) -> None:
    acknowledged = _acknowledgments(default.app)

    assert acknowledged, "expected the acknowledgments documented in the constructs"
    for path, rules in acknowledged.items():
        for rule, reason in rules.items():
            # aws-cdk-lib records them as "Annotation::<id>" (cdk-nag strips that prefix when it checks)
            assert rule.split("::", 1)[-1].startswith("AwsSolutions-"), (path, rule)
            assert len(reason) >= 60, (path, rule, reason)


def test_wildcard_acknowledgments_are_limited_to_table_indexes(default) -> None:
    # IAM5 is acknowledged finding by finding, never for the whole rule.
    for path, rules in _acknowledgments(default.app).items():
        for rule in rules:
            if rule.endswith("AwsSolutions-IAM5[Resource::*]"):
                # cloudwatch:GetMetricData takes only `*` (tests/infra/test_infra_iam.py: nothing else is on `*`)
                assert path.endswith("/Api/Api/Role"), (path, rule)
            elif "AwsSolutions-IAM5" in rule:
                assert rule.endswith(".Arn>/index/*]"), (path, rule)


def test_the_waf_acknowledgment_says_which_anonymous_traffic_reaches_the_function(default) -> None:
    # Anonymous GETs of the console's files reach the api function: the reason must not claim that none does
    (reason,) = [
        reason
        for rules in _acknowledgments(default.app).values()
        for rule, reason in rules.items()
        if rule.endswith("AwsSolutions-APIG3")
    ]

    assert "console" in reason and "console_throttle" in reason
    assert "every route but the health check requires SigV4" not in reason
