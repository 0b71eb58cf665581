"""Hypothesis strategies for a hostile tenant (tests/fuzz/test_hostile_fuzz.py).

Hostile entries look valid (encode_entry, a good checksum, mostly) while their EntryMetadata takes
extreme values: message counts of 0, -1, 2^31-1 or far more than the payload holds, uncompressed
sizes that lie up and down, unknown or mismatched codecs, chunk fields that disagree, another
producer's name, sequence ids at the int64 edges, deliver-at times far ahead or negative, huge
keys and properties; payloads are compression bombs (a few hundred KB inflating to hundreds of MB),
truncated or corrupt data for each codec, records whose framing lies (lengths past the end, key and
property lengths, unknown flags).

Hostile admin requests: any AdminService method, its resource fields (tenant, namespace, topic, a
tenant's name, the dead-letter policy's topics) each the attacker's own, the victim's, malformed or
look-alike, or empty, in every combination; the other fields random."""

from __future__ import annotations

import functools
import itertools
import struct
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import lz4.block
import zstandard
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from herald.api.v1 import admin_pb2, broker_pb2, common_pb2, entry_pb2
from herald.common.codec.checksum import crc32c
from herald.common.codec.compression import compress
from herald.common.codec.entry import (
    FLAG_EVENT_TIME,
    FLAG_KEY,
    FLAG_PROPERTIES,
    FLAG_SEQUENCE_ID,
    RECORD_HEADER,
    EntryMetadata,
    encode_entry,
    pack_record,
)
from hypothesis import strategies as st

from tests.fuzz.strategies import messages, strings
from tests.fuzz.tenants import (
    ADMIN_NAMESPACE,
    ATTACKER,
    ATTACKER_ADMIN,
    VICTIM,
    VICTIM_ADMIN,
    VICTIM_APP,
    VICTIM_NAMESPACES,
    VICTIM_PARTED,
    VICTIM_PLAIN,
    VICTIM_TOPICS,
)

MIB = 1 << 20
MAX_MESSAGE_SIZE = 5 * MIB  # the broker's default
INT32 = (0, 1, -1, 2, 2**31 - 1, -(2**31))
INT64 = (0, 1, -1, 2**31 - 1, 2**53, 2**63 - 1, -(2**63))
CODECS = (entry_pb2.LZ4, entry_pb2.ZLIB, entry_pb2.ZSTD)
UNKNOWN_CODECS = (4, 99, -1, 2**31 - 1)
_U16, _U32 = struct.Struct("<H"), struct.Struct("<I")


# ---- compression bombs, made once ----

@functools.cache
def bomb(kind: str) -> tuple[int, bytes]:
    """(the size it inflates to, the compressed bytes): zeros, which are also empty records."""
    chunk = bytes(MIB)
    if kind == "zlib":  # 400 MiB in about 400 KB
        deflater = zlib.compressobj(9)
        return 400 * MIB, b"".join(deflater.compress(chunk) for _ in range(400)) + deflater.flush()
    if kind in ("zstd", "zstd-unsized"):  # 1 GiB in 32 KB; the frame header declares it, or not
        sized = kind == "zstd"
        writer = zstandard.ZstdCompressor().compressobj(size=1024 * MIB if sized else -1)
        return 1024 * MIB, b"".join(writer.compress(chunk) for _ in range(1024)) + writer.flush()
    if kind == "zstd-window":  # a frame asking for a 1 GiB window to decode 100 bytes
        params = zstandard.ZstdCompressionParameters(window_log=30)
        writer = zstandard.ZstdCompressor(compression_params=params).compressobj()
        return 100, writer.compress(b"\x00" * 100) + writer.flush()
    if kind == "lz4":  # the max message size of zeros in 20 KB (LZ4 blocks carry no size)
        return MAX_MESSAGE_SIZE, bytes(lz4.block.compress(bytes(MAX_MESSAGE_SIZE), store_size=False))
    raise AssertionError(kind)


BOMBS: dict[int, tuple[str, ...]] = {
    entry_pb2.ZLIB: ("zlib",), entry_pb2.ZSTD: ("zstd", "zstd-unsized", "zstd-window"), entry_pb2.LZ4: ("lz4",)}


