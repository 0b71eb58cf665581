"""Pulsar-style record classes, so that a class written for pulsar-client works with Herald by
changing only its import:

    class User(Record):
        name = String(required=True)
        age = Integer()

and AvroSchema(User) / JsonSchema(User) register the same definition pulsar-client's do (same names,
namespace, field order, nullability and defaults: a field is a union with null unless required, and
its default is written only with required_default=True). As in pulsar-client, a record's fields are
the ones its class body declares (not its bases'), a field that is not required may be None, and a
Boolean field defaults to False. Values are checked when set.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, ClassVar

from herald.common.errors import SchemaError


class Field:
    """One field of a Record: its Avro type, the Python values it takes, its default."""

    avro: ClassVar[str] = ""
    python_types: ClassVar[tuple[type, ...]] = ()

    def __init__(self, default: Any = None, required: bool = False, required_default: bool = False) -> None:
        self._required = required
        self._required_default = required_default
        self._default = self.validate_type("default", default) if default is not None else None

    def default(self) -> Any:
        return self._default

    def validate_type(self, name: str, value: Any) -> Any:
        """The value to store in field `name`; SchemaError if it is of the wrong type."""
        if value is None and not self._required:
            return self.default()
        if not isinstance(value, self.python_types) or (bool not in self.python_types and isinstance(value, bool)):
            expected = " or ".join(t.__name__ for t in self.python_types)
            raise SchemaError(f"field {name!r} takes {expected} values, got {type(value).__name__} {value!r}")
        return value

    def schema_info(self, defined: set[str]) -> Any:
        return self.avro

    def python_type(self) -> tuple[type, ...]:
        return self.python_types


class Null(Field):
    avro = "null"
    python_types = (type(None),)


class Boolean(Field):
    avro = "boolean"
    python_types = (bool,)

    def default(self) -> Any:
        return False if self._default is None else self._default


class Integer(Field):
    avro = "int"
    python_types = (int,)


class Long(Field):
    avro = "long"
    python_types = (int,)


class Float(Field):
    avro = "float"
    python_types = (float, int)


class Double(Field):
    avro = "double"
    python_types = (float, int)


class Bytes(Field):
    avro = "bytes"
    python_types = (bytes,)

    def validate_type(self, name: str, value: Any) -> Any:
        return super().validate_type(name, value.encode() if isinstance(value, str) else value)


class String(Field):
    avro = "string"
    python_types = (str,)

    def validate_type(self, name: str, value: Any) -> Any:
        return super().validate_type(name, value.decode() if isinstance(value, bytes) else value)


class CustomEnum(Field):
    """An Enum's members by name (a plain Enum class declared as a field is one too)."""

    avro = "enum"

    def __init__(self, enum_type: type[enum.Enum], default: Any = None, required: bool = False,
                 required_default: bool = False) -> None:
        if not (isinstance(enum_type, type) and issubclass(enum_type, enum.Enum)):
            raise SchemaError(f"CustomEnum takes an Enum class, got {enum_type!r}")
        self.enum_type = enum_type
        super().__init__(default, required, required_default)

    def validate_type(self, name: str, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, self.enum_type):
            return value
        if isinstance(value, str) and value in self.enum_type.__members__:
            return self.enum_type[value]
        for member in self.enum_type:
            if not isinstance(value, str) and member.value == value:
                return member
        raise SchemaError(f"field {name!r} takes {self.enum_type.__name__} members (or their names), "
                          f"got {value!r}")

    def schema_info(self, defined: set[str]) -> Any:
        if self.enum_type.__name__ in defined:
            return self.enum_type.__name__
        defined.add(self.enum_type.__name__)
        return {"type": "enum", "name": self.enum_type.__name__, "symbols": [m.name for m in self.enum_type]}

    def python_type(self) -> tuple[type, ...]:
        return (self.enum_type,)


class _Container(Field):
    def __init__(self, inner: Any, default: Any = None, required: bool = False,
                 required_default: bool = False) -> None:
        self.inner = _as_field(inner)
        if self.inner is None:
            raise SchemaError(f"{type(self).__name__} takes a Field or a Record, got {inner!r}")
        super().__init__(default, required, required_default)

    def _inner_definition(self, defined: set[str]) -> Any:
        return self.inner.schema_info(defined)

    def _check_item(self, name: str, item: Any) -> Any:
        if isinstance(self.inner, Record) and isinstance(item, Mapping):
            return type(self.inner)(**item)
        if item is None or not isinstance(item, self.inner.python_type()):
            raise SchemaError(f"{name} takes {type(self.inner).__name__} items, got {type(item).__name__} {item!r}")
        return item


class Array(_Container):
    avro = "array"
    python_types = (list,)

    def __init__(self, array_type: Any, default: Any = None, required: bool = False,
                 required_default: bool = False) -> None:
        super().__init__(array_type, default, required, required_default)

    def validate_type(self, name: str, value: Any) -> Any:
        if value is None:
            return None
        value = super().validate_type(name, value)
        return [self._check_item(f"array field {name!r}", item) for item in value]

    def schema_info(self, defined: set[str]) -> Any:
        return {"type": "array", "items": self._inner_definition(defined)}


