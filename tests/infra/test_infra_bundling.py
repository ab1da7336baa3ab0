"""Lambda packaging without Docker: the pip command line, the local bundler, the asset contents."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest
from aws_cdk import App, DockerImage, Duration, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from infra import REPO_ROOT
from punctual_cdk import bundling
from punctual_cdk.bundling import (
    PIP_PLATFORM,
    PYTHON_VERSION,
    LocalPipBundler,
    LockMismatch,
    core_pyproject,
    declared_dependencies,
    function_code,
    package_dir,
    pip_install_command,
    runtime_dependencies,
)
from punctual_cdk.lambda_function import ARCHITECTURE, RUNTIME

IMAGE = DockerImage.from_registry("public.ecr.aws/sam/build-python3.12")


def _flag_value(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_pip_command_installs_lambda_platform_wheels_only() -> None:
    # When the bundler builds its pip command line
    command = pip_install_command("/asset-output", ["boto3==1.44.8", "pydantic==2.14.4"], python="/venv/python")

    # Then pip installs wheels for CPython 3.12 on manylinux aarch64 into the asset folder, nothing built here
    assert command[:4] == ["/venv/python", "-m", "pip", "install"]
    assert _flag_value(command, "--platform") == "manylinux2014_aarch64"
    assert "--only-binary=:all:" in command
    assert _flag_value(command, "--python-version") == "3.12"
    assert _flag_value(command, "--implementation") == "cp"
    assert _flag_value(command, "--target") == "/asset-output"
    assert "--no-compile" in command
    assert command[-2:] == ["boto3==1.44.8", "pydantic==2.14.4"]


def test_bundling_target_matches_the_lambda_runtime() -> None:
    assert RUNTIME.name == f"python{PYTHON_VERSION}"
    assert ARCHITECTURE.name == "arm64"
    assert PIP_PLATFORM.endswith("_aarch64")


def test_the_asset_installs_the_locks_exact_pins_and_apps_get_ranges() -> None:
    with (REPO_ROOT / "pyproject.toml").open("rb") as file:
        declared = [Requirement(r) for r in tomllib.load(file)["project"]["dependencies"]]
    pins = [Requirement(r) for r in runtime_dependencies()]

    # The asset: one exact version of each runtime dependency, inside the range pyproject.toml declares
    assert declared  # the functions cannot run on the standard library alone
    assert sorted(canonicalize_name(p.name) for p in pins) == sorted(canonicalize_name(d.name) for d in declared)
    assert all([s.operator for s in p.specifier] == ["=="] for p in pins)
    # An app that installs the core (the test scheduler) gets ranges, never an exact pin that would move its own
    assert not [str(d) for d in declared if any(s.operator in ("==", "===") for s in d.specifier)]


@pytest.mark.parametrize(
    ("lock", "problem"),
    [
        ("boto3==1.44.8\n", "pins no version of pydantic"),
        ("boto3==1.44.8\npydantic==1.10.0\n", "pydantic==1.10.0 is outside"),
        ("boto3==1.44.8\npydantic==2.14.4\nrequests==2.32.0\n", "requests is not a runtime dependency"),
        ("boto3>=1.44\npydantic==2.14.4\n", "is not one exact pin"),
    ],
)
def test_a_lock_that_strays_from_the_declared_dependencies_is_refused(tmp_path: Path, lock: str, problem: str) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["boto3>=1.34,<2", "pydantic>=2.6,<3"]\n')
    (tmp_path / "runtime.lock").write_text(lock)

    with pytest.raises(LockMismatch, match=problem):
        runtime_dependencies(pyproject, tmp_path / "runtime.lock")


def test_a_lock_that_matches_gives_its_pins_in_order(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["boto3>=1.34,<2", "Pydantic>=2.6,<3"]\n')
    (tmp_path / "runtime.lock").write_text("# exact\npydantic==2.14.4  # models\n\nboto3==1.44.8\n")

    assert runtime_dependencies(pyproject, tmp_path / "runtime.lock") == ("pydantic==2.14.4", "boto3==1.44.8")


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """The `scheduler` package's folder (in a functions/ folder beside the local stack), with caches and tests."""
    root = tmp_path / "functions"
    (root / "scheduler" / "handlers").mkdir(parents=True)
    (root / "scheduler" / "__init__.py").write_text("")
    (root / "scheduler" / "handlers" / "api.py").write_text("def lambda_handler(event, context): ...\n")
    (root / "scheduler" / "__pycache__").mkdir()
    (root / "scheduler" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"")
    (root / "scheduler" / "tests").mkdir()
    (root / "scheduler" / "tests" / "test_x.py").write_text("")
    (root / "scheduler_local").mkdir()
    (root / "scheduler_local" / "__init__.py").write_text("")
    return root / "scheduler"


