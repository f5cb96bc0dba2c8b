"""Test kit for spate users.

The store conformance suite, real-server fixtures, fault injection, and the fleet
simulator with its invariant checker.
"""