# ---- payloads: records, honest and lying ----

def _lie(header: tuple[int, int], tail: bytes = b"") -> bytes:
    return RECORD_HEADER.pack(*header) + tail


LYING_RECORDS = {
    "value past the end": _lie((1000, 0), b"abc"),
    "value length 2^32-1": _lie((2**32 - 1, 0), b"x"),
    "key past the end": _lie((3, FLAG_KEY), _U16.pack(60_000) + b"k"),
    "key not utf-8": _lie((1, FLAG_KEY), _U16.pack(2) + b"\xff\xfe" + b"v"),
    "65535 properties, one there": _lie((1, FLAG_PROPERTIES), _U16.pack(65_535) + _U16.pack(1) + b"a"
                                        + _U32.pack(1) + b"b" + b"v"),
    "property value 2^32-1 long": _lie((1, FLAG_PROPERTIES), _U16.pack(1) + _U16.pack(1) + b"a"
                                       + _U32.pack(2**32 - 1) + b"v"),
    "event time cut short": _lie((0, FLAG_EVENT_TIME), b"\x00\x00"),
    "sequence id cut short": _lie((0, FLAG_SEQUENCE_ID), b"\x01"),
    "unknown flags": _lie((1, 0xF0), b"v"),
    "every flag, nothing after": _lie((1, 0xFF)),
    "header cut short": b"\x01\x00",
    "10,000 empty records": bytes(5 * 10_000),
}


@st.composite
def _records(draw: st.DrawFn) -> tuple[bytes, int]:
    """Well-framed records (the payload, how many), some with huge keys or properties."""
    payload = bytearray()
    count = draw(st.integers(0, 4))
    for _ in range(count):
        value = draw(st.one_of(st.binary(max_size=32), st.sampled_from((b"", b"v" * 60_000))))
        key = draw(st.one_of(st.none(), st.text(max_size=12), st.just("k" * 30_000)))
        properties = draw(st.one_of(
            st.none(), st.dictionaries(st.text(max_size=8), st.text(max_size=16), max_size=3),
            st.just({f"p{i}": "v" * 100 for i in range(400)})))
        pack_record(payload, value, key=key, event_time=draw(st.sampled_from(INT64)),
                    sequence_id=draw(st.one_of(st.none(), st.sampled_from(INT64))), properties=properties)
    return bytes(payload), count


@st.composite
def payloads(draw: st.DrawFn) -> tuple[bytes, int, str]:
    """An entry's uncompressed payload: (bytes, honest records in it, what it is)."""
    honest, count = draw(_records())
    kind = draw(st.sampled_from(("records", "records", "records", "lie", "lie", "cut", "garbage")))
    if kind == "lie":
        lie = draw(st.sampled_from(sorted(LYING_RECORDS)))
        return honest + LYING_RECORDS[lie], count, f"{count} records then: {lie}"
    if kind == "cut" and honest:
        cut = draw(st.integers(0, len(honest) - 1))
        return honest[:cut], 0, f"{count} records cut at {cut} of {len(honest)}"
    if kind == "garbage":
        return draw(st.binary(max_size=200)), 0, "random bytes"
    return honest, count, f"{count} records"


