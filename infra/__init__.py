"""This repository's CDK app: the `punctual-<stage>` stack, made of the construct library `punctual_cdk` (cdk/).

The construct library and the Lambda code it packages (`functions/`, package `scheduler`) are importable under
pytest and in `.venv` (editable installs), but not when the CDK CLI runs `python -m infra.app` from a bare
checkout; so make both folders importable here, once, before the app imports them.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS_DIR = REPO_ROOT / "functions"
CDK_DIR = REPO_ROOT / "cdk"

for _folder in (CDK_DIR, FUNCTIONS_DIR):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))
