"""Griffe extension: render spate's reST-flavoured docstrings as Markdown for mkdocstrings.

spate's docstrings use the reST idioms Python programmers read in editors and ``help()``:
cross-reference roles (``:class:`~spate.store.Store```), ``::`` before literal blocks, and
definition lists (a term, then an indented paragraph). mkdocstrings renders Markdown, so this
extension rewrites those three idioms before the docstrings are parsed:

- a role becomes an *optional* autorefs link: a link when the target is documented on the
  site, plain code when it is not (no broken-link warnings for ``trio`` or private names);
- ``text::`` becomes ``text:`` (the indented block after it is already a Markdown code block);
- ``Term`` + indented paragraph becomes a Markdown definition list (``def_list`` extension).
"""

from __future__ import annotations

import re
from html import escape
from typing import Any

import griffe

_ROLE = re.compile(
    r":(?:py:)?(?:class|func|meth|attr|mod|data|exc|obj|const|type):`(?P<tilde>~?)(?P<target>[^`]+)`"
)


def _resolve(obj: griffe.Object, target: str) -> str:
    head, _, rest = target.lstrip(".").partition(".")
    try:
        path = obj.resolve(head)
    except Exception:  # best effort: an unresolvable name stays as written
        return target
    return f"{path}.{rest}" if rest else path


def _roles(obj: griffe.Object, text: str) -> str:
    def link(match: re.Match[str]) -> str:
        target = match["target"].strip()
        title = target.rsplit(".", 1)[-1] if match["tilde"] else target.lstrip(".")
        identifier = _resolve(obj, target)
        return (
            f'<autoref identifier="{escape(identifier)}" optional>'
            f"<code>{escape(title)}</code></autoref>"
        )

    return _ROLE.sub(link, text)


def _literal_block_markers(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        if line.strip() == "::":
            continue
        out.append(line[:-1] if line.endswith("::") else line)
    return out


def _definition_lists(lines: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        is_term = (
            line.strip()
            and not line.startswith(" ")
            and not line.rstrip().endswith(":")
            and not line.lstrip().startswith(("-", "*", "|", "```"))
            and (i == 0 or not lines[i - 1].strip())
            and i + 1 < len(lines)
            and lines[i + 1].startswith("    ")
            and lines[i + 1].strip()
        )
        if not is_term:
            out.append(line)
            i += 1
            continue
        out.append(line)
        out.append(":   " + lines[i + 1].strip())
        i += 2
        while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
            if not lines[i].strip() and (i + 1 >= len(lines) or not lines[i + 1].startswith(" ")):
                break
            out.append(lines[i])
            i += 1
    return out


class RstDocstrings(griffe.Extension):
    """Rewrite reST roles, literal-block markers and definition lists into Markdown."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        """Rewrite ``obj``'s docstring once the object tree is complete (names resolve)."""
        if obj.docstring is None:
            return
        lines = _literal_block_markers(obj.docstring.value.splitlines())
        lines = _definition_lists(lines)
        obj.docstring.value = _roles(obj, "\n".join(lines))
