"""SELECT over merged tables: each referenced table becomes a temporary view of its merged rows."""

from __future__ import annotations

import uuid

import sqlglot
from pyspark.sql import DataFrame, SparkSession
from sqlglot import exp
from sqlglot.errors import ParseError

from spark_runner.queries import merged_rows
from sql.errors import SqlError
from tables.catalog import Catalog
from tables.errors import DorisError

# Functions that reach into the JVM or the host: never allowed in queries.
DENIED_FUNCTIONS = frozenset({"reflect", "java_method", "try_reflect", "input_file_name", "read_files"})


def parse_query(text: str) -> exp.Expression:
    try:
        tree = sqlglot.parse_one(text, dialect="doris")
    except ParseError as exc:
        detail = exc.errors[0] if exc.errors else {}
        raise SqlError(f"Syntax error: {detail.get('description', exc)}") from None
    if not isinstance(tree, exp.Expression):
        raise SqlError("Syntax error: empty statement")
    return tree


def check_query_functions(tree: exp.Expression) -> None:
    """Raises: SqlError for functions on the deny list."""
    for node in tree.find_all(exp.Func):
        name = node.name.lower() if isinstance(node, exp.Anonymous) else node.sql_name().lower()
        if name in DENIED_FUNCTIONS:
            raise SqlError(f"function {name} is not allowed")


def bind_tables(
    spark: SparkSession, catalog: Catalog, tree: exp.Expression, *, db: str, show_hidden: bool
) -> tuple[exp.Expression, list[str]]:
    """Replace every table reference by a view of its merged rows; returns the new tree and the views."""
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    views: list[str] = []
    tree = tree.copy()
    for table in list(tree.find_all(exp.Table)):
        if not table.name or (not table.db and table.name.lower() in ctes):
            continue
        table_db = table.db or db
        try:
            handle = catalog.load(table_db, table.name)
        except DorisError as exc:
            raise SqlError(exc.message) from None
        view = f"__v_{uuid.uuid4().hex}"
        merged_rows(spark, handle, show_hidden=show_hidden).createOrReplaceTempView(view)
        views.append(view)
        alias = table.alias or table.name
        table.replace(exp.Table(this=exp.to_identifier(view), alias=exp.TableAlias(this=exp.to_identifier(alias))))
    return tree, views


def run_query(
    spark: SparkSession, catalog: Catalog, tree: exp.Expression, *, db: str, show_hidden: bool
) -> tuple[DataFrame, list[str]]:
    """The query as a Spark DataFrame over merged views (drop the views once collected)."""
    check_query_functions(tree)
    bound, views = bind_tables(spark, catalog, tree, db=db, show_hidden=show_hidden)
    try:
        return spark.sql(bound.sql(dialect="spark")), views
    except Exception:
        drop_views(spark, views)
        raise


def drop_views(spark: SparkSession, views: list[str]) -> None:
    for view in views:
        spark.catalog.dropTempView(view)
