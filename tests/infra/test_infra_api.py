"""The REST API: IAM auth on everything but the health check, proxy integration, throttling, logs."""

from __future__ import annotations

import json


def _methods(synthesized) -> dict[str, dict]:
    """Methods by "<HTTP method> <path>", the path rebuilt from the resource tree."""
    resources = synthesized.resources("AWS::ApiGateway::Resource")

    def path(resource_ref: dict) -> str:
        if "Fn::GetAtt" in resource_ref:  # the root resource
            return ""
        resource = resources[resource_ref["Ref"]]["Properties"]
        return f"{path(resource['ParentId'])}/{resource['PathPart']}"

    return {
        f"{method['Properties']['HttpMethod']} {path(method['Properties']['ResourceId'])}": method["Properties"]
        for method in synthesized.resources("AWS::ApiGateway::Method").values()
    }


PUBLIC = {"GET /v1/health", "GET /console", "GET /console/{proxy+}"}


def test_routes_are_health_the_console_files_and_a_v1_proxy(default) -> None:
    assert set(_methods(default)) == PUBLIC | {"ANY /v1/{proxy+}"}


def test_health_and_the_console_files_are_the_only_unauthenticated_methods(default) -> None:
    methods = _methods(default)

    for route, method in methods.items():
        assert method["AuthorizationType"] == ("NONE" if route in PUBLIC else "AWS_IAM"), route


def test_every_method_proxies_to_the_api_function(default) -> None:
    api_id, _ = default.function("api")

    for route, method in _methods(default).items():
        integration = method["Integration"]
        assert integration["Type"] == "AWS_PROXY", route
        assert integration["IntegrationHttpMethod"] == "POST", route
        assert api_id in json.dumps(integration["Uri"]), route


def test_api_function_may_be_invoked_only_by_this_api_stage(default) -> None:
    api_id, _ = default.function("api")
    rest_api_id = default.logical_id(default.punctual.api.rest_api)
    permissions = [
        permission["Properties"]
        for permission in default.resources("AWS::Lambda::Permission").values()
        if permission["Properties"]["FunctionName"] == {"Fn::GetAtt": [api_id, "Arn"]}
    ]

    assert len(permissions) == 4  # one per method (health, the console two, the proxy); no test-invoke ones
    for permission in permissions:
        assert permission["Principal"] == "apigateway.amazonaws.com"
        source = json.dumps(permission["SourceArn"])
        assert rest_api_id in source
        assert "test-invoke-stage" not in source


def test_stage_is_throttled_and_logged(default) -> None:
    (stage,) = default.resources("AWS::ApiGateway::Stage").values()
    props = stage["Properties"]

    assert props["StageName"] == "dev"
    assert props["MethodSettings"][0] == {
        "HttpMethod": "*",
        "ResourcePath": "/*",
        "ThrottlingRateLimit": 50,
        "ThrottlingBurstLimit": 100,
        "LoggingLevel": "ERROR",
        "DataTraceEnabled": False,  # request bodies are tenants' data
        "MetricsEnabled": True,
    }
    access_logs = default.logical_id(default.punctual.api.access_logs)
    assert access_logs in json.dumps(props["AccessLogSetting"]["DestinationArn"])
    log_line = json.loads(props["AccessLogSetting"]["Format"])
    assert {"requestId", "userArn", "httpMethod", "resourcePath", "status"} <= set(log_line)


def _console_settings(synthesized) -> dict[str, dict]:
    """The stage's method settings of the console's methods, by resource path."""
    (stage,) = synthesized.resources("AWS::ApiGateway::Stage").values()
    return {s["ResourcePath"]: s for s in stage["Properties"]["MethodSettings"] if s["ResourcePath"] != "/*"}


def test_the_console_has_a_throttle_of_its_own_within_the_stages(default) -> None:
    # The console's files are served to anyone, unsigned: their own throttle keeps anonymous traffic to a share
    settings = _console_settings(default)

    assert set(settings) == {"/~1console", "/~1console~1{proxy+}"}
    for setting in settings.values():
        assert setting == {
            "HttpMethod": "GET",
            "ResourcePath": setting["ResourcePath"],
            "ThrottlingRateLimit": 5,
            "ThrottlingBurstLimit": 20,
            "LoggingLevel": "ERROR",
            "DataTraceEnabled": False,
            "MetricsEnabled": True,
        }
    methods = _methods(default)
    assert {f"GET {path[1:].replace('~1', '/')}" for path in settings} == PUBLIC - {"GET /v1/health"} <= set(methods)


def test_the_console_throttle_is_configurable(synth) -> None:
    settings = _console_settings(synth({"console_throttle_rate_limit": 2, "console_throttle_burst_limit": 4}))

    assert {(s["ThrottlingRateLimit"], s["ThrottlingBurstLimit"]) for s in settings.values()} == {(2, 4)}


def test_throttling_and_stage_name_are_configurable(configured) -> None:
    (stage,) = configured.resources("AWS::ApiGateway::Stage").values()
    settings = stage["Properties"]["MethodSettings"][0]

    assert stage["Properties"]["StageName"] == "prod"
    assert settings["ThrottlingRateLimit"] == 250
    assert settings["ThrottlingBurstLimit"] == 500


def test_api_is_regional(default) -> None:
    (rest_api,) = default.resources("AWS::ApiGateway::RestApi").values()
    assert rest_api["Properties"]["EndpointConfiguration"] == {"Types": ["REGIONAL"]}


def test_logging_role_is_created_and_kept_only_when_asked(default, configured) -> None:
    (account,) = default.resources("AWS::ApiGateway::Account").values()
    role_id = account["Properties"]["CloudWatchRoleArn"]["Fn::GetAtt"][0]
    # Other APIs in the account may log through the same account-level setting.
    assert default.json["Resources"][role_id]["DeletionPolicy"] == "Retain"

    assert configured.resources("AWS::ApiGateway::Account") == {}
