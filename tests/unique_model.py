"""A pure-Python model of Doris's unique-key merge rules, to check the server against: one source of truth for
tests/test_compaction_model.py and tools/torture.py.

Loads are applied in version (commit) order, one `apply` per load, rows in payload order inside a load:

sequence column     per key the row with the highest sequence wins, NULL below every value; a tie goes to the
                    later row (later in the payload, or of the later load); without a sequence column the later
                    row always wins
delete sign         a delete-signed row (`__DORIS_DELETE_SIGN__` = 1, or every row of a merge_type DELETE load)
                    wins or loses like any row; when it wins the key is hidden, and it keeps its sequence, so a
                    later row with a lower sequence still loses to it
sequence mapping    each sequence column orders only its own group of value columns (`sequence_mapping.s` =
                    "a,b"); a load that does not carry a group leaves it as stored
partial update      (merge-on-write) the listed columns replace the stored row's, the others keep their stored
                    values; a key not stored (or deleted) gets the defaults for the unlisted columns; without the
                    sequence column listed the row keeps the stored sequence
REPLACE_IF_NOT_NULL a NULL in such a column keeps the stored value
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DELETE_SIGN = "__DORIS_DELETE_SIGN__"
Row = Mapping[str, Any]


@dataclass
class Stored:
    values: dict[str, Any]
    seq: Any  # the table's sequence value (None: no sequence column, or a NULL sequence)
    deleted: bool
    version: int


def rank(seq: Any, tie: int) -> tuple[bool, Any, int]:
    """NULL sequence below every value, then the sequence, then the later row."""
    return (seq is not None, seq if seq is not None else 0, tie)


@dataclass
class UniqueModel:
    keys: tuple[str, ...]
    columns: tuple[str, ...]  # every visible column, keys included, in the table's order
    sequence: str | None = None  # the sequence column (`function_column.sequence_col`)
    sequence_mapping: dict[str, tuple[str, ...]] = field(default_factory=dict)  # sequence column -> its group
    replace_if_not_null: frozenset[str] = frozenset()
    defaults: dict[str, Any] = field(default_factory=dict)  # of a partial update's new key (else NULL)
    state: dict[tuple[Any, ...], Stored] = field(default_factory=dict)

    def key(self, row: Row) -> tuple[Any, ...]:
        return tuple(row[k] for k in self.keys)

    def apply(
        self, rows: Sequence[Row], version: int, *, delete: bool = False, partial: Sequence[str] | None = None
    ) -> None:
        """One load committed at `version`. `delete`: merge_type DELETE (every row is a delete marker);
        `partial`: the listed columns of a partial update."""
        if self.sequence_mapping:
            self._apply_mapping(rows, version)
        elif partial is not None:
            self._apply_partial(rows, version, partial, delete)
        else:
            self._apply_rows(rows, version, delete)

    def _seq(self, row: Row) -> Any:
        return row.get(self.sequence) if self.sequence is not None else None

    def _apply_rows(self, rows: Sequence[Row], version: int, delete: bool) -> None:
        batch: dict[tuple[Any, ...], tuple[tuple[bool, Any, int], Row]] = {}
        for pos, row in enumerate(rows):
            r = rank(self._seq(row), pos)
            k = self.key(row)
            if k not in batch or r >= batch[k][0]:
                batch[k] = (r, row)
        for k, (_, row) in batch.items():
            old = self.state.get(k)
            deleted = delete or bool(row.get(DELETE_SIGN))
            values = {c: row.get(c) for c in self.columns}
            if old is not None and not old.deleted:
                for c in self.replace_if_not_null:
                    if values[c] is None:
                        values[c] = old.values[c]
            new = Stored(values, self._seq(row), deleted, version)
            if old is None or rank(new.seq, new.version) >= rank(old.seq, old.version):
                self.state[k] = new

    def _apply_partial(self, rows: Sequence[Row], version: int, listed: Sequence[str], delete: bool) -> None:
        for row in rows:
            k = self.key(row)
            old = self.state.get(k)
            live = old is not None and not old.deleted
            base = dict(old.values) if live and old is not None else {c: self.defaults.get(c) for c in self.columns}
            base.update({c: row.get(c) for c in listed if c in self.columns})
            seq = self._seq(row) if self.sequence in listed else (old.seq if live and old is not None else None)
            new = Stored(base, seq, delete or bool(row.get(DELETE_SIGN)), version)
            if old is None or rank(new.seq, new.version) >= rank(old.seq, old.version):
                self.state[k] = new

    def _apply_mapping(self, rows: Sequence[Row], version: int) -> None:
        for row in rows:
            k = self.key(row)
            old = self.state.get(k)
            values = dict(old.values) if old is not None else {c: None for c in self.columns}
            values.update({c: row[c] for c in self.keys})
            for seq, group in self.sequence_mapping.items():
                if seq not in row:
                    continue
                if old is None or rank(row[seq], 1) >= rank(values[seq], 0):
                    values.update({c: row.get(c) for c in (*group, seq)})
            self.state[k] = Stored(values, None, False, version)

    def visible(self) -> list[list[Any]]:
        """The rows a SELECT returns, ordered by key (NULL keys first)."""
        live = [(k, s) for k, s in self.state.items() if not s.deleted]
        live.sort(key=lambda item: tuple((v is not None, v if v is not None else 0) for v in item[0]))
        return [[s.values[c] for c in self.columns] for _, s in live]
