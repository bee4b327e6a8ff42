"""A pure-Python model of Doris's aggregate-key rules (003_8fcb7ff40e8dfb0f.txt), to check the server against.

Rows are applied in load order (load by load, payload order inside a load). Per key:
SUM / MAX / MIN ignore NULL inputs (NULL when every input is NULL); REPLACE takes the value of the
latest row, or with a version column of the row with the largest version value (ties to the later
row); REPLACE_IF_NOT_NULL takes the latest non-NULL value (the version column orders REPLACE only).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Row = dict[str, Any]


def aggregate(
    loads: Sequence[Sequence[Row]],
    keys: Sequence[str],
    aggregations: dict[str, str],
    version_column: str | None = None,
) -> list[Row]:
    """The merged rows, sorted by key."""
    ordered = [row for load in loads for row in load]
    by_key: dict[tuple[Any, ...], list[tuple[int, Row]]] = {}
    for i, row in enumerate(ordered):
        by_key.setdefault(tuple(row[k] for k in keys), []).append((i, row))

    def order(item: tuple[int, Row]) -> tuple[Any, ...]:
        i, row = item
        if version_column is None:
            return (i,)
        v = row[version_column]
        return (v is not None, v if v is not None else 0, i)

    out: list[Row] = []
    for key, items in by_key.items():
        merged: Row = dict(zip(keys, key, strict=True))
        for col, how in aggregations.items():
            values = [r[col] for _, r in items if r[col] is not None]
            if how == "SUM":
                merged[col] = sum(values) if values else None
            elif how == "MAX":
                merged[col] = max(values) if values else None
            elif how == "MIN":
                merged[col] = min(values) if values else None
            elif how == "REPLACE":
                merged[col] = max(items, key=order)[1][col]
            elif how == "REPLACE_IF_NOT_NULL":
                candidates = [it for it in items if it[1][col] is not None]
                merged[col] = candidates[-1][1][col] if candidates else None
            else:
                raise ValueError(how)
        out.append(merged)
    return sorted(out, key=lambda r: tuple((r[k] is not None, r[k]) for k in keys))
