"""The distribution spate installs as, and how error messages say to install an extra.

The import name is ``spate``; the distribution is ``trio-spate``, because ``spate`` on PyPI is
an unrelated project (``pip install spate`` fetches it). Until the first release of
``trio-spate`` the extras install from a clone of this repository (``pip install '.[etcd]'``
in it), so a hint names both forms.
"""

from __future__ import annotations

__all__ = ["DISTRIBUTION", "install_hint"]

DISTRIBUTION = "trio-spate"
"""The distribution name (``[project] name`` in ``pyproject.toml``; a test pins the two)."""


def install_hint(extra: str) -> str:
    """The command that installs ``extra``: from PyPI by the distribution's name, or a clone."""
    return f"pip install '{DISTRIBUTION}[{extra}]' (in a clone of spate: pip install '.[{extra}]')"
