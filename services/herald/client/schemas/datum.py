"""Values to and from their schema-level form, compiled once from an Avro definition (which JSON
schemas use too): an application's record objects become the dicts fastavro writes (`to_avro`) or
the JSON documents sent as text (`to_json`), and back. Records and enums named in `bindings` are
built as those classes (dataclasses, Record subclasses, Enums); the others as `record_factory`
makes them (dicts, or GenericRecords for AutoConsume).

Values are checked on the way out (a str in a long field is refused with the field's path named,
before any bytes are written) and JSON documents on the way in; fastavro's own reads are trusted.
"""

from __future__ import annotations

import abc
import base64
import binascii
import enum
from collections.abc import Callable, Mapping
from typing import Any

from herald.common.errors import SchemaError

RecordFactory = Callable[[str, dict[str, Any]], Any]
"""Builds an unbound record from its full name and its fields."""

_MISSING: Any = object()
_INT_RANGE = {"int": 2 ** 31, "long": 2 ** 63}


def plain_record(_name: str, fields: dict[str, Any]) -> dict[str, Any]:
    return fields


class Mismatch(Exception):
    """A value does not fit its schema; raised at the leaf, the path grows on the way up."""

    def __init__(self, expected: str, value: Any) -> None:
        super().__init__(expected)
        self.expected = expected
        self.value = value
        self.path: list[str] = []

    def describe(self, root: str) -> str:
        where = root + "".join(self.path)
        shown = repr(self.value)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        return f"{where}: expected {self.expected}, got {type(self.value).__name__} {shown}"


class Node(abc.ABC):
    """One type of the definition."""

    expected: str

    @abc.abstractmethod
    def to_avro(self, value: Any) -> Any: ...

    @abc.abstractmethod
    def from_avro(self, datum: Any) -> Any: ...

    def to_json(self, value: Any) -> Any:
        return self.to_avro(value)

    def from_json(self, doc: Any) -> Any:
        self.to_avro(doc)  # the JSON form is the value itself: check it
        return doc

    def from_default(self, default: Any) -> Any:
        """A field's default as the definition writes it (Avro's JSON encoding of defaults)."""
        return self.from_json(default)

    def accepts_datum(self, datum: Any) -> bool:
        """Whether fastavro's datum may be of this branch (for unions)."""
        try:
            self.to_avro(datum)
        except Mismatch:
            return False
        return True


class _Null(Node):
    expected = "null"

    def to_avro(self, value: Any) -> Any:
        if value is not None:
            raise Mismatch("null", value)
        return None

    def from_avro(self, datum: Any) -> Any:
        return None


class _Boolean(Node):
    expected = "boolean"

    def to_avro(self, value: Any) -> Any:
        if value.__class__ is not bool:
            raise Mismatch("boolean", value)
        return value

    def from_avro(self, datum: Any) -> Any:
        return datum


class _Integer(Node):
    def __init__(self, kind: str) -> None:
        self.expected = kind
        self._limit = _INT_RANGE[kind]

    def to_avro(self, value: Any) -> Any:
        if not isinstance(value, int) or value.__class__ is bool or not -self._limit <= value < self._limit:
            raise Mismatch(f"{self.expected} (a {self._limit.bit_length()}-bit integer)", value)
        return value

    def from_avro(self, datum: Any) -> Any:
        return datum


class _Float(Node):
    def __init__(self, kind: str) -> None:
        self.expected = kind

    def to_avro(self, value: Any) -> Any:
        if not isinstance(value, float | int) or value.__class__ is bool:
            raise Mismatch(f"{self.expected} (a number)", value)
        return value

    def from_avro(self, datum: Any) -> Any:
        return datum


class _String(Node):
    expected = "string"

    def to_avro(self, value: Any) -> Any:
        if not isinstance(value, str):
            raise Mismatch("string", value)
        return value

    def from_avro(self, datum: Any) -> Any:
        return datum


class _Bytes(Node):
    """Bytes are base64 text in JSON documents (as Jackson writes byte[] for Pulsar's Java client)."""

    def __init__(self, size: int | None = None) -> None:
        self.size = size
        self.expected = "bytes" if size is None else f"fixed ({size} bytes)"

    def to_avro(self, value: Any) -> Any:
        if not isinstance(value, bytes | bytearray) or (self.size is not None and len(value) != self.size):
            raise Mismatch(self.expected, value)
        return bytes(value)

    def from_avro(self, datum: Any) -> Any:
        return datum

    def to_json(self, value: Any) -> Any:
        return base64.b64encode(self.to_avro(value)).decode()

    def from_json(self, doc: Any) -> Any:
        if not isinstance(doc, str):
            raise Mismatch(f"{self.expected} as base64 text", doc)
        try:
            return self.to_avro(base64.b64decode(doc, validate=True))
        except binascii.Error:
            raise Mismatch(f"{self.expected} as base64 text", doc) from None

    def from_default(self, default: Any) -> Any:
        # Avro writes a bytes default as text whose code points are the bytes.
        return default.encode("latin-1") if isinstance(default, str) else default


