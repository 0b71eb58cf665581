"""The Avro definition of a dataclass, from its type hints: what AvroSchema and JsonSchema register
for it. int is long, float double, str string, bytes bytes, bool boolean; X | None a union with null
(default null); list[X] an array, dict[str, X] a map; a nested dataclass a record, an Enum an enum.
Dataclass defaults become the fields' defaults, so that readers can fill fields a writer lacks.

Also where a record type is dispatched: a dataclass here, a Pulsar-style Record in `record`.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from typing import Any

from herald.client.schemas.record import Record, record_definition
from herald.common.errors import SchemaError

Definition = dict[str, Any]
Bindings = dict[str, type]
"""Full name of a record or enum in the definition -> the class values of it are."""

_PRIMITIVES: dict[type, str] = {bool: "boolean", int: "long", float: "double", str: "string", bytes: "bytes"}
_NULL = object()


def definition_of(record: type) -> tuple[Definition, Bindings]:
    """The Avro definition of a dataclass or a Record subclass, and the classes it binds."""
    if isinstance(record, type) and issubclass(record, Record):
        return record_definition(record)
    if isinstance(record, type) and dataclasses.is_dataclass(record):
        return _Builder().record(record)
    raise SchemaError(
        f"a schema's record must be a dataclass or a herald.client.schemas.Record subclass, got {record!r}")


class _Builder:
    def __init__(self) -> None:
        self.bindings: Bindings = {}

    def record(self, cls: type) -> tuple[Definition, Bindings]:
        return self._record(cls), self.bindings

    def _record(self, cls: type) -> Definition:
        namespace = getattr(cls, "_avro_namespace", None)
        self.bindings[_full_name(cls)] = cls
        try:
            hints = typing.get_type_hints(cls)
        except (NameError, TypeError) as exc:
            raise SchemaError(f"the type hints of {cls.__name__} do not resolve ({exc}): define the dataclass "
                              "and the types it uses at module level") from None
        definition: Definition = {"type": "record", "name": cls.__name__}
        if namespace:
            definition["namespace"] = namespace
        fields = []
        for field in dataclasses.fields(cls):
            if not field.init:
                continue  # not given to the constructor: a decoded value could not be built with it
            try:
                fields.append(self._field(field, hints[field.name]))
            except SchemaError as exc:
                raise SchemaError(f"{cls.__name__}.{field.name}: {exc}") from None
        definition["fields"] = fields
        return definition

    def _field(self, field: dataclasses.Field[Any], hint: Any) -> Definition:
        if field.default is not dataclasses.MISSING:
            default: Any = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            default = _NULL if _optional(hint) is not None else dataclasses.MISSING
        avro = self.type_of(hint, None if default is _NULL else default)
        entry: Definition = {"name": field.name, "type": avro}
        if default is _NULL:
            entry["default"] = None
        elif default is not dataclasses.MISSING:
            entry["default"] = _default_json(default)
        return entry

    def type_of(self, hint: Any, default: Any = None) -> Any:
        inner = _optional(hint)
        if inner is not None:
            # Avro: a union's default is of its first branch, so null goes second when the default is not.
            return [self.type_of(inner), "null"] if default is not None else ["null", self.type_of(inner)]
        if hint in _PRIMITIVES:
            return _PRIMITIVES[hint]
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin is list and len(args) == 1:
            return {"type": "array", "items": self.type_of(args[0])}
        if origin is dict and len(args) == 2:
            if args[0] is not str:
                raise SchemaError(f"map keys must be str (Avro maps have text keys), got {hint!r}")
            return {"type": "map", "values": self.type_of(args[1])}
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return self._enum(hint)
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            full = _full_name(hint)
            return full if full in self.bindings else self._record(hint)
        raise SchemaError(
            f"type {hint!r} has no Avro form: use bool, int, float, str, bytes, X | None, list[X], "
            "dict[str, X], an Enum or a dataclass (a time as int epoch milliseconds or an ISO str)")

    def _enum(self, cls: type[enum.Enum]) -> Any:
        if cls.__name__ in self.bindings:
            return cls.__name__
        self.bindings[cls.__name__] = cls
        return {"type": "enum", "name": cls.__name__, "symbols": [member.name for member in cls]}


def _full_name(cls: type) -> str:
    namespace = getattr(cls, "_avro_namespace", None)
    return f"{namespace}.{cls.__name__}" if namespace else cls.__name__


def _optional(hint: Any) -> Any:
    """X for X | None (Optional[X]), else None."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(args) == 1 and len(typing.get_args(hint)) == 2:
            return args[0]
        raise SchemaError(f"type {hint!r}: only X | None unions are supported")
    return None


def _default_json(value: Any) -> Any:
    """A default as Avro writes it in a definition."""
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _default_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [_default_json(item) for item in value]
    if isinstance(value, Mapping):
        return {key: _default_json(item) for key, item in value.items()}
    return value
