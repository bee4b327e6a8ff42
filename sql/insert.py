"""INSERT INTO t [(cols)] VALUES ... | SELECT ...: through the same load pipeline as a stream load.

VALUES rows go to the load as text (`values_rows`); a query's rows go as its DataFrame (`load_query`, which
UPDATE and DELETE use too).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from sqlglot import exp

from spark_runner.queries import QueryViews, first_value, query_width
from sql.context import SqlContext
from sql.partition_filter import temporary_names
from sql.privileges import require_table
from sql.results import ExecStatus
from sql.select import parse_query, run_query
from sql.session import Session
from tables.accounts import Priv, Privileges
from tables.errors import SqlError
from tables.load_spec import ColumnMapping, LoadRequest, LoadResult
from tables.model import DELETE_SIGN, TableDef

Evaluate = Callable[[exp.Expression], "str | None"]


def literal_text(node: exp.Expression, evaluate: Evaluate) -> str | None:
    """A VALUES item as the text a load would carry (None for NULL); other expressions go to `evaluate`,
    which runs them as a checked, bound query (the same rules as a SELECT)."""
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return "1" if node.this else "0"
    if isinstance(node, exp.Literal):
        return str(node.this)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return "-" + str(node.this.this)
    if isinstance(node, exp.Paren):
        return literal_text(node.this, evaluate)
    return evaluate(node)


def insert_target(tree: exp.Insert) -> tuple[exp.Table, list[str] | None]:
    target = tree.this
    if isinstance(target, exp.Schema):
        table = target.this
        cols = [c.name for c in target.expressions]
        return table, cols
    if isinstance(target, exp.Table):
        return target, None
    raise SqlError("INSERT target must be a table")


def _partition_clause(table: exp.Table) -> tuple[tuple[str, ...], bool]:
    """`INSERT INTO t [TEMPORARY] PARTITION (p1, p2)`: rows of other partitions are filtered, as with the
    `partitions` (`temporary_partitions`) header; the names, and whether they are temporary partitions."""
    clause = table.args.get("partition")
    temporary = temporary_names(clause)
    names = tuple(e.name for e in clause.expressions) if isinstance(clause, exp.Partition) else ()
    return names, temporary


def values_rows(tree: exp.Insert, evaluate: Evaluate) -> list[list[str | None]] | None:
    source = tree.expression
    if not isinstance(source, exp.Values):
        return None
    rows: list[list[str | None]] = []
    for tup in source.expressions:
        items = tup.expressions if isinstance(tup, exp.Tuple) else [tup]
        rows.append([literal_text(item, evaluate) for item in items])
    return rows


def insert_request(*, db: str, table: str, columns: list[str] | None, strict: bool) -> LoadRequest:
    """The load an INSERT asks for: its column list maps the values, strictness from the session."""
    return LoadRequest(
        db=db,
        table=table,
        label=f"insert_{uuid.uuid4().hex}",
        columns=tuple(ColumnMapping(name=c) for c in columns) if columns is not None else None,
        strict_mode=strict,
        max_filter_ratio=0.0 if strict else 1.0,
        source="insert",
    )


def parse_insert(text: str) -> exp.Insert:
    """Raises: SqlError: a syntax error, or not an INSERT."""
    tree = parse_query(text)
    if not isinstance(tree, exp.Insert):
        raise SqlError("Syntax error in INSERT")
    return tree


def run_insert(ctx: SqlContext, tree: exp.Insert, session: Session) -> ExecStatus:
    """Load the VALUES rows or the query's rows into the table; the reply carries the load's label and txn."""
    table_node, columns = insert_target(tree)
    require_table(session.privileges, Priv.LOAD, "LOAD", table_node.db or session.db, table_node.name)
    table = ctx.catalog.load(table_node.db or session.db, table_node.name).definition
    source: exp.Expression = tree.expression
    if not isinstance(source, (exp.Values, exp.Query)):
        raise SqlError("INSERT takes VALUES or a query")
    rows = values_rows(tree, lambda node: evaluate(ctx, node, session))
    partitions, temporary = _partition_clause(table_node)
    partial = session.flag("enable_unique_key_partial_update") and columns is not None
    request = insert_request(
        db=table.db, table=table.name, columns=columns, strict=session.flag("enable_insert_strict")
    ).model_copy(
        update={
            "partial_columns": partial and table.is_unique and table.merge_on_write,
            "partial_update_new_key_behavior": session.variables.get("partial_update_new_key_behavior", "APPEND"),
            "partitions": partitions,
            "temporary_partitions": temporary,
        }
    )
    width = len(columns) if columns is not None else len(table.columns)
    if rows is not None:
        if any(len(r) != width for r in rows):
            raise SqlError("Column count doesn't match value count")
        result = ctx.loads.run_rows(ctx.loads.prepare(request), rows)
    else:
        show_hidden = session.flag("show_hidden_columns")
        result = load_query(
            ctx, source, request, db=session.db, show_hidden=show_hidden, privileges=session.privileges, width=width
        )
    if result.status != "Success":
        if result.number_filtered_rows:
            raise SqlError(f"Insert has filtered data in strict mode. url: {result.error_url or ''}".strip())
        raise SqlError(load_error_text(result.message))
    return ExecStatus(affected_rows=result.number_loaded_rows, info={"label": result.label, "txnId": result.txn_id})


def evaluate(ctx: SqlContext, node: exp.Expression, session: Session) -> str | None:
    """A non-literal VALUES item, run as `SELECT CAST(item AS STRING)` with a query's checks and binding."""
    query = exp.select(exp.cast(node.copy(), "STRING").as_("v"))
    with QueryViews(ctx.spark) as views:
        frame = run_query(
            views,
            ctx.catalog,
            query,
            db=session.db,
            show_hidden=False,
            privileges=session.privileges,
            limits=ctx.limits,
        )
        try:
            value = first_value(frame)
        except SqlError as exc:
            raise SqlError(f"can not evaluate '{node.sql(dialect='doris')}': {exc.detail}") from None
    return None if value is None else str(value)


