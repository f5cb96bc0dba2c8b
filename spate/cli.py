"""The ``spate`` command line."""

from __future__ import annotations

import argparse
import sys

from spate._version import __version__


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``spate`` command."""
    parser = argparse.ArgumentParser(
        prog="spate",
        description="Share one job's work safely across a fleet of Trio workers.",
    )
    parser.add_argument("--version", action="version", version=f"spate {__version__}")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``spate`` console script; returns the exit status."""
    parser = build_parser()
    parser.parse_args(argv)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
