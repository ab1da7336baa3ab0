"""cfn-lint over the synthesized templates."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CFN_LINT = Path(sys.executable).parent / "cfn-lint"
#: W3005 "DependsOn already enforced by GetAtt": CDK adds an explicit DependsOn from each function to its
#: role's policy; it is redundant, not wrong. Every other warning (and every error) fails the test.
IGNORED = ["W3005"]


@pytest.mark.parametrize("variant", ["default", "configured"])
def test_template_passes_cfn_lint(variant: str, request: pytest.FixtureRequest) -> None:
    template = request.getfixturevalue(variant).template_path

    result = subprocess.run(
        [str(CFN_LINT), "--regions", "us-east-1", "eu-central-1", "--ignore-checks", *IGNORED, "--", str(template)],
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode == 0, result.stdout + result.stderr
