"""CSV options as Doris reads them: separators with `\\xNN` escapes, no quoting by default, `\\N` is NULL."""

from __future__ import annotations

import re

from tables.errors import BadHeader

_HEX = re.compile(r"\\x([0-9a-fA-F]{2})")

NULL_MARKER = "\\N"


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
