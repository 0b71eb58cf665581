"""A hostile tenant against `herald standalone` with TLS, token authentication and authorization
(tests/fuzz/tenants.py): `alice` attacks, `bob` is the victim, whose checking traffic runs all along.

- Hostile entries (tests/fuzz/hostile.py), sent on raw Produce streams (to the broker or through
  the proxy) as alice's produce-only role: every send gets a receipt or a clear error, the stream
  goes on, and a Herald consumer of the topic (its own process; Shared and Key_Shared) never raises,
  keeps its peak RSS under a bound and receives the good marker sent after each hostile example.
- Hostile admin requests as alice's tenant admin, every method with its resource fields in every
  combination of alice's, bob's, malformed and empty (once each, then drawn at random with random
  other fields): a request naming bob's resource anywhere is refused with PERMISSION_DENIED or
  INVALID_ARGUMENT, none fails with an internal error, and bob's tenant, namespaces, policies,
  topics, partitions, grants, subscriptions, dead-letter policies and cursors are byte for byte
  what they were.

After each test the target's checks run (tests/fuzz/conftest.py): alive, serving, no traceback
logged, nothing of bob's checking traffic lost."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from herald.api.v1 import broker_pb2, common_pb2
from herald.client import Client, Producer
from herald.client.sync.loop import LoopThread
from herald.common.codec.names import TopicName, parse_namespace
from herald.common.errors import HeraldError
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.consumer_process import ConsumerProcess
from tests.fuzz.hostile import (
    AdminCall,
    HostileEntry,
    every_combination,
    get_path,
    hostile_admin_calls,
    hostile_entries,
)
from tests.fuzz.target import DEADLINE
from tests.fuzz.tenants import (
    ATTACKER_ADMIN,
    ATTACKER_PRODUCER,
    ATTACKER_READER,
    ENTRIES_TOPIC,
    VICTIM,
    TenantsTarget,
    until_allowed,
)
from tests.wire import WireClient, WireError, make_entry

T = TypeVar("T")
MIB = 1 << 20
# Generous: a Python process with the client imported takes 50-100 MiB; one bomb inflated would
# take 400 MiB (ZLIB) or 1 GiB (ZSTD).
CONSUMER_RSS_BOUND = 300 * MIB
REFUSALS = {grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.INVALID_ARGUMENT}
BAD_STATUSES = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED}


def report(figure: str) -> None:
    """A figure for the report, shown with -s."""
    print(f"\n[figure] {figure}")


# ---- hostile entries ----

class Attacker:
    """alice's side: raw Produce streams on a loop thread of their own, a well-behaved producer of
    markers, and the consumer process the entries reach."""

    def __init__(self, target: TenantsTarget, directory: Path) -> None:
        self.target = target
        self.loop = LoopThread()
        credentials = grpc.composite_channel_credentials(
            grpc.ssl_channel_credentials(target.pki.ca_cert.read_bytes()),
            grpc.access_token_call_credentials(target.keys.token(ATTACKER_PRODUCER)))
        self.wire = WireClient(target.server.port, credentials=credentials)
        server = target.server
        self.addresses = {"broker": f"127.0.0.1:{server.broker_port}", "proxy": f"127.0.0.1:{server.proxy_port}"}
        self.consumer = ConsumerProcess(directory, server.service_url, target.pki.ca_cert,
                                        target.keys.token(ATTACKER_READER), ENTRIES_TOPIC)
        self.client: Client = target.client(server.service_url, ATTACKER_PRODUCER)
        self.markers: Producer[Any] = until_allowed(
            lambda: self.client.create_producer(ENTRIES_TOPIC, producer_name="marker", batching_enabled=False),
            "the marker producer")
        self._numbers = itertools.count()
        self.refusals: dict[str, int] = {}  # error code -> how many sends were refused with it

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop.loop).result(DEADLINE * 2)

    async def send(self, entries: list[HostileEntry], via: str) -> list[broker_pb2.ProduceResponse]:
        """Each entry on a new producer's stream, then a good entry: the stream must still answer."""
        try:
            producer, _ = await self.wire.register(ENTRIES_TOPIC, address=self.addresses[via])
        except WireError as exc:
            raise AssertionError(f"registering a producer via the {via}: {exc}") from None
        replies = []
        try:
            for entry in entries:
                await producer.stream.send(broker_pb2.ProduceRequest(send=entry.send_entry(producer.name)))
                replies.append(await self._reply(producer.stream, f"{entry!r}"))
            # Its sequence id may be a duplicate's after a hostile one: a receipt all the same.
            await producer.stream.send(broker_pb2.ProduceRequest(send=broker_pb2.SendEntry(
                sequence_id=1, highest_sequence_id=1, num_messages=1, entry=make_entry(producer.name, 1, b"alive"))))
            after = await self._reply(producer.stream, "the good entry after the hostile ones")
            assert after.HasField("receipt"), f"the stream refused a good entry after {entries}: {after}"
        finally:
            await producer.close()
        return replies

    @staticmethod
    async def _reply(stream: Any, what: str) -> broker_pb2.ProduceResponse:
        reply: broker_pb2.ProduceResponse | None = await stream.next_reply(DEADLINE)
        assert reply is not None, (f"no reply to {what}: the stream "
                                   f"{'ended with ' + repr(stream.end_error) if stream.ended.is_set() else 'hung'}")
        return reply

    def marker(self) -> bytes:
        value = b"marker-%d" % next(self._numbers)
        self.markers.send(value)
        return value

    def close(self) -> None:
        try:
            self.run(self.wire.__aexit__(None, None, None))
        finally:
            self.loop.stop()
            self.client.close()
            self.consumer.stop()