class Map(_Container):
    avro = "map"
    python_types = (dict,)

    def __init__(self, value_type: Any, default: Any = None, required: bool = False,
                 required_default: bool = False) -> None:
        super().__init__(value_type, default, required, required_default)

    def validate_type(self, name: str, value: Any) -> Any:
        if value is None:
            return None
        value = super().validate_type(name, value)
        for key in value:
            if not isinstance(key, str):
                raise SchemaError(f"map field {name!r} takes str keys, got {type(key).__name__} {key!r}")
        return {key: self._check_item(f"map field {name!r}", item) for key, item in value.items()}

    def schema_info(self, defined: set[str]) -> Any:
        return {"type": "map", "values": self._inner_definition(defined)}


def _as_field(value: Any) -> Any:
    """What a class body's attribute declares: a Field, a Record (instance or class), an Enum
    class (a CustomEnum), or None if it declares no field."""
    if isinstance(value, Field | Record):
        return value
    if isinstance(value, type) and issubclass(value, Record) and value is not Record:
        return value()
    if isinstance(value, type) and issubclass(value, enum.Enum):
        return CustomEnum(value)
    return None


class _RecordMeta(type):
    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> _RecordMeta:
        fields: dict[str, Any] = {}
        if not any(isinstance(base, _RecordMeta) for base in bases):
            namespace["_fields"] = fields  # Record itself: no fields
            return super().__new__(mcs, name, bases, namespace)
        for attribute, value in list(namespace.items()):
            if attribute.startswith("__"):
                continue
            declared = _as_field(value)
            if declared is not None:
                fields[attribute] = declared
                del namespace[attribute]  # instances hold the values; the class keeps the declarations
        namespace["_fields"] = fields
        return super().__new__(mcs, name, bases, namespace)


class Record(metaclass=_RecordMeta):
    """A record type: subclass it and declare its fields as class attributes. An instance is a value
    (`User(name="ada", age=36)`); as a class attribute of another record it is a nested record field
    (`owner = User(required=True)`)."""

    _fields: ClassVar[dict[str, Any]]
    _options: tuple[Any, bool, bool]  # as a field declaration: default, required, required_default
    _avro_namespace: ClassVar[str | None] = None
    _sorted_fields: ClassVar[bool] = False

    def __init__(self, default: Any = None, required_default: bool = False, required: bool = False,
                 **values: Any) -> None:
        object.__setattr__(self, "_options", (default, required, required_default))
        for name in values:
            if name not in self._fields:
                raise SchemaError(f"{type(self).__name__} has no field {name!r} "
                                  f"(its fields: {', '.join(self._fields) or 'none'})")
        for name, declared in self._fields.items():
            if name in values:
                setattr(self, name, values[name])
            else:
                # pulsar-client puts an empty record in an unset record field, which does not encode
                # when the nested record has required fields; the declared default (None) does.
                object.__setattr__(self, name, declared.default())

    # The field-declaration side of a record instance (Pulsar's Field interface). Underscored, as
    # pulsar-client's, so that they cannot hide a field named `required`.
    @property
    def _required(self) -> bool:
        return bool(self._options[1])

    @property
    def _required_default(self) -> bool:
        return bool(self._options[2])

    def default(self) -> Any:
        return self._options[0]

    def python_type(self) -> tuple[type, ...]:
        return (type(self),)

    def validate_type(self, name: str, value: Any) -> Any:
        if value is None and not self._required:
            return self.default()
        if isinstance(value, Mapping):
            return type(self)(**value)
        if not isinstance(value, type(self)):
            raise SchemaError(f"field {name!r} takes {type(self).__name__} records, got {type(value).__name__}")
        return value

    def schema_info(self, defined: set[str]) -> Any:
        return type(self)._definition(defined)

    def __setattr__(self, name: str, value: Any) -> None:
        declared = self._fields.get(name)
        if declared is None:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}")
        object.__setattr__(self, name, declared.validate_type(name, value))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record) or other._fields.keys() != self._fields.keys():
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self._fields)

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({values})"

    @classmethod
    def schema(cls) -> dict[str, Any]:
        """The record's Avro definition (as pulsar-client's Record.schema())."""
        definition: dict[str, Any] = cls._definition(set())
        return definition

    @classmethod
    def _definition(cls, defined: set[str]) -> Any:
        full = f"{cls._avro_namespace}.{cls.__name__}" if cls._avro_namespace else cls.__name__
        if full in defined:
            return full
        defined.add(full)
        definition: dict[str, Any] = {"type": "record", "name": cls.__name__}
        if cls._avro_namespace:
            definition["namespace"] = cls._avro_namespace
        fields = []
        for name in sorted(cls._fields) if cls._sorted_fields else cls._fields:
            declared = cls._fields[name]
            avro = declared.schema_info(defined)
            entry: dict[str, Any] = {"name": name}
            if declared._required_default:
                default = declared.default()
                entry["default"] = default.name if isinstance(default, enum.Enum) else default
            entry["type"] = avro if declared._required else ["null", avro]
            fields.append(entry)
        definition["fields"] = fields
        return definition


def record_definition(cls: type[Record]) -> tuple[dict[str, Any], dict[str, type]]:
    """A Record class's definition and the classes its named types bind (records and enums)."""
    bindings: dict[str, type] = {}

    def bind(record: type[Record]) -> None:
        full = f"{record._avro_namespace}.{record.__name__}" if record._avro_namespace else record.__name__
        if full in bindings:
            return
        bindings[full] = record
        for declared in record._fields.values():
            while isinstance(declared, _Container):
                declared = declared.inner
            if isinstance(declared, Record):
                bind(type(declared))
            elif isinstance(declared, CustomEnum):
                bindings.setdefault(declared.enum_type.__name__, declared.enum_type)

    bind(cls)
    return cls.schema(), bindings
