"""A report as plain data: the builders (classify, analyze, compare) fill it, the backends (terminal,
markdown) draw it. Keeping the two apart means every format shows the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Table:
    title: str
    columns: list[str]  # header text; a "\n" splits a header over two lines in the terminal
    rows: list[list[str]]
    align: str = ""  # one letter per column, "l" (text) or "r" (numbers); default: first column l, rest r
    note: str = ""

    def alignments(self) -> list[str]:
        given = list(self.align)
        return [given[i] if i < len(given) else ("l" if i == 0 else "r") for i in range(len(self.columns))]


@dataclass
class Lines:
    title: str
    lines: list[str]


@dataclass
class Strip:
    """One step drawn as busy/idle cells along time. The backend picks the width and the characters
    (rich: '█' busy, '·' idle; plain: '#' and '.'). Strips in one block share a time scale."""

    label: str
    busy: list[tuple[float, float]]  # busy intervals as fractions of the shared scale, sorted, merged
    length: float  # this step's length as a fraction of the shared scale (the longest step is 1)
    caption: str

    def cells(self, width: int) -> list[bool]:
        """Rasterise to `width` cells for the whole scale; a cell is busy when busy for half of it or more."""
        n = max(0, min(width, round(self.length * width)))
        covered = [0.0] * n
        for start, end in self.busy:
            lo, hi = max(0.0, start * width), min(float(n), end * width)
            cell = int(lo)
            while cell < n and cell < hi:
                covered[cell] += min(hi, cell + 1) - max(lo, cell)
                cell += 1
        return [c >= 0.5 for c in covered]


@dataclass
class Strips:
    title: str
    strips: list[Strip]
    note: str = ""


Block = Table | Lines | Strips


@dataclass
class Report:
    title: str
    fields: list[tuple[str, str]] = field(default_factory=list)  # the header: name, value
    notices: list[str] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)
