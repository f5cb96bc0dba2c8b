"""spate's benchmark suite (DESIGN §8): ``python -m bench`` or ``nox -s bench``."""
