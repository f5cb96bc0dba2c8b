"""Run the spate command line: ``python -m spate``."""

import sys

from spate.cli import main

sys.exit(main())
