"""The installed version of spate."""

__version__ = "0.1.0"