class _Array(Node):
    def __init__(self, items: Node) -> None:
        self.items = items
        self.expected = "array (a list)"

    def _each(self, value: Any, convert: Callable[[Any], Any]) -> list[Any]:
        if not isinstance(value, list | tuple):
            raise Mismatch(self.expected, value)
        out = []
        for index, item in enumerate(value):
            try:
                out.append(convert(item))
            except Mismatch as exc:
                exc.path.insert(0, f"[{index}]")
                raise
        return out

    def to_avro(self, value: Any) -> Any:
        return self._each(value, self.items.to_avro)

    def from_avro(self, datum: Any) -> Any:
        return [self.items.from_avro(item) for item in datum]

    def to_json(self, value: Any) -> Any:
        return self._each(value, self.items.to_json)

    def from_json(self, doc: Any) -> Any:
        return self._each(doc, self.items.from_json)

    def from_default(self, default: Any) -> Any:
        return self._each(default, self.items.from_default)


class _Map(Node):
    def __init__(self, values: Node) -> None:
        self.values = values
        self.expected = "map (a dict with str keys)"

    def _each(self, value: Any, convert: Callable[[Any], Any]) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise Mismatch(self.expected, value)
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise Mismatch("a str map key", key)
            try:
                out[key] = convert(item)
            except Mismatch as exc:
                exc.path.insert(0, f"[{key!r}]")
                raise
        return out

    def to_avro(self, value: Any) -> Any:
        return self._each(value, self.values.to_avro)

    def from_avro(self, datum: Any) -> Any:
        return {key: self.values.from_avro(item) for key, item in datum.items()}

    def to_json(self, value: Any) -> Any:
        return self._each(value, self.values.to_json)

    def from_json(self, doc: Any) -> Any:
        return self._each(doc, self.values.from_json)

    def from_default(self, default: Any) -> Any:
        return self._each(default, self.values.from_default)


class _Enum(Node):
    """Symbols travel as their names; a bound Enum class is built back."""

    def __init__(self, name: str, symbols: list[str], bound: type[enum.Enum] | None) -> None:
        self.symbols = frozenset(symbols)
        self.bound = bound
        self.expected = f"enum {name} (one of {', '.join(symbols)})"

    def to_avro(self, value: Any) -> Any:
        symbol = value.name if isinstance(value, enum.Enum) else value
        if not isinstance(symbol, str) or symbol not in self.symbols or (
                self.bound is not None and isinstance(value, enum.Enum) and not isinstance(value, self.bound)):
            raise Mismatch(self.expected, value)
        return symbol

    def from_avro(self, datum: Any) -> Any:
        return self.bound[datum] if self.bound is not None else datum

    def from_json(self, doc: Any) -> Any:
        if self.bound is not None and doc not in self.symbols:
            # pulsar-client's Python JSON schema writes an enum member's value, not its name.
            try:
                return self.bound(doc)
            except ValueError:
                raise Mismatch(self.expected, doc) from None
        return self.from_avro(self.to_avro(doc))

    def accepts_datum(self, datum: Any) -> bool:
        return datum in self.symbols


class _Union(Node):
    def __init__(self, branches: list[Node]) -> None:
        self.branches = branches
        self.nullable = any(isinstance(branch, _Null) for branch in branches)
        self.expected = " or ".join(branch.expected for branch in branches)

    def _first(self, value: Any, method: str) -> Any:
        if value is None and self.nullable:
            return None
        for branch in self.branches:
            try:
                return getattr(branch, method)(value)
            except Mismatch:
                continue
        raise Mismatch(self.expected, value)

    def to_avro(self, value: Any) -> Any:
        return self._first(value, "to_avro")

    def to_json(self, value: Any) -> Any:
        return self._first(value, "to_json")

    def from_json(self, doc: Any) -> Any:
        return self._first(doc, "from_json")

    def from_default(self, default: Any) -> Any:
        # Avro: a union's default belongs to its first branch.
        return self.branches[0].from_default(default)

    def from_avro(self, datum: Any) -> Any:
        if datum is None:
            return None
        for branch in self.branches:
            if not isinstance(branch, _Null) and branch.accepts_datum(datum):
                return branch.from_avro(datum)
        return datum

    def accepts_datum(self, datum: Any) -> bool:
        return any(branch.accepts_datum(datum) for branch in self.branches)


