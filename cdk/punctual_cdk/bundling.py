"""The Lambda code asset, packaged without Docker.

All the functions share one asset: the `scheduler` package (punctual-core's, wherever it is imported from: this
checkout's `functions/`, or the installed distribution in an app's environment) plus the exact versions of its
runtime dependencies in `runtime.lock` (one `name==version` for each of punctual-core's dependencies, which are
ranges: what an app installs the core beside), installed by the local pip as wheels built for the Lambda platform
(CPython 3.12 on manylinux aarch64). `--only-binary=:all:` makes pip refuse anything it would have to compile here,
so a wheel built for this machine can never slip into the asset.

The lock is this checkout's `runtime.lock`; the punctual-cdk wheel carries a copy of it (scripts/build-dist puts it
there), so a stack synthesized from the installed construct library ships the versions this repository tested.

CDK calls the local bundler only for stacks it is asked to bundle: the CLI bundles the stacks it deploys
or synthesizes, and tests pass the context ``"aws:cdk:bundling-stacks": []`` so no pip download runs.
"""

from __future__ import annotations

import importlib.util
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

#: The Lambda runtime the asset is built for; `punctual_cdk.lambda_function` pins the same one.
PYTHON_VERSION = "3.12"
#: pip platform tag matching Lambda's ARM_64 architecture (Amazon Linux 2023, glibc 2.34 >= 2.17).
PIP_PLATFORM = "manylinux2014_aarch64"
#: The package the handlers live in (`scheduler.handlers.*.lambda_handler`).
PACKAGE = "scheduler"
#: The distribution that ships it, whose dependencies the lock pins.
CORE_DISTRIBUTION = "punctual-core"
#: A checkout: this package is `cdk/punctual_cdk`, the core's pyproject.toml and the lock are at the root.
CHECKOUT_ROOT = Path(__file__).resolve().parent.parent.parent
#: The wheel's copy of the lock (package data), else the checkout's.
PACKAGED_LOCK = Path(__file__).resolve().with_name("runtime.lock")
LOCK = PACKAGED_LOCK if PACKAGED_LOCK.is_file() else CHECKOUT_ROOT / "runtime.lock"
#: Never shipped: caches and tests. Also keeps them out of the asset hash.
ASSET_EXCLUDE = ("**/__pycache__", "**/*.pyc", "tests", "**/tests", "**/.mypy_cache")
_COPY_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "tests", ".mypy_cache")


def package_dir() -> Path:
    """Where the `scheduler` package is imported from: the folder the asset copies."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(
            f"the functions' package {PACKAGE!r} is not importable: install {CORE_DISTRIBUTION} (punctual-cdk "
            "requires it) or, in a checkout, put functions/ on the path"
        )
    return Path(spec.origin).parent


def core_pyproject() -> Path | None:
    """The core's pyproject.toml in a checkout whose `scheduler` package is the one imported; None when installed."""
    pyproject = CHECKOUT_ROOT / "pyproject.toml"
    in_checkout = pyproject.is_file() and package_dir() == CHECKOUT_ROOT / "functions" / PACKAGE
    return pyproject if in_checkout else None


class LockMismatch(ValueError):
    """runtime.lock does not pin exactly punctual-core's runtime dependencies, each inside its range."""


