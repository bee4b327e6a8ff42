"""Doris SQL: statements parsed (sqlglot, plus a Doris DDL parser) and run as DDL, loads or Spark queries."""
