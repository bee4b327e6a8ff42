"""Session variables of one SQL request (or one MySQL connection): `SET` lasts for the rest of it."""

from __future__ import annotations

from dataclasses import dataclass, field

from sql.errors import SqlError

_DEFAULTS: dict[str, str] = {
    "show_hidden_columns": "false",
    "enable_unique_key_partial_update": "false",
    "enable_insert_strict": "true",
    "partial_update_new_key_behavior": "APPEND",
    "require_sequence_in_insert": "true",
    "time_zone": "Asia/Shanghai",
}


@dataclass
class Session:
    db: str
    variables: dict[str, str] = field(default_factory=lambda: dict(_DEFAULTS))

    def set(self, name: str, value: str) -> None:
        """Set a variable; `default` restores its default.

        Raises:
            SqlError: a value Doris refuses.
        """
        key = name.lower().lstrip("@")
        for prefix in ("session.", "global.", "local."):
            if key.startswith(prefix):
                key = key[len(prefix) :]
        if value.lower() == "default":
            self.variables[key] = _DEFAULTS.get(key, "")
            return
        if key == "partial_update_new_key_behavior":
            if value.upper() not in ("APPEND", "ERROR"):
                raise SqlError(
                    f"partial_update_new_key_behavior should be one of {{'APPEND', 'ERROR'}}, but found {value}"
                )
            value = value.upper()
        self.variables[key] = value

    def flag(self, name: str) -> bool:
        return self.variables.get(name, "false").lower() in ("true", "1", "on")
