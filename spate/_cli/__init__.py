"""The command line and the demo behind ``spate demo``.

Private: reached through the ``spate`` console script and ``python -m spate``.
"""
