"""Doris's name rules (FE `FeNameFormat`, `enable_unicode_name_support` off, its default) with Doris's texts.

database, partition   ^[a-zA-Z][a-zA-Z0-9-_]{0,63}$
table                 ^[a-zA-Z][a-zA-Z0-9-_]*$, at most `table_name_length_limit` (64) characters
column                Doris's column regex (up to 256 characters), not `__doris_shadow_`, `mv_` or `mva_`
label                 ^[-_A-Za-z0-9:]{1,128}$

The rules are checked where a name is created (CREATE DATABASE / TABLE, ALTER ADD / RENAME COLUMN, a new
load's label), never where an existing name is looked up: a data dir written before the rules keeps working.
No name becomes a path (see `tables.catalog`), so the rules are Doris parity and a second line of defence.
"""

from __future__ import annotations

import re

from tables.errors import DorisError

DB_NAME_REGEX = "^[a-zA-Z][a-zA-Z0-9-_]{0,63}$"
PARTITION_NAME_REGEX = DB_NAME_REGEX
TABLE_NAME_REGEX = "^[a-zA-Z][a-zA-Z0-9-_]*$"
TABLE_NAME_LENGTH_LIMIT = 64  # Doris FE config table_name_length_limit
COLUMN_NAME_REGEX = '^[_a-zA-Z@0-9\\s/][.a-zA-Z0-9_+-/?@#$%^&*"\\s,:]{0,255}$'
LABEL_REGEX = "^[-_A-Za-z0-9:]{1,128}$"
SHADOW_PREFIX = "__doris_shadow_"
MV_PREFIXES = ("mv_", "mva_")
FORBIDDEN_PARTITION_PREFIX = "placeholder_"


def _matches(regex: str, name: str) -> bool:
    # Java's String.matches: the whole string, ASCII classes (Python's `$` would also accept a trailing newline)
    return re.fullmatch(regex.removeprefix("^").removesuffix("$"), name, flags=re.ASCII) is not None


class InvalidName(DorisError):
    """A new name breaks Doris's rule for its kind; the message is Doris's."""


def check_database_name(name: str) -> str:
    """Raises: InvalidName (Doris's ERR_WRONG_DB_NAME)."""
    if not _matches(DB_NAME_REGEX, name):
        raise InvalidName(f"Incorrect database name '{name}'")
    return name


def check_table_name(name: str) -> str:
    """Raises: InvalidName (Doris's ERR_WRONG_TABLE_NAME, ERR_TABLE_NAME_LENGTH_LIMIT)."""
    if not _matches(TABLE_NAME_REGEX, name):
        raise InvalidName(f"Incorrect table name '{name}'. Table name regex is '{TABLE_NAME_REGEX}'")
    if len(name) > TABLE_NAME_LENGTH_LIMIT:
        raise InvalidName(
            f"Table name length exceeds limit, the length of table name '{name}' is {len(name)} which is greater "
            f"than the configuration 'table_name_length_limit' ({TABLE_NAME_LENGTH_LIMIT})."
        )
    return name


def check_column_name(name: str) -> str:
    """Raises: InvalidName (Doris's ERR_WRONG_COLUMN_NAME and its materialized-view prefix rule)."""
    if not _matches(COLUMN_NAME_REGEX, name) or name.startswith(SHADOW_PREFIX):
        raise InvalidName(f"Incorrect column name '{name}'. Column regex is '{COLUMN_NAME_REGEX}'")
    if name.startswith(MV_PREFIXES):
        raise InvalidName(f"Incorrect column name {name}, column name can't start with 'mv_'/'mva_'")
    return name


def check_partition_name(name: str) -> str:
    """Raises: InvalidName (Doris's ERR_WRONG_PARTITION_NAME)."""
    if not _matches(PARTITION_NAME_REGEX, name) or name.startswith(FORBIDDEN_PARTITION_PREFIX):
        raise InvalidName(f"Incorrect partition name '{name}'")
    return name


def check_label(label: str) -> str:
    """Raises: InvalidName (the text of Doris's `FeNameFormat.checkLabel`)."""
    if not _matches(LABEL_REGEX, label):
        raise InvalidName(f"Label format error. regex: {LABEL_REGEX}, label: {label}")
    return label