@st.composite
def compressed(draw: st.DrawFn, payload: bytes) -> tuple[int, bytes, int, str]:
    """(codec, the entry's payload, uncompressed_size claimed, what it is) for `payload`."""
    codec = draw(st.sampled_from((entry_pb2.NONE, entry_pb2.NONE, *CODECS, *CODECS, *UNKNOWN_CODECS)))
    if codec == entry_pb2.NONE:
        return codec, payload, draw(st.sampled_from((0, len(payload), 2**31 - 1, -1))), "uncompressed"
    honest_codec = codec if codec in CODECS else entry_pb2.ZLIB
    honest = compress(honest_codec, payload)
    how = draw(st.sampled_from(("honest", "honest", "bomb", "truncated", "flipped", "mismatched", "doubled",
                                "garbage")))
    true_size = len(payload)
    if how == "bomb" and codec in BOMBS:
        kind = draw(st.sampled_from(BOMBS[codec]))
        true_size, data = bomb(kind)
        how = f"{kind} bomb inflating to {true_size}"
    elif how == "truncated" and honest:
        data = honest[:draw(st.integers(0, len(honest) - 1))]
    elif how == "flipped" and honest:
        at, bits = draw(st.integers(0, len(honest) - 1)), draw(st.integers(1, 255))
        data = honest[:at] + bytes([honest[at] ^ bits]) + honest[at + 1:]
    elif how == "mismatched":
        other = draw(st.sampled_from([c for c in CODECS if c != honest_codec]))
        data = compress(other, payload)
        how = f"compressed with {entry_pb2.CompressionType.Name(other)}"
    elif how == "doubled":  # two streams (ZSTD reads across frames)
        data = honest + honest
    elif how == "garbage":
        data = draw(st.binary(max_size=300))
    else:
        data, how = honest, "honest"
    claimed = draw(st.sampled_from((true_size, true_size, max(0, true_size - 1), true_size + 1, 0, -1, 100,
                                    MAX_MESSAGE_SIZE + 10 * 1024 + 1, 2**31 - 1, -(2**31))))
    name = entry_pb2.CompressionType.Name(codec) if codec in CODECS else f"codec {codec}"  # type: ignore[arg-type]
    return codec, data, claimed, f"{name} ({how}), claiming {claimed} bytes of {true_size}"


# ---- entries ----

@dataclass(frozen=True)
class HostileEntry:
    """An entry to send: its metadata (the producer's name filled in at send unless `spoofed`),
    payload, what the SendEntry says, and a header made to lie."""

    metadata: entry_pb2.EntryMetadata
    payload: bytes
    spoofed: bool
    send_sequence_ids: tuple[int, int] | None  # (sequence_id, highest_sequence_id); None: the metadata's
    send_num_messages: int | None  # None: the metadata's
    deliver_in_ms: int | None  # deliver-at relative to the send (None: metadata's, absolute)
    header: str
    what: str = ""

    def send_entry(self, producer_name: str) -> broker_pb2.SendEntry:
        metadata = EntryMetadata()
        metadata.CopyFrom(self.metadata)
        if not self.spoofed:
            metadata.producer_name = producer_name
        if self.deliver_in_ms is not None:
            metadata.deliver_at_time = int(time.time() * 1000) + self.deliver_in_ms
        entry = _tamper(encode_entry(metadata, self.payload), self.header)
        sequence_id, highest = self.send_sequence_ids or (metadata.sequence_id, metadata.highest_sequence_id)
        count = metadata.num_messages if self.send_num_messages is None else self.send_num_messages
        return broker_pb2.SendEntry(sequence_id=sequence_id, highest_sequence_id=highest, num_messages=count,
                                    entry=entry)

    def __repr__(self) -> str:  # hypothesis prints failing examples: the story, not 400 KB of bytes
        return f"HostileEntry({self.what}; metadata {_short(self.metadata)})"


def _short(metadata: entry_pb2.EntryMetadata) -> str:
    shown = EntryMetadata()
    shown.CopyFrom(metadata)
    for name in ("partition_key", "traceparent"):
        if len(getattr(shown, name)) > 40:
            setattr(shown, name, f"<{len(getattr(shown, name))} chars>")
    if len(shown.ordering_key) > 40:
        shown.ordering_key = b"<%d bytes>" % len(shown.ordering_key)
    return str(shown).replace("\n", " ")


HEADERS = ("",) * 36 + ("bad checksum", "bad magic", "metadata past the end", "cut short")


def _tamper(entry: bytes, how: str) -> bytes:
    if how == "bad checksum":
        return entry[:2] + bytes([entry[2] ^ 0xFF]) + entry[3:]
    if how == "bad magic":
        return b"\xff\xff" + entry[2:]
    if how == "metadata past the end":  # still checksummed: the length is part of what the crc covers
        body = struct.pack(">I", len(entry) + 100) + entry[10:]
        return entry[:2] + struct.pack(">I", crc32c(body)) + body
    if how == "cut short":
        return entry[:7]
    return entry


def _near(value: int, low: int, high: int) -> st.SearchStrategy[int]:
    return st.sampled_from(sorted({min(high, max(low, v)) for v in (value, value - 1, value + 1)}))


