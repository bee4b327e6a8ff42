"""Depth, recursion and super-linear work of user SQL before it reaches Spark (docs/security.md, "SQL"): statements
tokenized each by a tokenizer of their own, a bound on the tokens of one request, checks linear in long operator
chains and in chains of WITH queries, WITH queries that multiply when inlined refused, and the MySQL listener's
event loop kept free of parsing."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pymysql
import pytest
from sqlglot import exp

import sql.select
import sql.tokens
from sql.select import bind_tables, check_query, parse_query
from sql.session import NOBODY
from sql.tokens import Cursor, split_statements
from tables.errors import SqlError


def test_concurrent_statements_never_share_tokens() -> None:
    """One tokenizer served every thread: a user's statement came back with the tokens of another user's
    concurrent statement (here a password of CREATE USER), in its token list and its syntax errors."""
    secret = "CREATE USER 'victim' IDENTIFIED BY 'S3CRET-PW' " + " ".join(["x"] * 3000)
    stop = threading.Event()
    seen: list[str] = []

    def victim() -> None:
        while not stop.is_set():
            try:
                Cursor(secret)
            except SqlError:
                pass

    thread = threading.Thread(target=victim)
    thread.start()
    try:
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            text = "SELECT " + " ".join(["y"] * 3000)
            try:
                tokens = Cursor(text).tokens
            except SqlError as exc:
                seen.append(str(exc))
                continue
            assert len(tokens) == 3001
            seen.extend(t.text for t in tokens if "S3CRET" in t.text)
    finally:
        stop.set()
        thread.join()
    assert not [s for s in seen if "S3CRET" in s]
    assert not seen  # no statement was even garbled


def test_a_request_with_too_many_tokens_is_refused_before_it_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """sqlglot holds about 270 bytes a token and 750 a node: a 2 MB `SELECT 1+1+...` grew the server by 1.5 GB."""
    monkeypatch.setattr(sql.tokens, "MAX_TOKENS", 1000)
    assert len(split_statements("SELECT " + "+".join(["1"] * 400) + "; SELECT 1")) == 2
    with pytest.raises(SqlError, match="more than 1000 tokens"):
        split_statements("SELECT " + "+".join(["1"] * 600))
    with pytest.raises(SqlError, match="more than 1000 tokens"):
        Cursor("SELECT 1;" * 400)
    # a long string is one token
    assert len(Cursor("SELECT '" + "x" * 100_000 + "'").tokens) == 2


def _timed(func: object, *args: object) -> float:
    started = time.monotonic()
    func(*args)  # type: ignore[operator]
    return time.monotonic() - started


def test_a_long_and_chain_is_checked_in_linear_time() -> None:
    """Every AND (a function to sqlglot) was rendered with all of its chain to find its name: 1000 ANDs held a core
    for 65 s, past any query_timeout (which counts only Spark's jobs)."""
    tree = parse_query("SELECT 1 FROM t WHERE " + " AND ".join(["k = 1"] * 1500))
    assert _timed(check_query, tree) < 2


def test_a_chain_of_with_queries_is_scoped_in_linear_time() -> None:
    """Each reference looked for its CTE by walking every CTE before it (2000 chained CTEs took 19 s)."""
    n = 1500
    ctes = ", ".join(f"c{i} AS (SELECT {'1 AS k' if i == 0 else f'k FROM c{i - 1}'})" for i in range(n))
    tree = parse_query(f"WITH {ctes} SELECT k FROM c{n - 1}")
    started = time.monotonic()
    check_query(tree)  # each CTE referenced once: never refused, whatever its length
    bound = bind_tables(None, None, tree, db="d", show_hidden=False, privileges=NOBODY)  # type: ignore[arg-type]
    assert time.monotonic() - started < 3
    assert len(list(bound.find_all(exp.CTE))) == n


def _doubling(n: int) -> str:
    ctes = ["c0 AS (SELECT k FROM t)"] + [
        f"c{i} AS (SELECT k FROM c{i - 1} UNION ALL SELECT k FROM c{i - 1})" for i in range(1, n + 1)
    ]
    return f"WITH {', '.join(ctes)} SELECT count(*) FROM c{n}"


def test_with_queries_that_multiply_when_inlined_are_refused() -> None:
    """17 CTEs each naming the one before twice (1.5 KB) kept Spark's driver planning 2^17 copies until the
    wedged-JVM watch killed the JVM, for any user with SELECT on one table."""
    cap = sql.select.MAX_EXPANDED_NODES
    with pytest.raises(SqlError, match=f"too complex once its WITH queries are expanded: .* more than {cap}"):
        check_query(parse_query(_doubling(17)))
    with pytest.raises(SqlError, match="too complex"):
        check_query(parse_query(_doubling(200)))  # counted, never built: 2^200
    check_query(parse_query(_doubling(6)))  # a few references are fine
    # an inner WITH's name shadows the outer one where it stands
    check_query(parse_query("WITH a AS (SELECT 1 AS k) SELECT * FROM (WITH a AS (SELECT 2 AS k) SELECT * FROM a) s, a"))


def test_a_deeply_nested_json_body_is_a_bad_request(base_url: str) -> None:
    resp = httpx.post(
        f"{base_url}/api/query/default_cluster/information_schema",
        content=b'{"stmt": ' + b"[" * 100_000,
        auth=("root", ""),
        timeout=30,
    )
    assert resp.status_code == 200
    assert "Missing statement request body" in resp.text, resp.text


def test_long_statements_are_parsed_off_the_mysql_event_loop(mysql_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Routing (client bookkeeping, SET) parsed a statement of up to 64 KiB on the event loop serving every client
    (a COM_QUERY of 100 such statements held it for about 100 s), and a SET's value was also rendered there (a
    120 KB `SET` stalled every client for 2.5 s). A statement past 4 KiB is split, routed, and a SET parsed and
    rendered, in a worker thread; a short one stays on the loop. (Where the work runs is asserted, not the
    loop's delay, which a busy machine's GIL and garbage collection make noisy.)"""
    import asyncio

    from app import mysql_server

    where: list[tuple[str, int, bool]] = []

    def on_loop() -> bool:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return False
        return True

    def recorded(name: str, real: Any) -> Any:
        def call(text: str, *args: Any) -> Any:
            where.append((name, len(text), on_loop()))
            return real(text, *args)

        return call

    monkeypatch.setattr(mysql_server, "_set_items", recorded("set", mysql_server._set_items))
    monkeypatch.setattr(mysql_server, "split_statements", recorded("split", mysql_server.split_statements))
    chain = "+".join(["1"] * 5_000)  # 10 KB
    conn = pymysql.connect(host="127.0.0.1", port=mysql_port, user="root", password="", autocommit=True)
    try:
        for text in (f"SET @a = {chain}", "SET @b = 1"):
            conn.cursor().execute(text)
    finally:
        conn.close()
    long_ones = [(name, on) for name, size, on in where if size > mysql_server.OFF_LOOP_CHARS]
    short_ones = [(name, on) for name, size, on in where if size <= mysql_server.OFF_LOOP_CHARS]
    assert ("set", False) in long_ones and ("split", False) in long_ones, where
    assert all(not on for _, on in long_ones), where
    assert ("set", True) in short_ones, where  # (the probe tells the loop from a worker thread)
