"""The coordination machine: state and rules with no I/O (see docs/architecture.md).

Nothing here imports Trio, the runtime or a store client; ``tests/test_import_graph.py`` holds
that. :mod:`spate._core.machine` wires the components; start reading there.
"""
