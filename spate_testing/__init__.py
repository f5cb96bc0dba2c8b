"""Test kit for spate users.

The store conformance suite, real-server fixtures, fault injection, a black-holing TCP proxy
for partitions on real servers (:mod:`spate_testing.blackhole`), and the fleet simulator with
its invariant checker.
"""
