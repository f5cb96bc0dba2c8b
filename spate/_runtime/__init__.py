"""The Trio runtime around the machine: the loop task, the driver, pumps, timers, sessions.

It feeds :mod:`spate._core.machine` its inputs and performs its effects (see
docs/architecture.md); :mod:`spate._runtime.loop` is where to start reading.
"""
