"""Test kit for spate users.

The store conformance suite, real-server fixtures, fault injection, a black-holing TCP proxy
for partitions on real servers (:mod:`spate_testing.blackhole`), and the fleet simulator with
its invariant checker.
"""

# The kit's parts are submodules, imported on demand: importing spate_testing stays light,
# and the conformance suite's pytest import happens only when it is used.
__all__ = ["blackhole", "conformance", "faults", "servers", "sim"]
