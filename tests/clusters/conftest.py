"""Store clusters for the cluster tests: one 3-member etcd and one 3-server NATS per module."""

from __future__ import annotations

import pathlib
import sys

# The fleet helper sits next to these tests (tests/ is not a package).
sys.path.insert(0, str(pathlib.Path(__file__).parent))
