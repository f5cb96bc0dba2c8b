"""Third-party store adapters, found through the ``spate.stores`` entry-point group.

A distribution registers an adapter in its ``pyproject.toml``::

    [project.entry-points."spate.stores"]
    myscheme = "my_package.spate_adapter:store_from_url"

The entry point's name is the URL scheme; its object is a callable ``store_from_url(url) ->
Store``, the contract every bundled adapter module keeps. :func:`spate_stores.store_from_url`
asks here only for a scheme it does not know itself, so a bundled scheme can never be shadowed
(a registration of one is ignored with a :class:`ThirdPartySchemeIgnored` warning), and
installed distributions are read once per process.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Collection
from importlib.metadata import EntryPoint, entry_points

from spate import ConfigError, SpateError, StoreError
from spate.store import Store

GROUP = "spate.stores"
"""The entry-point group third-party store adapters register under."""


class ThirdPartySchemeIgnored(UserWarning):
    """A distribution registered a store adapter for a scheme spate bundles; it is ignored."""


def _distribution(entry: EntryPoint) -> str:
    dist = entry.dist
    return dist.name if dist is not None else "<unknown distribution>"


def _describe(entry: EntryPoint) -> str:
    return (
        f"the store adapter {entry.name!r} = {entry.value!r} registered under the "
        f"{GROUP!r} entry points by the distribution {_distribution(entry)!r}"
    )


@functools.cache
def _registered(builtin: frozenset[str]) -> dict[str, tuple[EntryPoint, ...]]:
    """Every installed registration by (lower-cased) scheme, bundled schemes left out."""
    found: dict[str, list[EntryPoint]] = {}
    for entry in entry_points(group=GROUP):
        scheme = entry.name.lower()
        if scheme in builtin:
            warnings.warn(
                f"{_describe(entry)} is ignored: {scheme}:// is a scheme spate bundles, and a "
                f"bundled scheme cannot be replaced; register the adapter under a scheme of "
                f"its own (say {_distribution(entry).lower()}+{scheme})",
                ThirdPartySchemeIgnored,
                stacklevel=4,
            )
            continue
        # One distribution seen twice (an editable install beside a wheel, a path listed
        # twice) is one registration.
        if all(e.value != entry.value for e in found.get(scheme, [])):
            found.setdefault(scheme, []).append(entry)
    return {scheme: tuple(entries) for scheme, entries in found.items()}


def installed_schemes(builtin: Collection[str]) -> tuple[str, ...]:
    """The schemes installed distributions add to the bundled ones, sorted."""
    return tuple(sorted(_registered(frozenset(builtin))))


@functools.cache
def _load(entry: EntryPoint) -> Callable[..., object]:
    try:
        loaded = entry.load()
    except Exception as exc:
        raise StoreError(
            f"{_describe(entry)} could not be loaded ({type(exc).__name__}: {exc}); "
            f"reinstall or upgrade {_distribution(entry)!r}, or uninstall it"
        ) from exc
    if not callable(loaded):
        raise StoreError(
            f"{_describe(entry)} names {type(loaded).__name__} object, not a callable "
            f"store_from_url(url) -> Store; {_distribution(entry)!r} is broken: upgrade or "
            f"uninstall it"
        )
    return loaded  # type: ignore[no-any-return]


def adapter_for(scheme: str, builtin: Collection[str]) -> Callable[..., Store] | None:
    """The ``store_from_url`` a third party registered for ``scheme``, or None if none did.

    Raises :class:`~spate.ConfigError` when two distributions claim the scheme, and
    :class:`~spate.StoreError` naming the distribution when its entry point cannot be loaded
    or is not callable. The returned callable raises :class:`~spate.StoreError` naming the
    distribution when the adapter fails unexpectedly or returns something that is not a
    :class:`spate.store.Store`. It takes the built-ins' ``read_only`` keyword, and passes it on
    to an adapter whose ``store_from_url`` accepts it (the contract asks only for the URL).
    """
    entries = _registered(frozenset(builtin)).get(scheme.lower())
    if not entries:
        return None
    if len(entries) > 1:
        names = ", ".join(repr(_distribution(e)) for e in entries)
        raise ConfigError(
            f"{scheme}:// store adapters are registered by more than one distribution "
            f"({names}); uninstall all but one"
        )
    entry = entries[0]
    constructor = _load(entry)

    takes_read_only = _accepts_read_only(constructor)

    def store_from_url(url: str, *, read_only: bool = False) -> Store:
        try:
            store = (
                constructor(url, read_only=True)
                if read_only and takes_read_only
                else constructor(url)
            )
        except SpateError:
            raise  # the adapter's own, already clear (a bad URL, a missing dependency)
        except Exception as exc:
            raise StoreError(
                f"{_describe(entry)} failed on a {scheme}:// URL ({type(exc).__name__}: "
                f"{exc}); report it to the maintainers of {_distribution(entry)!r}"
            ) from exc
        if not isinstance(store, Store):
            raise StoreError(
                f"{_describe(entry)} returned a {type(store).__name__}, which is not a "
                f"spate.store.Store; {_distribution(entry)!r} is broken or written for "
                f"another spate version: upgrade or uninstall it"
            )
        return store

    return store_from_url


def _accepts_read_only(constructor: Callable[..., object]) -> bool:
    # An adapter that also takes `read_only` gets it, so `spate status` writes nothing there
    # either; one that does not is opened as it always was.
    try:
        return "read_only" in inspect.signature(constructor).parameters
    except (TypeError, ValueError):
        return False


def forget() -> None:
    """Forget what was read of the installed distributions (after installing one, in tests)."""
    _registered.cache_clear()
    _load.cache_clear()
