"""GenericRecord: a record read without its class (AutoConsume), a read-only mapping of its fields
that also answers attribute access (`record.name`), with the schema type and version it was
written with."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


class GenericRecord(Mapping[str, Any]):
    __slots__ = ("_fields", "schema_name", "schema_type", "schema_version")

    def __init__(self, fields: Mapping[str, Any], schema_type: str, schema_version: int | None = None,
                 schema_name: str = "") -> None:
        object.__setattr__(self, "_fields", dict(fields))
        object.__setattr__(self, "schema_type", schema_type)
        object.__setattr__(self, "schema_version", schema_version)
        object.__setattr__(self, "schema_name", schema_name)

    def __getitem__(self, name: str) -> Any:
        return self._fields[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._fields[name]
        except KeyError:
            raise AttributeError(f"record {self.schema_name or ''} has no field {name!r} "
                                 f"(its fields: {', '.join(self._fields)})") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a GenericRecord is read-only")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"GenericRecord({self.schema_name}, {self._fields!r}, {self.schema_type}, version={self.schema_version})"
