"""``python -m spate_testing.sim``: see :mod:`spate_testing.sim._cli`."""

import sys

from spate_testing.sim._cli import main

sys.exit(main())
