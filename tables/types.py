"""Doris column types: parsing of type names, display names and the Iceberg storage type of each."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pyiceberg.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
)

INTEGER_TYPES = ("TINYINT", "SMALLINT", "INT", "BIGINT", "LARGEINT")
STRING_TYPES = ("CHAR", "VARCHAR", "STRING")
TIME_TYPES = ("DATE", "DATETIME")

_ALIASES = {
    "INTEGER": "INT",
    "TEXT": "STRING",
    "DATEV2": "DATE",
    "DATETIMEV2": "DATETIME",
    "DECIMALV3": "DECIMAL",
    "DECIMALV2": "DECIMAL",
    "NUMERIC": "DECIMAL",
    "BOOL": "BOOLEAN",
}
_KNOWN = set(INTEGER_TYPES + STRING_TYPES + TIME_TYPES + ("FLOAT", "DOUBLE", "DECIMAL", "BOOLEAN"))

INTEGER_RANGES = {
    "TINYINT": (-(2**7), 2**7 - 1),
    "SMALLINT": (-(2**15), 2**15 - 1),
    "INT": (-(2**31), 2**31 - 1),
    "BIGINT": (-(2**63), 2**63 - 1),
    "LARGEINT": (-(2**127), 2**127 - 1),
}


class UnsupportedType(ValueError):
    """A type name Doris has but this service does not store (HLL, BITMAP, ARRAY, ...)."""


class DorisType(BaseModel):
    """One Doris column type: a canonical name plus length, precision and scale where they apply."""

    model_config = ConfigDict(frozen=True)

    name: str
    length: int | None = None
    precision: int | None = None
    scale: int | None = None

    @classmethod
    def parse(cls, name: str, args: list[int] | None = None) -> DorisType:
        """Build a type from a Doris type name and its parenthesised arguments.

        Raises:
            UnsupportedType: the name is not a supported Doris scalar type.
        """
        upper = _ALIASES.get(name.upper(), name.upper())
        args = args or []
        if upper not in _KNOWN:
            raise UnsupportedType(f"Unsupported data type: {name}")
        if upper in INTEGER_TYPES or upper in ("FLOAT", "DOUBLE", "BOOLEAN", "DATE", "STRING"):
            # display widths such as bigint(20) carry no meaning
            return cls(name=upper)
        if upper == "DATETIME":
            return cls(name=upper, scale=args[0] if args else 0)
        if upper == "DECIMAL":
            precision = args[0] if args else 9
            scale = args[1] if len(args) > 1 else 0
            if not 1 <= precision <= 38 or not 0 <= scale <= precision:
                raise UnsupportedType(f"Invalid decimal type: decimal({precision},{scale})")
            return cls(name=upper, precision=precision, scale=scale)
        if upper == "CHAR":
            return cls(name=upper, length=args[0] if args else 1)
        return cls(name=upper, length=args[0] if args else 65533)

    def sql(self) -> str:
        """The type as DESC and SHOW CREATE TABLE print it (Doris 2.1+ prints lower case)."""
        if self.name == "DECIMAL":
            return f"decimal({self.precision},{self.scale})"
        if self.name in ("CHAR", "VARCHAR"):
            return f"{self.name.lower()}({self.length})"
        if self.name == "STRING":
            return "text"
        if self.name == "DATETIME" and self.scale:
            return f"datetime({self.scale})"
        return self.name.lower()

    def schema_name(self) -> str:
        """The primitive type name of the `_schema` endpoint and SQL result metadata."""
        if self.name == "DECIMAL":
            return "DECIMAL64" if (self.precision or 0) <= 18 else "DECIMAL128"
        return {"DATE": "DATEV2", "DATETIME": "DATETIMEV2"}.get(self.name, self.name)

    @property
    def is_integer(self) -> bool:
        return self.name in INTEGER_TYPES

    @property
    def is_string(self) -> bool:
        return self.name in STRING_TYPES

    @property
    def can_be_sequence(self) -> bool:
        """Doris allows integer and date/time sequence columns."""
        return self.name in INTEGER_TYPES or self.name in TIME_TYPES

    def iceberg_type(self) -> IcebergType:
        """The Iceberg type the column is stored as (narrow integers widen; ranges are checked on load)."""
        if self.name in ("TINYINT", "SMALLINT", "INT"):
            return IntegerType()
        if self.name == "BIGINT":
            return LongType()
        if self.name == "LARGEINT":
            return DecimalType(38, 0)
        if self.name == "FLOAT":
            return FloatType()
        if self.name == "DOUBLE":
            return DoubleType()
        if self.name == "DECIMAL":
            return DecimalType(self.precision or 9, self.scale or 0)
        if self.name == "DATE":
            return DateType()
        if self.name == "DATETIME":
            return TimestampType()
        if self.name == "BOOLEAN":
            return BooleanType()
        return StringType()
