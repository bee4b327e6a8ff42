"""The PostgreSQL fixture (tests/postgres.py): a real server, a fresh database per module, restartable mid-test."""

from __future__ import annotations

import psycopg

from tests.postgres import PostgresServer


def test_a_database_survives_a_restart_of_the_server(postgres: PostgresServer, postgres_uri: str) -> None:
    database = postgres_uri.rsplit("/", 1)[1]
    with psycopg.connect(postgres.dsn(database), autocommit=True) as conn:
        conn.execute("CREATE TABLE t (x int)")
        conn.execute("INSERT INTO t VALUES (1)")
    postgres.restart(mode="immediate")
    with psycopg.connect(postgres.dsn(database)) as conn:
        assert conn.execute("SELECT x FROM t").fetchall() == [(1,)]