@pytest.fixture(scope="module")
def attacker(tenants_target: TenantsTarget, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Attacker]:
    made = Attacker(tenants_target, tmp_path_factory.mktemp("hostile-consumer"))
    try:
        yield made
        proc = tenants_target.server.proc
        assert proc is not None
        report(f"hostile entries: consumer peak RSS {made.consumer.peak_rss() / MIB:.0f} MiB (bound "
               f"{CONSUMER_RSS_BOUND / MIB:.0f}), {made.consumer.received} messages received; standalone peak "
               f"RSS {_peak_rss(proc.pid) / MIB:.0f} MiB; sends refused, by code: {made.refusals}")
    finally:
        made.close()


def check_reply(reply: broker_pb2.ProduceResponse, entry: HostileEntry, refusals: dict[str, int]) -> None:
    """A receipt, or a send error that says what was wrong; never an unhandled error, never the end
    of the stream."""
    kind = reply.WhichOneof("reply")
    assert kind in ("receipt", "send_error"), f"{entry!r}: the broker answered {reply}"
    if kind == "send_error":
        error = reply.send_error.error
        code = common_pb2.ErrorCode.Name(error.code)
        assert error.code != common_pb2.UNKNOWN_ERROR, f"{entry!r}: unhandled error: {error.message}"
        assert error.message, f"{entry!r}: refused with {code} and no message"
        refusals[code] = refusals.get(code, 0) + 1


@given(entries=st.lists(hostile_entries(), min_size=1, max_size=3), via=st.sampled_from(("broker", "proxy")))
def test_hostile_entries_get_a_receipt_or_a_clear_error_and_the_consumer_stays_small_and_keeps_receiving(
    tenants: TenantsTarget, attacker: Attacker, entries: list[HostileEntry], via: str,
) -> None:
    replies = attacker.run(attacker.send(entries, via))
    for reply, entry in zip(replies, entries, strict=True):
        check_reply(reply, entry, attacker.refusals)
    marker = attacker.marker()
    attacker.consumer.wait_for(marker, DEADLINE)
    attacker.consumer.check_log()
    peak = attacker.consumer.peak_rss()
    assert peak < CONSUMER_RSS_BOUND, f"the consumer's peak RSS reached {peak / MIB:.0f} MiB after {entries}"


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


# ---- hostile admin requests ----

def names_victim(call: AdminCall) -> bool:
    """Whether any resource field names something of bob's, as the services parse names."""
    for path, kind in call.fields:
        value = get_path(call.request, path)
        if not value:
            continue
        try:
            tenant = (value if kind == "tenant" else parse_namespace(value)[0] if kind == "namespace"
                      else TopicName.parse(value).tenant)
        except HeraldError:
            continue
        if tenant == VICTIM:
            return True
    return call.names_victim_by_category


def attempt(target: TenantsTarget, call: AdminCall, outcomes: dict[str, int], port: int | None = None) -> str | None:
    """Make the call as alice's admin; what is wrong with its outcome, or None. `outcomes` counts
    the status codes answered."""
    try:
        target.admin_call(call.method, call.request.SerializeToString(), ATTACKER_ADMIN, port)
    except grpc.RpcError as error:
        code = error.code()
        outcomes[code.name] = outcomes.get(code.name, 0) + 1
        if code in BAD_STATUSES:
            return f"{call!r} failed with {code}: {error.details()}"
        if names_victim(call) and code not in REFUSALS:
            return f"{call!r} names {VICTIM}'s resource and was answered {code}: {error.details()}"
        return None
    outcomes["OK"] = outcomes.get("OK", 0) + 1
    if names_victim(call):
        return f"{call!r} names {VICTIM}'s resource and was allowed"
    return None


def _diff(before: dict[str, bytes], after: dict[str, bytes]) -> dict[str, tuple[bytes | None, bytes | None]]:
    return {key: (before.get(key), after.get(key)) for key in sorted({*before, *after})
            if before.get(key) != after.get(key)}


def test_every_combination_of_resource_fields_naming_the_victim_is_refused_and_changes_nothing_of_its(
    tenants: TenantsTarget,
) -> None:
    before = tenants.victim_snapshot()
    calls = every_combination()
    outcomes: dict[str, int] = {}
    wrong = [found for call in calls if (found := attempt(tenants, call, outcomes)) is not None]
    assert not wrong, f"{len(wrong)} of {len(calls)} calls:\n" + "\n".join(wrong[:20])
    assert _diff(before, tenants.victim_snapshot()) == {}
    report(f"admin sweep: {len(calls)} calls, {sum(names_victim(c) for c in calls)} naming {VICTIM}'s resources; "
           f"answers: {outcomes}")


def test_random_admin_requests_naming_the_victim_are_refused_and_its_state_is_byte_for_byte_kept(
    tenants: TenantsTarget,
) -> None:
    before = tenants.victim_snapshot()
    received_before = len(tenants.checker.received)
    ports = (None, tenants.server.proxy_port)
    outcomes: dict[str, int] = {}

    @given(call=hostile_admin_calls(), through_proxy=st.booleans())
    def property_(call: AdminCall, through_proxy: bool) -> None:
        found = attempt(tenants, call, outcomes, ports[through_proxy])
        assert found is None, found

    property_()
    report(f"random admin requests: answers {outcomes}")
    assert _diff(before, tenants.victim_snapshot()) == {}
    tenants.checker.check_so_far()
    deadline = time.monotonic() + DEADLINE  # and it still flows
    while len(tenants.checker.received) <= received_before:
        assert time.monotonic() < deadline, "bob's checking traffic stalled"
        time.sleep(0.05)