class _Record(Node):
    def __init__(self, name: str, bound: type | None, factory: RecordFactory) -> None:
        self.name = name
        self.bound = bound
        self.factory = factory
        self.fields: list[tuple[str, Node, Any]] = []  # name, type, default (or _MISSING)
        self.expected = f"record {name}" + (f" ({bound.__name__})" if bound is not None else " (a mapping)")

    def _read(self, value: Any) -> Callable[[str, Any], Any]:
        if self.bound is not None:
            if not isinstance(value, self.bound):
                raise Mismatch(self.expected, value)
            return lambda field, default: getattr(value, field)
        if not isinstance(value, Mapping):
            raise Mismatch(self.expected, value)
        return lambda field, default: value.get(field, default)

    def _out(self, value: Any, to_json: bool) -> dict[str, Any]:
        read = self._read(value)
        out = {}
        for name, node, default in self.fields:
            item = read(name, _MISSING)
            try:
                if item is _MISSING:
                    if default is _MISSING:
                        raise Mismatch("a value (the field has no default)", None)
                    item = node.from_default(default)
                out[name] = node.to_json(item) if to_json else node.to_avro(item)
            except Mismatch as exc:
                exc.path.insert(0, f".{name}")
                raise
        return out

    def to_avro(self, value: Any) -> Any:
        return self._out(value, False)

    def to_json(self, value: Any) -> Any:
        return self._out(value, True)

    def _build(self, fields: dict[str, Any]) -> Any:
        if self.bound is None:
            return self.factory(self.name, fields)
        return self.bound(**fields)

    def from_avro(self, datum: Any) -> Any:
        return self._build({name: node.from_avro(datum[name]) for name, node, _ in self.fields})

    def from_json(self, doc: Any) -> Any:
        """Fields the document lacks take the definition's default; ones it has beyond the
        definition are ignored (a writer with a newer version of the schema)."""
        if not isinstance(doc, Mapping):
            raise Mismatch(f"record {self.name} (a JSON object)", doc)
        fields = {}
        for name, node, default in self.fields:
            try:
                if name in doc:
                    fields[name] = node.from_json(doc[name])
                elif default is not _MISSING:
                    fields[name] = node.from_default(default)
                else:
                    raise Mismatch("a value (the field has no default)", None)
            except Mismatch as exc:
                exc.path.insert(0, f".{name}")
                raise
        return self._build(fields)

    def accepts_datum(self, datum: Any) -> bool:
        return isinstance(datum, Mapping) and {name for name, _, _ in self.fields} <= datum.keys()


_PRIMITIVES: dict[str, Callable[[], Node]] = {
    "null": _Null, "boolean": _Boolean, "int": lambda: _Integer("int"), "long": lambda: _Integer("long"),
    "float": lambda: _Float("float"), "double": lambda: _Float("double"), "string": _String, "bytes": _Bytes,
}


class Compiler:
    """Turns a definition into Nodes; named types are compiled once and referenced by name."""

    def __init__(self, bindings: Mapping[str, type], factory: RecordFactory) -> None:
        self.bindings = bindings
        self.factory = factory
        self.named: dict[str, Node] = {}

    def compile(self, schema: Any, namespace: str = "") -> Node:
        if isinstance(schema, str):
            return self._reference(schema, namespace)
        if isinstance(schema, list):
            return _Union([self.compile(branch, namespace) for branch in schema])
        if not isinstance(schema, Mapping) or "type" not in schema:
            raise SchemaError(f"not an Avro type: {schema!r}")
        kind = schema["type"]
        if kind in ("record", "error", "enum", "fixed"):
            return self._named(schema, namespace)
        if kind == "array":
            return _Array(self.compile(schema["items"], namespace))
        if kind == "map":
            return _Map(self.compile(schema["values"], namespace))
        return self.compile(kind, namespace)  # {"type": "long", "logicalType": ...}: the underlying type

    def _reference(self, name: str, namespace: str) -> Node:
        if name in _PRIMITIVES:
            return _PRIMITIVES[name]()
        for candidate in (_full_name(name, namespace), name):
            if candidate in self.named:
                return self.named[candidate]
        raise SchemaError(f"the definition names type {name!r} before defining it")

    def _named(self, schema: Mapping[str, Any], namespace: str) -> Node:
        name = _full_name(str(schema["name"]), str(schema.get("namespace", namespace)))
        inner = name.rpartition(".")[0]
        # A nested type without a namespace takes its parent's (Avro's rule), which the classes
        # binding it may not spell out: the unqualified name finds them too.
        bound = self.bindings.get(name) or self.bindings.get(name.rpartition(".")[2])
        node: Node
        if schema["type"] == "enum":
            enum_class = bound if isinstance(bound, type) and issubclass(bound, enum.Enum) else None
            node = _Enum(name, list(schema["symbols"]), enum_class)
        elif schema["type"] == "fixed":
            node = _Bytes(int(schema["size"]))
        else:
            record = _Record(name, bound, self.factory)
            self.named[name] = record  # before its fields: a record may contain itself
            for field in schema["fields"]:
                record.fields.append((str(field["name"]), self.compile(field["type"], inner),
                                      field.get("default", _MISSING)))
            node = record
        self.named[name] = node
        return node


def _full_name(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def compile_definition(definition: Any, bindings: Mapping[str, type] | None = None,
                       factory: RecordFactory = plain_record) -> Node:
    return Compiler(bindings or {}, factory).compile(definition)


def checked(root: str, convert: Callable[[Any], Any], value: Any) -> Any:
    """convert(value), a Mismatch said as a SchemaError naming where (root is the schema's name)."""
    try:
        return convert(value)
    except Mismatch as exc:
        raise SchemaError(exc.describe(root)) from None
