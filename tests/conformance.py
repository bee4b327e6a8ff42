"""Runs one case of `tests/data/conformance/cases` against a server, exactly as its README describes."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from tests.helpers import DorisClient


def out_text(value: Any) -> str:
    """A JSON result value as a Doris `.out` file prints it."""
    if value is None:
        return "\\N"
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def same_value(actual: str, expected: str) -> bool:
    if actual == expected:
        return True
    try:
        return Decimal(actual) == Decimal(expected)
    except InvalidOperation:
        return False


def rows_match(actual: list[list[str]], expected: list[list[str]], ignore: set[int], ordered: bool) -> bool:
    def strip(rows: list[list[str]]) -> list[list[str]]:
        return [[v for i, v in enumerate(r) if i not in ignore] for r in rows]

    a, e = strip(actual), strip(expected)
    if not ordered:
        a, e = sorted(a), sorted(e)
    if len(a) != len(e):
        return False
    return all(
        len(ra) == len(re) and all(same_value(x, y) for x, y in zip(ra, re, strict=True))
        for ra, re in zip(a, e, strict=True)
    )


class CaseFailure(AssertionError):
    pass


def run_case(path: Path, doris: DorisClient, *, db: str | None = None) -> str:
    """Run a case (in database `db`, a new one by default); returns 'passed' or 'stopped at version-sensitive
    step N'. Raises CaseFailure."""
    case = json.loads(path.read_text())
    db = db or f"conf_{uuid.uuid4().hex[:10]}"
    doris.sql(db, f"CREATE DATABASE {db}")
    for ddl in case["ddl"]:
        body = doris.sql_raw(db, ddl)
        if body["code"] != 0:
            raise CaseFailure(f"DDL failed: {body['data']}\n{ddl}")
    sets: list[str] = []
    skipping_optional = False
    for n, step in enumerate(case["steps"]):
        where = f"step {n}: {json.dumps(step)[:300]}"
        if step.get("optional"):
            if "sql" in step:
                skipping_optional = True
            if skipping_optional:
                continue
        else:
            skipping_optional = False
        if "stream_load" in step:
            load = step["stream_load"]
            resp = doris.stream_load(db, load["table"], load["data"], headers=load["headers"])
            if resp.status_code != 200:
                raise CaseFailure(f"{where}\nHTTP {resp.status_code}: {resp.text}")
            body = resp.json()
            want = step.get("expect_status", "success")
            if body.get("Status", "").lower() != want.lower():
                raise CaseFailure(f"{where}\nexpected status {want}, got {body}")
            for key, field in (
                ("expect_total_rows", "NumberTotalRows"),
                ("expect_loaded_rows", "NumberLoadedRows"),
                ("expect_filtered_rows", "NumberFilteredRows"),
                ("expect_unselected_rows", "NumberUnselectedRows"),
            ):
                if key in step and body.get(field) != step[key]:
                    raise CaseFailure(f"{where}\n{field}: expected {step[key]}, got {body}")
            if "expect_message_contains" in step and step["expect_message_contains"] not in body.get("Message", ""):
                raise CaseFailure(f"{where}\nMessage lacks {step['expect_message_contains']!r}: {body}")
            continue
        stmt = step.get("sql") or step.get("query")
        is_set = "sql" in step and stmt.strip().lower().startswith("set ")
        body = doris.sql_raw(db, "; ".join(sets + [stmt]))
        if "expect_error" in step:
            failed = body["code"] != 0 and step["expect_error"] in str(body["data"])
            if not failed:
                if step.get("version_sensitive") and body["code"] == 0:
                    return f"stopped at version-sensitive step {n}"
                raise CaseFailure(f"{where}\nexpected error {step['expect_error']!r}, got {body}")
            continue
        if body["code"] != 0:
            raise CaseFailure(f"{where}\nstatement failed: {body['data']}")
        if is_set:
            sets.append(stmt)
            continue
        if "sql" in step:
            if "expect_affected_rows" in step:
                got = body["data"].get("status", {}).get("affectedRows")
                if got != step["expect_affected_rows"]:
                    raise CaseFailure(f"{where}\naffected rows: expected {step['expect_affected_rows']}, got {got}")
            continue
        data = body["data"]
        actual = [[out_text(v) for v in row] for row in data["data"]]
        if "columns" in step:
            names = [m["name"] for m in data["meta"]]
            if [c.lower() for c in names] != [c.lower() for c in step["columns"]]:
                raise CaseFailure(f"{where}\ncolumns: expected {step['columns']}, got {names}")
        ignore = set(step.get("ignore_columns", []))
        if not rows_match(actual, step["expect"], ignore, step.get("compare") == "ordered"):
            raise CaseFailure(f"{where}\nexpected {step['expect']}\ngot      {actual}")
    return "passed"