@st.composite
def hostile_entries(draw: st.DrawFn) -> HostileEntry:
    payload, count, what = draw(payloads())
    codec, data, claimed, how = draw(compressed(payload))
    sequence_id = draw(st.one_of(st.sampled_from(INT64), st.integers(0, 10_000)))
    highest = draw(st.one_of(st.sampled_from(INT64), _near(sequence_id + max(count, 1) - 1, -(2**63), 2**63 - 1)))
    honest = max(count, 1)
    num_messages = draw(st.one_of(st.just(honest), st.just(honest), st.sampled_from((*INT32, count + 1, 1000))))
    metadata = EntryMetadata(
        sequence_id=sequence_id, highest_sequence_id=highest, num_messages=num_messages,
        publish_time=draw(st.one_of(st.just(int(time.time() * 1000)), st.sampled_from(INT64))),
        compression=codec, uncompressed_size=claimed, batched=draw(st.booleans()),  # type: ignore[arg-type]
        encryption_keys=draw(st.one_of(st.just([]), st.just([]), st.lists(st.text(max_size=8), max_size=2))),
        partition_key=draw(st.one_of(st.just(""), st.text(max_size=12), st.just("k" * 100_000))),
        ordering_key=draw(st.one_of(st.just(b""), st.binary(max_size=12), st.just(b"o" * 100_000))),
        traceparent=draw(st.sampled_from(("", "", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                                          "00-" + "0" * 32 + "-" + "0" * 16 + "-00", "ff-zz", "x" * 10_000, "\x00"))),
    )
    if draw(st.integers(0, 3)) == 0:  # a chunk, its fields agreeing or not
        metadata.uuid = draw(st.sampled_from(("", "u-1", "u-2", "\x00", "u" * 1000)))
        metadata.num_chunks = draw(st.sampled_from((1, 2, 3, 0, -1, 2**31 - 1)))
        metadata.chunk_id = draw(st.sampled_from((0, 0, 1, 2, -1, 2**31 - 1)))
        metadata.total_chunk_size = draw(st.sampled_from(
            (len(payload), len(data), len(data) + 1, max(0, len(data) - 1), 0, -1, 2**31 - 1, MAX_MESSAGE_SIZE + 1)))
    deliver = draw(st.sampled_from(("none", "none", "none", "abs", "rel")))
    deliver_in_ms = None
    if deliver == "abs":
        metadata.deliver_at_time = draw(st.sampled_from((*INT64, 4_102_444_800_000)))  # ... and year 2100
    elif deliver == "rel":
        deliver_in_ms = draw(st.sampled_from((-60_000, 300, 2000)))
    spoofed = draw(st.integers(0, 9)) == 0
    if spoofed:
        metadata.producer_name = draw(st.sampled_from(("", "marker", "someone-else", "p" * 1000)))
    send_sequence_ids = None
    if draw(st.integers(0, 5)) == 0:
        send_sequence_ids = (draw(st.sampled_from(INT64)), draw(st.sampled_from(INT64)))
    send_num_messages = draw(st.sampled_from(INT32)) if draw(st.integers(0, 5)) == 0 else None
    header = draw(st.sampled_from(HEADERS))
    return HostileEntry(metadata, data, spoofed, send_sequence_ids, send_num_messages, deliver_in_ms, header,
                        f"{what}; {how}{'; header: ' + header if header else ''}")


# ---- admin requests ----

