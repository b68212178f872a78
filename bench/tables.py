"""Plain aligned text tables and short strings, for what demos and benchmarks print."""

from __future__ import annotations

from collections.abc import Sequence


def short(text: object, width: int) -> str:
    """One line of at most `width` characters, "..." marking a cut."""
    line = " ".join(str(text).split())
    return line if len(line) <= width else line[: width - 3] + "..."


def _number(cell: str) -> bool:
    try:
        float(cell.rstrip("x%"))
    except ValueError:
        return False
    return True


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], indent: int = 2) -> str:
    """Columns as wide as their widest cell; numbers right-aligned, text left-aligned."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [
        all(_number(r[i]) or r[i] == "-" for r in cells) and any(_number(r[i]) for r in cells)
        for i in range(len(headers))
    ]

    def line(row: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if num else c.ljust(w)
            for c, w, num in zip(row, widths, numeric, strict=True)
        ]
        return (" " * indent + "  ".join(parts)).rstrip()

    rule = " " * indent + "  ".join("-" * w for w in widths)
    return "\n".join([line(list(headers)), rule, *(line(r) for r in cells)])