def load_query(
    ctx: SqlContext,
    query: exp.Expression,
    request: LoadRequest,
    *,
    db: str,
    show_hidden: bool,
    privileges: Privileges,
    width: int | None = None,
    reads_target: bool = False,
) -> LoadResult:
    """Load the rows of a query (checked and bound as a SELECT) with `request`. `reads_target`: the query is the
    `live_rows` of an UPDATE or a DELETE, whose own FROM (that node only) reads the table it loads back without
    SELECT_PRIV (its statement checked LOAD_PRIV); every other table reference, the target's included, needs
    SELECT_PRIV.

    Raises:
        SqlError: the query is refused, or its column count is not `width`.
        StatementDenied: the query reads a table the user may not SELECT from.
    """
    source = own_row_source(query, request.db, request.table) if reads_target else None
    with QueryViews(ctx.spark) as views:
        frame = run_query(
            views,
            ctx.catalog,
            query,
            db=db,
            show_hidden=show_hidden,
            privileges=privileges,
            limits=ctx.limits,
            row_source=source,
        )
        if width is not None and query_width(frame) != width:
            raise SqlError("Column count doesn't match value count")
        return ctx.loads.run_frame(ctx.loads.prepare(request), frame)


def live_rows(table: TableDef, columns: list[exp.Expr], where: exp.Where | None) -> exp.Select:
    """`SELECT <columns> FROM db.t WHERE <delete sign> = 0 [AND (<where>)]`: the rows an UPDATE or a DELETE
    loads again, built as a tree (user text is never pasted into SQL)."""
    condition: exp.Expr = exp.EQ(this=exp.column(DELETE_SIGN, quoted=True), expression=exp.Literal.number(0))
    if where is not None:
        condition = exp.And(this=condition, expression=exp.Paren(this=where.this.copy()))
    return exp.select(*columns).from_(exp.table_(table.name, db=table.db, quoted=True)).where(condition)


def own_row_source(query: exp.Expression, db: str, table: str) -> exp.Table:
    """The FROM table of a `live_rows` query (the node itself), checked to name `db`.`table`.

    Raises:
        SqlError: the query is not one `live_rows` built for that table.
    """
    from_ = query.args.get("from_") or query.args.get("from") if isinstance(query, exp.Select) else None
    source = from_.this if isinstance(from_, exp.From) else None
    if not isinstance(source, exp.Table) or (source.text("db"), source.name) != (db, table) or query.args.get("joins"):
        raise SqlError("an UPDATE or DELETE reads back its own table only")
    return source


def load_error_text(message: str) -> str:
    """A failed load's message as a statement's error: `[CODE]TStatus: errCode = 2, detailMessage = x` → `x`;
    `[CODE]x` → `x`."""
    if message.startswith("[") and "]" in message:
        message = message.split("]", 1)[1]
    marker = "detailMessage = "
    return message.split(marker, 1)[1] if marker in message else message
