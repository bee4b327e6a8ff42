"""CSV bodies split by pyarrow (large) or in Python (small) give exactly what Spark's text path gives:
replies, error logs, table rows.

Each case loads one body three times over HTTP, each time with the size limits set so that one path is
taken, and compares what a user sees; a case also states which bodies each fast path must refuse.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from spark_runner import arrow_csv, inline_csv
from spark_runner.planning import LoadPlan
from tests.helpers import AUTH, DorisClient

TABLE = """CREATE TABLE {name} (k INT NOT NULL, v VARCHAR(4), n INT, d DECIMAL(5,2), s INT)
UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2 PROPERTIES ("function_column.sequence_col" = "s")"""
CSV = {"column_separator": ",", "max_filter_ratio": "1"}

GOOD = "1,a,10,1.5,1\n2,b,20,2.25,1\n1,c,11,3,2\n2,z,21,9,1\n3,\\N,\\N,\\N,5\n"
MIXED = (
    "1,a,007,1.5,1\n\n2,b, 12 ,x,1\n3,toolong,+5,2,1\n\\N,a,1,1,1\n4,d,1.5,1,1\n5,e,12abc,1,1\n"
    "6,f,99999999999,1,1\n7,g,-0,123456,1\n8,,,,1\n9,h,-7,-1.25,1"
)
# body, headers, split by pyarrow (when large), split in Python (when small)
CASES: dict[str, tuple[str, dict[str, str], bool, bool]] = {
    "sequence merge and \\N": (GOOD, CSV, True, True),
    "rejected rows and integer text": (MIXED, CSV, True, True),
    "strict mode": (MIXED, {**CSV, "strict_mode": "true"}, True, True),
    "empty as null, quote trimming": (
        '1,"q",1,1,1\n2,"",2,2,1\n3,,3,3,1\n',
        {**CSV, "trim_double_quotes": "true", "empty_field_as_null": "true"},
        True,
        True,
    ),
    "skipped header lines": ("k,v,n,d,s\n\n1,a,1,1,1\n2,b,2,2,1\n", {**CSV, "skip_lines": "2"}, True, True),
    "tab separator, columns and where": (
        "1\ta\t5\n2\tb\t6\n3\tc\t7\n",
        {"columns": "k,v,x,n=x*2,d=x,s=x", "where": "x > 5", "max_filter_ratio": "1"},
        True,
        True,
    ),
    "wrong field count": ("1,a,1,1,1\n2,b\n3,c,3,3,3,3\n,\n", CSV, False, True),
    "CR before LF": ("1,a,1,1,1\r\n2,b,2,2,1\r\n", CSV, False, True),
    "CRLF line delimiter": ("1,a,1,1,1\r\n2,b\r,2,2,1\r\n", {**CSV, "line_delimiter": "\\r\\n"}, False, True),
    "byte-order mark": ("\ufeff1,a,1,1,1\n2,b,2,2,1\n", CSV, False, False),
    "two-byte separator": ("1||a||1||1||1\n2|||b||2||2||2\n", {**CSV, "column_separator": "||"}, False, True),
    "enclose": ('1,"a,b",1,1,1\n', {**CSV, "enclose": '"'}, False, False),
}


def load(doris: DorisClient, db: str, table: str, body: str, headers: dict[str, str]) -> dict[str, Any]:
    reply = doris.stream_load(db, table, body, headers={**headers, "label": f"{table}_load"}).json()
    log = httpx.get(reply["ErrorURL"], auth=AUTH).text if "ErrorURL" in reply else None
    seen = {k: v for k, v in reply.items() if not k.endswith("TimeMs") and k not in ("TxnId", "Label", "ErrorURL")}
    return {"reply": seen, "error_log": log, "rows": doris.rows(db, f"select * from {table} order by k")}


@pytest.mark.parametrize("case", list(CASES))
def test_arrow_inline_and_text_paths_agree(
    doris: DorisClient, db: str, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    body, headers, arrow, inline = CASES[case]
    taken: list[str] = []
    split, stage = inline_csv.split_body, arrow_csv.stage_fields

    def split_spy(path: Path, plan: LoadPlan) -> list[inline_csv.Line] | None:
        lines = split(path, plan)
        taken.append("inline" if lines else "file")
        return lines

    def stage_spy(path: Path, plan: LoadPlan) -> Path | None:
        fields = stage(path, plan)
        taken[-1] = "arrow" if fields is not None else "text"
        if fields is not None:
            seen.append(fields)
        return fields

    seen: list[Path] = []
    monkeypatch.setattr(inline_csv, "split_body", split_spy)
    monkeypatch.setattr(arrow_csv, "stage_fields", stage_spy)
    got = {}
    for path, max_inline, min_arrow in (("inline", 1 << 20, 1 << 62), ("arrow", -1, 0), ("text", -1, 1 << 62)):
        monkeypatch.setattr(inline_csv, "MAX_BYTES", max_inline)
        monkeypatch.setattr(arrow_csv, "MIN_BYTES", min_arrow)
        doris.sql(db, TABLE.format(name=f"by_{path}"))
        got[path] = load(doris, db, f"by_{path}", body, headers)
    assert taken == ["inline" if inline else "text", "arrow" if arrow else "text", "text"]
    assert got["inline"] == got["text"]
    assert got["arrow"] == got["text"]
    assert got["text"]["reply"]["Status"] == "Success" and got["text"]["reply"]["NumberLoadedRows"] > 0
    assert all(not p.exists() for p in seen)  # pyarrow's fields are removed with the staged body


def test_integer_text_rule(doris: DorisClient, db: str) -> None:
    """Integers are digits with an optional sign and surrounding blanks; anything else is NULL (or rejected)."""
    doris.sql(db, TABLE.format(name="t"))
    got = load(doris, db, "t", MIXED, CSV)
    assert got["reply"]["NumberTotalRows"] == 10 and got["reply"]["NumberFilteredRows"] == 2
    assert [r[:3] for r in got["rows"]] == [
        [1, "a", 7],
        [2, "b", 12],
        [4, "d", None],
        [5, "e", None],
        [6, "f", None],
        [7, "g", 0],
        [8, "", None],
        [9, "h", -7],
    ]
