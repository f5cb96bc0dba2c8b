"""Run the spate command line: ``python -m spate``."""

import sys

from spate._cli.main import main

sys.exit(main())
