"""The CDK app that deploys punctual: one construct per concern, composed by `infra.stack`.

The Lambda code lives in `functions/` (package `scheduler`), and the tables and queues are built from
`scheduler.schema`, the same module the local stack provisions from, so the two cannot drift. That module
is importable under pytest (`pythonpath = ["functions", "."]`) and after `pip install -e .`, but not when
the CDK CLI runs `python -m infra.app` from a bare checkout; so make `functions/` importable here, once,
before any construct module imports the schema.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS_DIR = REPO_ROOT / "functions"

if str(FUNCTIONS_DIR) not in sys.path:
    sys.path.insert(0, str(FUNCTIONS_DIR))