def declared_dependencies(pyproject: Path | None = None) -> tuple[str, list[Requirement]]:
    """Where punctual-core's runtime dependencies are declared, and they: `pyproject`'s `[project].dependencies`
    (by default the checkout's, when its `scheduler` is the one imported), else the installed distribution's."""
    pyproject = pyproject or core_pyproject()
    if pyproject is not None:
        with pyproject.open("rb") as file:
            return pyproject.name, [Requirement(r) for r in tomllib.load(file)["project"].get("dependencies", ())]
    try:
        required = metadata.requires(CORE_DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        raise LockMismatch(f"{CORE_DISTRIBUTION} is not installed: install it (punctual-cdk requires it)") from None
    # Its extras (`dev`) carry a marker; the functions need only the unconditional requirements.
    return CORE_DISTRIBUTION, [r for r in map(Requirement, required) if r.marker is None]


def runtime_dependencies(pyproject: Path | None = None, lock: Path = LOCK) -> tuple[str, ...]:
    """The pins of `lock` (`name==version`, in its order): what the functions import at run time, exactly. Each of
    punctual-core's dependencies (`declared_dependencies`) has one, inside its range, and the lock pins nothing
    else; `LockMismatch` says which line to change otherwise."""
    source, requirements = declared_dependencies(pyproject)
    declared = {canonicalize_name(r.name): r for r in requirements}
    pins: dict[str, str] = {}
    problems: list[str] = []
    for number, raw in enumerate(lock.read_text().splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            pin = Requirement(line)
        except InvalidRequirement:
            pin = None
        specifiers = list(pin.specifier) if pin is not None else []
        if pin is None or len(specifiers) != 1 or specifiers[0].operator != "==" or pin.extras or pin.marker:
            problems.append(f"{lock.name}:{number}: '{line}' is not one exact pin (name==version)")
            continue
        name, version = canonicalize_name(pin.name), specifiers[0].version
        wanted = declared.get(name)
        if wanted is None:
            problems.append(f"{lock.name}:{number}: {pin.name} is not a runtime dependency in {source}")
        elif not wanted.specifier.contains(version, prereleases=True):
            problems.append(f"{lock.name}:{number}: {pin.name}=={version} is outside {source}'s '{wanted}'")
        pins[name] = line
    problems += [f"{lock.name} pins no version of {r}" for name, r in declared.items() if name not in pins]
    if problems:
        raise LockMismatch("; ".join(problems))
    return tuple(pins.values())


def pip_install_command(
    output_dir: str | Path,
    dependencies: Sequence[str],
    *,
    python: str = sys.executable,
    pip_platform: str = PIP_PLATFORM,
) -> list[str]:
    """The pip command line that installs `dependencies` into `output_dir` for the Lambda platform."""
    return [
        python,
        "-m",
        "pip",
        "install",
        "--platform",
        pip_platform,
        "--only-binary=:all:",
        "--python-version",
        PYTHON_VERSION,
        "--implementation",
        "cp",
        "--target",
        str(output_dir),
        # Byte-code compiled by this machine's Python would not match the 3.12 runtime anyway.
        "--no-compile",
        "--disable-pip-version-check",
        "--no-input",
        "--quiet",
        *dependencies,
    ]


@jsii.implements(ILocalBundling)
class LocalPipBundler:
    """Builds the asset on this machine with pip; CDK calls `try_bundle` instead of starting Docker."""

    def __init__(
        self, dependencies: Sequence[str], *, source_dir: Path | None = None, pip_platform: str = PIP_PLATFORM
    ) -> None:
        self._dependencies = tuple(dependencies)
        #: The `scheduler` package's folder, copied into the asset as `scheduler/`.
        self._source_dir = source_dir or package_dir()
        self._pip_platform = pip_platform

    def try_bundle(self, output_dir: str, *, image: DockerImage, **docker_options: Any) -> bool:
        """Install the dependencies, then copy the package over them. Returning False would make CDK
        fall back to Docker; a failure here is a real error (no network, a missing wheel), so raise it.

        (jsii passes the BundlingOptions struct as keyword arguments; the Docker ones do not apply here.)
        """
        del image, docker_options
        if self._dependencies:
            command = pip_install_command(output_dir, self._dependencies, pip_platform=self._pip_platform)
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise RuntimeError(
                    f"bundling the Lambda dependencies failed:\n  {' '.join(command)}\n{result.stdout}{result.stderr}"
                )
        # Copied last so our package wins over any same-named path a dependency might ship.
        shutil.copytree(self._source_dir, Path(output_dir) / PACKAGE, ignore=_COPY_IGNORE, dirs_exist_ok=True)
        return True


def function_code(dependencies: Sequence[str] | None = None, *, pip_platform: str = PIP_PLATFORM) -> lambda_.Code:
    """The shared asset for every function. One `Code` object, bound once per stack, so the stack has a
    single asset however many functions use it.

    `pip_platform` is the Lambda platform; only a local emulator that runs the functions on this machine
    wants another (this machine's). The asset hash does not cover it: build such an asset into its own
    cloud assembly directory (`cdk --output`), or it would be taken for the Lambda one, and vice versa."""
    deps = runtime_dependencies() if dependencies is None else tuple(dependencies)
    source = package_dir()
    # The Docker command is the fallback the CDK API requires next to a local bundler; it also carries
    # the dependency list into the asset hash, so changing a pin in runtime.lock re-bundles (the
    # source hash alone covers only the package).
    docker_command = (
        f"pip install --no-compile --target /asset-output {shlex.join(deps)} && "
        f"cp -r /asset-input /asset-output/{PACKAGE}"
    )
    return lambda_.Code.from_asset(
        str(source),
        exclude=list(ASSET_EXCLUDE),
        bundling=BundlingOptions(
            image=DockerImage.from_registry(f"public.ecr.aws/sam/build-python{PYTHON_VERSION}"),
            platform="linux/arm64",
            command=["bash", "-c", docker_command],
            local=LocalPipBundler(deps, source_dir=source, pip_platform=pip_platform),
        ),
    )