CATEGORIES = ("own", "victim", "malformed", "empty")
_OWN_TOPIC = f"persistent://{ADMIN_NAMESPACE}/t"
NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    "own": {
        "tenant": (ATTACKER,),
        "namespace": (ADMIN_NAMESPACE,),
        "topic": (_OWN_TOPIC, f"{ADMIN_NAMESPACE}/t", f"persistent://{ADMIN_NAMESPACE}/parted",
                  f"persistent://{ADMIN_NAMESPACE}/parted-partition-1", f"non-persistent://{ADMIN_NAMESPACE}/np",
                  f"persistent://{ADMIN_NAMESPACE}/new", f"{_OWN_TOPIC}-sub-a-DLQ"),
    },
    "victim": {
        "tenant": (VICTIM,),
        "namespace": VICTIM_NAMESPACES,
        "topic": (VICTIM_PLAIN, *VICTIM_TOPICS, f"{VICTIM}/ns/plain", f"non-persistent://{VICTIM}/ns/plain",
                  f"{VICTIM_PLAIN}-dead", f"{VICTIM_PARTED}-partition-99", f"persistent://{VICTIM}/ns/new",
                  f"persistent://{VICTIM}/fresh/new"),
    },
    # Malformed, and look-alikes of the victim's names that are someone else's (or nobody's).
    "malformed": {
        "tenant": (" bob", "bob ", "BOB", "Bob", "bob/ns", "b\x00ob", "bob\n", "bób", "b" * 600, "..", "*",
                   "bob:", "bob=", "public"),
        "namespace": ("bob", "bob/", "/ns", "bob/ns/", "bob//ns", "bob/ns/plain", "Bob/ns", "bob/ns ", " bob/ns",
                      "bob/../alice/admin", "alice/admin/../../bob/ns", "persistent://bob/ns", "bob\\ns", "bob/n\x00s",
                      "b" * 600 + "/ns", "public/default"),
        "topic": ("persistent://bob/ns", "persistent://bob/ns/", "persistent://bob//plain", "persistent:///ns/plain",
                  "persistent://bob/ns/plain/x", "Persistent://bob/ns/plain", "persistent:/bob/ns/plain",
                  "persistent://bob/ns/plain ", "bob/ns", "bob/ns/plain/", "persistent://bob/ns/plain\x00",
                  "persistent://BOB/ns/plain", "persistent://bob/ns/" + "p" * 600, "://bob/ns/plain", "plain",
                  "persistent://alice/admin/../../bob/ns/plain", "persistent://bob%2Fns/x/plain"),
    },
    "empty": {"tenant": ("",), "namespace": ("",), "topic": ("",)},
}
SUBSCRIPTIONS = ("sub-a", "sub-b", "sub-p", "sub-q", "checker", "s", "herald-dlq-replay", "")
ROLES = (ATTACKER_ADMIN, VICTIM_ADMIN, VICTIM_APP, "admin", "mallory", "")
ACTIONS = ("produce", "consume", "admin", "", "PRODUCE")

# (path, kind): the fields of a request that name a resource; a path "a.b" is field b of field a.
Path = tuple[str, ...]
_TENANT_NAMED = {"Tenant", "TenantRequest", "DeleteTenantRequest"}


def resource_fields(descriptor: Descriptor) -> list[tuple[Path, str]]:
    found: list[tuple[Path, str]] = []
    for item in descriptor.fields:
        if item.type == FieldDescriptor.TYPE_STRING and not item.is_repeated:
            if item.name in ("tenant", "namespace", "topic"):
                found.append(((item.name,), item.name))
            elif item.name == "name" and descriptor.name in _TENANT_NAMED:
                found.append(((item.name,), "tenant"))
        elif item.message_type is not None and item.message_type.name == "DeadLetterPolicy":
            found += [((item.name, "dead_letter_topic"), "topic"), ((item.name, "retry_letter_topic"), "topic")]
    return found


def _set_path(request: Message, path: Path, value: Any) -> None:
    target = request
    for name in path[:-1]:
        target = getattr(target, name)
    setattr(target, path[-1], value)


def get_path(request: Message, path: Path) -> Any:
    value: Any = request
    for name in path:
        value = getattr(value, name)
    return value


@dataclass(frozen=True)
class AdminCall:
    method: str
    request: Message
    categories: tuple[tuple[Path, str], ...]  # each resource field's category

    @property
    def fields(self) -> list[tuple[Path, str]]:
        return resource_fields(ADMIN_METHODS_BY_NAME[self.method].input_type)

    @property
    def names_victim_by_category(self) -> bool:
        return any(category == "victim" for _, category in self.categories)

    def __repr__(self) -> str:
        shown = {".".join(path): (category, get_path(self.request, path)) for path, category in self.categories}
        return f"AdminCall({self.method}, {shown}, request={str(self.request)[:600]!r})"


