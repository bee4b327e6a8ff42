"""CSV options as Doris reads them: separators and delimiters with `\\xNN` escapes (the dialect a load's readers
share is `tables.csv_dialect.CsvDialect`)."""

from __future__ import annotations

import re

from tables.errors import BadHeader

_HEX = re.compile(r"\\x([0-9a-fA-F]{2})")


def decode_separator(value: str, *, header: str) -> str:
    """Turn a separator header into the string it means (`\\x01` → U+0001, `\\t` → tab).

    Raises:
        BadHeader: the separator is empty.
    """
    decoded = _HEX.sub(lambda m: chr(int(m.group(1), 16)), value)
    decoded = decoded.replace("\\t", "\t").replace("\\n", "\n").replace("\\r", "\r")
    if decoded == "":
        raise BadHeader(f"{header} is empty")
    return decoded
