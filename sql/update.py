"""UPDATE t SET c = expr [, ...] [WHERE ...] on a unique table.

The current rows that match are loaded again, with the new values, through the load pipeline, so sequence
rules apply (an update that lowers the sequence is ignored). A `sequence_type` table keeps each row's stored
hidden sequence.
"""

from __future__ import annotations

from sqlglot import exp

from sql.context import SqlContext
from sql.insert import insert_request, live_rows, load_error_text, load_query
from sql.privileges import require_table
from sql.results import ExecStatus
from sql.select import parse_query
from sql.session import Session
from tables.accounts import Priv
from tables.errors import SqlError
from tables.model import SEQUENCE_COL


def parse_update(text: str) -> exp.Update:
    """Raises: SqlError: a syntax error, or not an UPDATE of one table."""
    tree = parse_query(text)
    if not isinstance(tree, exp.Update) or not isinstance(tree.this, exp.Table):
        raise SqlError("Syntax error in UPDATE")
    return tree


def run_update(ctx: SqlContext, tree: exp.Update, session: Session) -> ExecStatus:
    require_table(session.privileges, Priv.LOAD, "LOAD", tree.this.db or session.db, tree.this.name)
    table = ctx.catalog.load(tree.this.db or session.db, tree.this.name).definition
    if not table.is_unique:
        raise SqlError("Only unique table could be updated.")
    assignments: dict[str, exp.Expression] = {}
    for item in tree.expressions:
        if not isinstance(item, exp.EQ) or not isinstance(item.this, exp.Column):
            raise SqlError(f"Syntax error in UPDATE: {item.sql(dialect='doris')}")
        column = table.column(item.this.name)
        if column is None or column.hidden:
            raise SqlError(f"Unknown column '{item.this.name}' in table {table.name}")
        if column.is_key:
            raise SqlError("Only value columns of unique table could be updated")
        assignments[column.name] = item.expression
    names = [c.name for c in table.columns]
    if table.sequence_type is not None and table.sequence_col is None:
        names.append(SEQUENCE_COL)  # each row keeps its stored sequence
    values = [
        exp.alias_(assignments[n].copy() if n in assignments else exp.column(n, quoted=True), n, quoted=True)
        for n in names
    ]
    request = insert_request(db=table.db, table=table.name, columns=names, strict=session.flag("enable_insert_strict"))
    query = live_rows(table, values, tree.args.get("where"))
    result = load_query(
        ctx, query, request, db=session.db, show_hidden=True, privileges=session.privileges, reads_target=True
    )
    if result.status != "Success":
        raise SqlError(load_error_text(result.message))
    return ExecStatus(affected_rows=result.number_loaded_rows)