def test_local_bundler_runs_pip_then_copies_only_the_package(source: Path, tmp_path: Path, monkeypatch) -> None:
    # Given a bundler whose pip call is recorded instead of run
    calls: list[list[str]] = []

    def fake_run(command, **kwargs):
        calls.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    output = tmp_path / "asset-output"
    output.mkdir()

    # When CDK asks it to bundle
    bundled = LocalPipBundler(["croniter==7.0.0"], source_dir=source).try_bundle(str(output), image=IMAGE)

    # Then it installed the dependencies with the Lambda-platform command and copied the package alone
    assert bundled is True
    assert calls == [pip_install_command(output, ["croniter==7.0.0"])]
    assert (output / "scheduler" / "handlers" / "api.py").is_file()
    assert not (output / "scheduler_local").exists()
    assert not (output / "scheduler" / "__pycache__").exists()
    assert not (output / "scheduler" / "tests").exists()


def test_local_bundler_fails_loudly_when_pip_fails(source: Path, tmp_path: Path, monkeypatch) -> None:
    # Returning False would make CDK fall back to Docker, which this project does not need or have.
    monkeypatch.setattr(
        subprocess, "run", lambda command, **kwargs: subprocess.CompletedProcess(command, 1, "", "no wheel")
    )
    with pytest.raises(RuntimeError, match="no wheel"):
        LocalPipBundler(["croniter==7.0.0"], source_dir=source).try_bundle(str(tmp_path), image=IMAGE)


def test_the_asset_is_the_imported_scheduler_package_and_the_core_declares_what_the_lock_pins(monkeypatch) -> None:
    # In this checkout the functions' package is functions/scheduler and the core's pyproject.toml is read
    assert package_dir() == REPO_ROOT / "functions" / "scheduler"
    assert core_pyproject() == REPO_ROOT / "pyproject.toml"
    # Installed (an app's environment: no checkout around the package), the distribution's metadata declares the
    # same ranges, without its extras
    monkeypatch.setattr(bundling, "core_pyproject", lambda: None)
    source, installed = declared_dependencies()
    assert source == "punctual-core"
    assert sorted(map(str, installed)) == sorted(map(str, declared_dependencies(REPO_ROOT / "pyproject.toml")[1]))
    assert runtime_dependencies() == runtime_dependencies(REPO_ROOT / "pyproject.toml")


def test_all_functions_share_one_asset(default) -> None:
    keys = {f["Properties"]["Code"]["S3Key"] for f in default.resources("AWS::Lambda::Function").values()}
    assert len(keys) == 1


def _asset_key(dependencies: tuple[str, ...]) -> str:
    app = App(context={"aws:cdk:bundling-stacks": []})
    stack = Stack(app, "AssetHash")
    lambda_.Function(
        stack,
        "Function",
        runtime=RUNTIME,
        handler="scheduler.handlers.api.lambda_handler",
        code=function_code(dependencies),
        timeout=Duration.seconds(3),
    )
    (function,) = Template.from_stack(stack).find_resources("AWS::Lambda::Function").values()
    return function["Properties"]["Code"]["S3Key"]


def test_changing_a_pin_changes_the_asset() -> None:
    # The source hash covers functions/ only; without the pins in it a new pin would redeploy stale code.
    assert _asset_key(("croniter==7.0.0",)) != _asset_key(("croniter==7.0.1",))


def test_every_module_the_functions_import_is_in_the_runtime_dependencies() -> None:
    """The Lambda asset holds `scheduler` and the runtime dependencies alone: a module the functions import that
    only the dev venv has (a test tool's dependency) would fail every function at start-up on AWS."""
    import ast
    import re
    import sys
    from importlib import metadata

    def closure(names: set[str]) -> set[str]:
        seen: set[str] = set()
        todo = [metadata.distribution(n).metadata["Name"].lower().replace("_", "-") for n in names]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            for requirement in metadata.requires(name) or []:
                if "extra ==" not in requirement:
                    todo.append(re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0].lower().replace("_", "-"))
        return seen

    declared = {re.split(r"[<>=!~\[]", d, maxsplit=1)[0] for d in runtime_dependencies()}
    shipped = closure(declared)
    providers = metadata.packages_distributions()
    imported: set[str] = set()
    for path in (REPO_ROOT / "functions" / "scheduler").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    third_party = {m for m in imported if m not in sys.stdlib_module_names and m not in {"scheduler", "__future__"}}
    typing_only = {"mypy_boto3_dynamodb", "mypy_boto3_sqs"}  # under TYPE_CHECKING only
    missing = {
        module: providers.get(module)
        for module in third_party - typing_only
        if not {d.lower().replace("_", "-") for d in providers.get(module, [module])} & shipped
    }
    assert not missing, f"imported by the functions but not shipped in the Lambda asset: {missing}"
