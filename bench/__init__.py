"""spate's benchmark suite (docs/performance.md): ``python -m bench`` or ``nox -s bench``."""
