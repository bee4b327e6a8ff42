"""Columns by exact name: dots, spaces and backticks in a Doris column name are part of the name."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F


def col(name: str) -> Column:
    return F.col("`" + name.replace("`", "``") + "`")
