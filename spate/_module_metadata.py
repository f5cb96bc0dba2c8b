"""Make public names report their public home, as trio's ``fixup_module_metadata`` does.

Every public class and function is defined in a private module and re-exported by a public
one, so by default it reports the private home: ``<class 'spate._errors.Fenced'>`` in a repr,
``spate._errors.Fenced: ...`` at the foot of a traceback. :func:`fixup_module_metadata`
rewrites ``__module__`` of each re-exported object (and of the methods and nested classes a
class defines) to the public module's name, which is also where ``pickle`` then finds it.

``__module__`` is also where ``typing.get_type_hints`` looks up a class's string annotations
(``from __future__ import annotations``). An attrs class's field types are resolved against
its defining module first where they can be (not where they name a type imported only for
type checkers), so attrs and cattrs keep finding them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs


def _private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split("."))


def fixup_module_metadata(public: str, namespace: dict[str, Any], names: Iterable[str]) -> None:
    """Give each of ``names`` in ``namespace`` the module ``public``.

    Only objects a private module of the same package defined are changed (with the methods
    and nested classes of a class); builtins, constants and other packages' objects are not.
    """
    root = public.split(".")[0]
    seen: set[int] = set()

    def fix(obj: object) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        home = getattr(obj, "__module__", None)
        if not isinstance(home, str) or home.split(".")[0] != root or not _private(home):
            return  # a builtin, a constant, someone else's, or already public
        if not isinstance(obj, type) and not callable(obj):
            return
        if isinstance(obj, type) and attrs.has(obj):
            try:
                attrs.resolve_types(obj)  # against the defining module, before it is forgotten
            except NameError:
                pass  # names a type imported for type checkers only: nothing resolves it
        try:
            obj.__module__ = public
        except (AttributeError, TypeError):  # pragma: no cover - a C type or a frozen object
            return
        if isinstance(obj, type):
            for member in vars(obj).values():
                fix(getattr(member, "__func__", member))  # class and static methods too

    for name in names:
        fix(namespace[name])