ADMIN_METHODS: list[MethodDescriptor] = list(admin_pb2.DESCRIPTOR.services_by_name["AdminService"].methods)
ADMIN_METHODS_BY_NAME = {method.name: method for method in ADMIN_METHODS}


def _other_fields(method: MethodDescriptor) -> st.SearchStrategy[Message]:
    """A request with random fields, subscriptions, roles and actions drawn mostly from names that
    exist (the victim's subscriptions and roles among them)."""
    cls = GetMessageClass(method.input_type)

    def bias(message: Message, subscription: str, role: str, actions: list[str], count: int) -> Message:
        request = cls()
        request.CopyFrom(message)
        fields = request.DESCRIPTOR.fields_by_name
        if "subscription" in fields:
            request.subscription = subscription  # type: ignore[attr-defined]
        if "role" in fields:
            request.role = role  # type: ignore[attr-defined]
        if "actions" in fields:
            del request.actions[:]  # type: ignore[attr-defined]
            request.actions.extend(actions)  # type: ignore[attr-defined]
        if "policy" in fields:
            request.policy.max_redeliver_count = count  # type: ignore[attr-defined]
        return request

    return st.one_of(
        messages(method.input_type),
        st.builds(bias, messages(method.input_type), st.one_of(st.sampled_from(SUBSCRIPTIONS), strings()),
                  st.sampled_from(ROLES), st.lists(st.sampled_from(ACTIONS), max_size=3),
                  st.sampled_from((0, 0, 1, 3, -1, 2**31 - 1))),
    )


def _names(category: str, kind: str) -> st.SearchStrategy[str]:
    pool = st.sampled_from(NAMES[category][kind])
    if category == "malformed":
        return st.one_of(pool, strings())
    return pool


@st.composite
def hostile_admin_calls(draw: st.DrawFn) -> AdminCall:
    method = draw(st.sampled_from(ADMIN_METHODS))
    request = draw(_other_fields(method))
    fields = resource_fields(method.input_type)
    categories = tuple((path, draw(st.sampled_from(CATEGORIES))) for path, _ in fields)
    for (path, kind), (_, category) in zip(fields, categories, strict=True):
        _set_path(request, path, draw(_names(category, kind)))
    return AdminCall(method.name, request, categories)


def every_combination() -> list[AdminCall]:
    """Each AdminService method with its resource fields in every combination of the categories
    (each the first name of its kind), the other fields set to something an admin would send."""
    calls = []
    for method in ADMIN_METHODS:
        fields = resource_fields(method.input_type)
        for chosen in itertools.product(CATEGORIES, repeat=len(fields)):
            request = _plausible(method)
            for (path, kind), category in zip(fields, chosen, strict=True):
                _set_path(request, path, NAMES[category][kind][0])
            calls.append(AdminCall(method.name, request, tuple(zip((p for p, _ in fields), chosen, strict=True))))
    return calls


_PLAUSIBLE: dict[str, Callable[[Any], None]] = {
    "subscription": lambda r: setattr(r, "subscription", "sub-a"),
    "role": lambda r: setattr(r, "role", "mallory"),
    "actions": lambda r: r.actions.extend(["produce", "consume"]),
    "policies": lambda r: r.policies.CopyFrom(admin_pb2.Policies(message_ttl_seconds=1, max_message_size=16)),
    "partitions": lambda r: setattr(r, "partitions", 3),
    "count": lambda r: setattr(r, "count", 1),
    "all": lambda r: setattr(r, "all", True),
    "force": lambda r: setattr(r, "force", True),
    "policy": lambda r: setattr(r.policy, "max_redeliver_count", 1),
    "admin_roles": lambda r: r.admin_roles.append(ATTACKER_ADMIN),
    "allowed_clusters": lambda r: r.allowed_clusters.append("standalone"),
    "position": lambda r: r.position.CopyFrom(common_pb2.Position(ledger_id=0, entry_id=0)),
}


def _plausible(method: MethodDescriptor) -> Message:
    request = GetMessageClass(method.input_type)()
    for name in request.DESCRIPTOR.fields_by_name:
        if name in _PLAUSIBLE:
            _PLAUSIBLE[name](request)
    return request
