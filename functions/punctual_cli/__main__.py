"""`python -m punctual_cli`: the `punctual` command without the console script installed."""

import sys

from punctual_cli.main import main

sys.exit(main())
