"""Hypothesis strategies for any protobuf message, made from its descriptor: every field by its
type, names from a pool of real ones (mutated) or any unicode, ids and sizes at their edges, enum
values known and unknown, bytes empty to large, nested messages to a bounded depth, oneofs with one
member set; and mutations of a message's bytes (bit flips, truncation, splices, garbage)."""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import strategies as st

# Names the services know, so that requests reach past name validation; the checking traffic's
# tenant is never among them (nothing the fuzzer does may delete or rewind what it checks).
KNOWN_NAMES = (
    "", "public", "public/default", "persistent://public/default/fuzz-a", "fuzz-a", "fuzz-b",
    "persistent://public/default/fuzz-a-partition-0", "non-persistent://public/default/fuzz-np",
    "persistent://public/default/fuzz-parted", "persistent://fuzz-tenant/ns/t", "fuzz-tenant", "fuzz-tenant/ns",
    "sub", "s", "fuzz-sub", "herald-dlq-replay", "127.0.0.1:1", "producer-1", "cluster", "standalone-other",
)
EDGE_INTS = (0, 1, -1, 2, 7, 100, 1000, 2**15, 2**31 - 1, -(2**31), 2**32, 2**53, 2**63 - 1, -(2**63))
MAX_DEPTH = 3


def _mutated_name(name: str) -> st.SearchStrategy[str]:
    return st.one_of(
        st.just(name),
        st.builds(lambda n, s: n + s, st.just(name), st.text(max_size=8)),
        st.builds(lambda n, i: n[:i], st.just(name), st.integers(0, max(0, len(name)))),
        st.builds(lambda n: n.upper(), st.just(name)),
        st.builds(lambda n: n.replace("/", "//"), st.just(name)),
        st.builds(lambda n: n + "-partition-" , st.just(name)),
        st.builds(lambda n, i: f"{n}-partition-{i}", st.just(name), st.sampled_from(EDGE_INTS)),
    )


def strings() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(KNOWN_NAMES).flatmap(_mutated_name),
        st.text(max_size=40),
        st.text(alphabet=st.characters(codec="utf-8"), max_size=200),
        st.sampled_from(("\x00", "\ud7ff\ue000", "a" * 70_000, "é/ñ/日本", "../..", "persistent://", "://",
                         "a b", "%00", "\n", " " * 300)),
    )


def integers(bits: int, signed: bool) -> st.SearchStrategy[int]:
    low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    edges = [v for v in EDGE_INTS if low <= v <= high] + [low, high]
    return st.one_of(st.sampled_from(edges), st.integers(low, high), st.integers(max(low, -3), min(high, 300)))


def byte_strings() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=64),
        st.sampled_from((b"", b"\x00" * 16, b"\xff" * 1000)),
        st.integers(1, 2_000_000).map(lambda n: b"x" * n),
    )


_INT_TYPES = {
    FieldDescriptor.TYPE_INT32: (32, True), FieldDescriptor.TYPE_SINT32: (32, True),
    FieldDescriptor.TYPE_SFIXED32: (32, True), FieldDescriptor.TYPE_INT64: (64, True),
    FieldDescriptor.TYPE_SINT64: (64, True), FieldDescriptor.TYPE_SFIXED64: (64, True),
    FieldDescriptor.TYPE_UINT32: (32, False), FieldDescriptor.TYPE_FIXED32: (32, False),
    FieldDescriptor.TYPE_UINT64: (64, False), FieldDescriptor.TYPE_FIXED64: (64, False),
}


def _scalar(field: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind in _INT_TYPES:
        bits, signed = _INT_TYPES[kind]
        return integers(bits, signed)
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(allow_nan=True, allow_infinity=True, width=64 if kind == FieldDescriptor.TYPE_DOUBLE else 32)
    if kind == FieldDescriptor.TYPE_STRING:
        return strings()
    if kind == FieldDescriptor.TYPE_BYTES:
        return byte_strings()
    if kind == FieldDescriptor.TYPE_ENUM:
        known = [value.number for value in field.enum_type.values]
        # Open enums (proto3): unknown numbers are kept and reach the servicer.
        return st.one_of(st.sampled_from(known), st.sampled_from((-1, 99, 2**31 - 1)))
    if kind == FieldDescriptor.TYPE_MESSAGE:
        return messages(field.message_type, depth + 1)
    raise AssertionError(f"field type {kind} of {field.full_name} is not handled")


def _field_value(field: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        return st.dictionaries(_scalar(key, depth), _scalar(value, depth), max_size=3)
    if field.is_repeated:
        return st.lists(_scalar(field, depth), max_size=4 if depth < MAX_DEPTH else 0)
    return _scalar(field, depth)


def _set(message: Message, field: FieldDescriptor, value: Any) -> None:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        target = getattr(message, field.name)
        for key, item in value.items():
            if field.message_type.fields_by_name["value"].message_type is not None:
                target[key].CopyFrom(item)
            else:
                target[key] = item
    elif field.is_repeated:
        getattr(message, field.name).extend(value)
    elif field.message_type is not None:
        getattr(message, field.name).CopyFrom(value)
    else:
        setattr(message, field.name, value)


def messages(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[Message]:
    """Any message of `descriptor`'s type: each field set or not, at most one member per oneof."""
    from google.protobuf import message_factory

    cls = message_factory.GetMessageClass(descriptor)
    if depth > MAX_DEPTH:
        return st.just(cls())
    in_oneof = {field.name for oneof in descriptor.oneofs for field in oneof.fields}
    plain = [field for field in descriptor.fields if field.name not in in_oneof]

    @st.composite
    def build(draw: st.DrawFn) -> Message:
        message = cls()
        for field in plain:
            if draw(st.booleans()):
                _set(message, field, draw(_field_value(field, depth)))
        for oneof in descriptor.oneofs:
            chosen = draw(st.sampled_from([None, *oneof.fields]))
            if chosen is not None:
                _set(message, chosen, draw(_field_value(chosen, depth)))
        return message

    return build()


def mutated(raw: bytes) -> st.SearchStrategy[bytes]:
    """`raw` damaged: a flipped byte, cut short, a slice repeated, garbage spliced in or added."""
    n = len(raw)

    def flip(position: int, value: int) -> bytes:
        if not n:
            return bytes([value])
        i = position % n
        return raw[:i] + bytes([raw[i] ^ (value or 1)]) + raw[i + 1:]

    return st.one_of(
        st.builds(flip, st.integers(0, 10_000), st.integers(0, 255)),
        st.integers(0, max(0, n - 1)).map(lambda i: raw[:i]),
        st.tuples(st.integers(0, n), st.binary(min_size=1, max_size=16)).map(lambda t: raw[:t[0]] + t[1] + raw[t[0]:]),
        st.binary(max_size=32).map(lambda tail: raw + tail),
        st.just(raw + raw),
        st.binary(max_size=64),
    )
