"""Short kernel names for tables: demangled C++ (CUDA, ROCm/HIP) names are often hundreds of characters long.

``short_kernel_name`` is pure: no I/O, no demangling (names arrive demangled from the traces; a still-mangled
``_Z...`` name is only cut at the width).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

ELLIPSIS = "…"
DEFAULT_NAME_WIDTH = 60  # analyze tables (--name-width)
OPENERS = {"<": ">", "(": ")", "[": "]", "{": "}"}
CLOSERS = {close: open_ for open_, close in OPENERS.items()}
_SPACES = re.compile(r"\s+")
_OPERATOR_SYMBOLS = "<>=()[]"
NOT_FUNCTIONS = ("Memcpy", "Memset")  # copy and set rows ("Memcpy HtoD (Pageable -> Device)") are not C++ names


@dataclass
class _Group:
    """A bracketed part of a name: ``open`` + items + ``close`` (``close`` empty when the name ends inside it)."""

    open: str
    items: list[str | _Group] = field(default_factory=list)
    close: str = ""

    def text(self) -> str:
        return self.open + "".join(i if isinstance(i, str) else i.text() for i in self.items) + self.close


def _parse(name: str) -> list[str | _Group]:
    """Split a name into text and bracket groups. ``operator<``, ``operator()`` and ``->`` are text; a closer
    that matches no open bracket is text too."""
    root = _Group("")
    stack = [root]
    buf: list[str] = []

    def flush() -> None:
        if buf:
            stack[-1].items.append("".join(buf))
            buf.clear()

    i, n = 0, len(name)
    while i < n:
        c = name[i]
        if c in OPENERS or c in CLOSERS:
            before = "".join(buf).rstrip()
            if before.endswith("operator") and (len(before) == 8 or not (before[-9].isalnum() or before[-9] == "_")):
                j = i
                while j < n and name[j] in _OPERATOR_SYMBOLS and j - i < 3:
                    j += 1
                    if name[i:j] in ("()", "[]"):
                        break
                buf.append(name[i:j])
                i = j
                continue
            if c == ">" and buf and buf[-1].endswith("-"):
                buf.append(c)
            elif c in OPENERS:
                flush()
                group = _Group(c)
                stack[-1].items.append(group)
                stack.append(group)
            elif len(stack) > 1 and stack[-1].open == CLOSERS[c]:
                flush()
                stack[-1].close = c
                stack.pop()
            else:
                buf.append(c)
        else:
            buf.append(c)
        i += 1
    flush()
    return root.items


def _is_anonymous(item: str | _Group) -> bool:
    return (
        isinstance(item, _Group) and item.open == "(" and "".join(map(str, item.items)).strip() == "anonymous namespace"
    )


def _elided(group: _Group) -> str:
    """``<…>``, ``(…)``, ``[…]`` (``()`` and ``<>`` stay as they are); a ``{lambda(int)#1}`` keeps its text with
    its own brackets elided."""
    if not group.items:
        return group.open + group.close
    if group.open == "{":
        return "{" + _render_items(group.items, nested=True) + group.close
    if _is_anonymous(group):
        return group.text()
    return group.open + ELLIPSIS + (group.close or OPENERS[group.open])


def _render_items(items: list[str | _Group], *, nested: bool) -> str:
    """Items as text; with ``nested``, every group in them elided."""
    return "".join(i if isinstance(i, str) else (_elided(i) if nested else i.text()) for i in items)


def _render_group(group: _Group, level: str) -> str:
    """A top-level group: ``full``, ``nested`` (its own groups elided), or ``elided`` (``<…>``)."""
    if level == "full":
        return group.text()
    if level == "nested" and group.open != "{":
        return group.open + _render_items(group.items, nested=True) + (group.close or OPENERS[group.open])
    return _elided(group)


@dataclass
class _Parts:
    name: list[str | _Group]  # the (qualified) function name with its template arguments
    params: _Group | None
    suffix: list[str | _Group]  # after the parameter list: "::{lambda()#1}" and the like


def _split(items: list[str | _Group]) -> _Parts:
    at = next(
        (
            k
            for k, item in enumerate(items)
            if isinstance(item, _Group) and item.open == "(" and not _is_anonymous(item)
        ),
        None,
    )
    prefix = items if at is None else items[:at]
    params = items[at] if at is not None else None
    if not isinstance(params, _Group):
        params = None
    suffix = [] if at is None else items[at + 1 :]
    # the return type: everything up to the last space outside brackets before the name
    prefix = list(prefix)
    if prefix and isinstance(prefix[0], str):
        prefix[0] = prefix[0].lstrip()
    if prefix and isinstance(prefix[-1], str):
        prefix[-1] = prefix[-1].rstrip()
    for k in range(len(prefix) - 1, -1, -1):
        item = prefix[k]
        if isinstance(item, str) and " " in item:
            cut = item.rsplit(" ", 1)[1]
            prefix = [cut, *prefix[k + 1 :]] if cut else prefix[k + 1 :]
            break
    # after the parameters: keep a scope that goes on ("::{lambda(int)#1}"); drop " const", " [clone .kd]"
    kept: list[str | _Group] = []
    if suffix and isinstance(suffix[0], str) and suffix[0].startswith("::"):
        for item in suffix:
            if isinstance(item, _Group) and item.open == "[":
                break
            kept.append(item)
        while kept and isinstance(kept[-1], str) and kept[-1].rstrip().endswith(" const"):
            kept[-1] = kept[-1].rstrip()[: -len(" const")]
    return _Parts(prefix, params, kept)


def _candidates(parts: _Parts) -> list[str]:
    """Ever shorter renderings, in the order tried."""
    out: list[str] = []

    def render(templates: str, params: str, qualifiers: int | None = None) -> str:
        name = "".join(i.strip() if isinstance(i, str) else _render_group(i, templates) for i in parts.name)
        if qualifiers is not None:
            pieces = name.split("::")
            name = "::".join(pieces[-qualifiers - 1 :]) if qualifiers < len(pieces) else name
        if parts.params is not None:
            if params == "full":
                name += parts.params.text()
            elif params == "elided":
                name += _elided(parts.params)
        if parts.suffix and params != "none":
            name += "".join(i if isinstance(i, str) else _render_group(i, "nested") for i in parts.suffix)
        return name

    out.append(render("full", "full"))
    out.append(render("full", "elided"))
    out.append(render("nested", "elided"))
    out.append(render("elided", "elided"))
    depth = render("elided", "elided").count("::")
    for keep in range(depth - 1, -1, -1):
        out.append(render("elided", "elided", keep))
    out.append(render("elided", "none", 0))
    bare = out[-1]
    if bare.endswith(">") and "<" in bare:  # the template arguments too, as a last resort before the cut
        out.append(bare[: bare.rfind("<")] if bare.endswith("<" + ELLIPSIS + ">") else bare)
    return out


def short_kernel_name(name: str, width: int) -> str:
    """``name`` shortened to at most ``width`` characters for a table column.

    In order, until it fits: whitespace collapsed and the return type dropped (``void at::native::k<…>(…)`` ->
    ``at::native::k<…>(…)``), the parameter list elided as ``(…)``, nested template arguments elided, all
    template arguments elided as ``<…>``, namespace qualifiers dropped from the left, the ``(…)`` dropped; a
    name still too long (a plain ROCm ``Cijk_...`` name, a mangled one) ends in ``…`` at the width.
    """
    if width <= 0:
        return ""
    text = _SPACES.sub(" ", name).strip()
    if text.startswith(NOT_FUNCTIONS) or text.startswith("_Z"):
        candidates = [text]
    else:
        candidates = _candidates(_split(_parse(text)))
    for candidate in candidates:
        if len(candidate) <= width:
            return candidate
    last = candidates[-1]
    return last[: width - 1] + ELLIPSIS
