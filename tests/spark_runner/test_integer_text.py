"""Doris's integer text rule (`sqltext.convert_sql`) on odd text: digits with an optional sign and blanks around
them, in the type's range, else NULL. The SQL skips the rule's regex for text exactly as long as its value
printed; these cases are the ones where that shortcut and Spark's own parsing (`try_cast` trims control
characters too) could part from the rule."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest

from spark_runner.sqltext import convert_sql, lit
from tables.types import DorisType

RANGES = {"TINYINT": 8, "SMALLINT": 16, "INT": 32, "BIGINT": 64}
BLANK = " \t\n\x0b\f\r"  # Java's \s
RULE = re.compile(f"[{BLANK}]*[-+]?[0-9]+[{BLANK}]*")


def expected(text: str, bits: int) -> int | None:
    if RULE.fullmatch(text) is None:
        return None
    value = int(text.strip(BLANK))
    return value if -(2 ** (bits - 1)) <= value < 2 ** (bits - 1) else None


def texts(bits: int) -> list[str]:
    edge = [2 ** (bits - 1) - 1, 2 ** (bits - 1), -(2 ** (bits - 1)), -(2 ** (bits - 1)) - 1]
    powers = [s * 10**k + d for k in range(bits * 3 // 10 + 2) for s in (1, -1) for d in (-1, 0, 1)]
    fixed = [str(v) for v in edge + powers]
    fixed += ["", " ", "-", "+", "-0", "+0", "007", "-007", "+5", " 5", "5 ", "\t5\n", "5.", ".5", "1.5", "1e3"]
    fixed += ["\x015", "5\x01", "\x7f5", "5\x7f", "\x1c5", "5\x1f", " \x01 5", "0x10", "--5", "5-", "1 2", "٣"]
    rng = random.Random(bits)
    alphabet = "0123456789-+ \t\x01\x7f.e"
    fixed += ["".join(rng.choices(alphabet, k=rng.randint(1, 6))) for _ in range(300)]
    signs, ends = ["", "-", "+", " "], ["", " ", "\x01"]
    fixed += [rng.choice(signs) + str(rng.randint(0, 2**bits)) + rng.choice(ends) for _ in range(200)]
    return fixed


@pytest.mark.parametrize("name", list(RANGES))
def test_integer_text_converts_by_the_rule(spark: Any, name: str) -> None:
    cases = texts(RANGES[name])
    values = ", ".join(f"({lit(text)})" for text in cases)
    sql = convert_sql("t", DorisType(name=name))
    rows = spark.sql(f"SELECT t, {sql} AS v FROM VALUES {values} AS s(t)").collect()
    got = {row["t"]: row["v"] for row in rows}
    wrong = {t: (got[t], expected(t, RANGES[name])) for t in cases if got[t] != expected(t, RANGES[name])}
    assert not wrong, wrong
