"""Hostile entries from an authenticated producer with a produce grant, through `herald standalone`
with TLS, token authentication and authorization on (issue 16, items 3, 5 and 11):

- decompression bombs: a ZLIB or ZSTD entry of about a megabyte that inflates to 1 GiB under
  metadata claiming a few bytes is refused with a clear error by the Herald consumer, the
  dlq-worker and `herald admin dlq peek`, each a process of its own whose peak RSS stays small;
  an entry claiming to decompress past the max message size is refused at publish;
- lying batch metadata: num_messages that is not positive, more than the entry can hold, or not
  what the send says, is refused at publish and the subscription keeps flowing;
- spoofed producer names: an entry naming another producer than the one that sent it is refused.

Peak RSS is the kernel's VmHWM: of a process it runs, reported by the process itself as it exits;
of one running (the standalone, the dlq-worker), read from /proc."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import lz4.block
import pytest
import zstandard
from herald.api.v1 import broker_pb2, common_pb2, entry_pb2
from herald.client import AsyncClient, AuthenticationToken, AuthorizationError, InitialPosition
from herald.client.admin import AdminClient
from herald.common.codec.entry import EntryMetadata, encode_entry, pack_record
from herald.common.errors import HeraldError

from tests.conftest import VENV_BIN, StandaloneProcess, service_env
from tests.helpers import eventually, eventually_passes, unique_name, unique_topic
from tests.security.conftest import ADMIN, Keys, Pki
from tests.wire import WireClient, WireConsumer, WireError, WireProducer, make_entry, values_of

MIB = 1024 * 1024
MAX_MESSAGE_SIZE = 5 * MIB  # the broker's default
BOMB_SIZE = 1024 * MIB  # what a bomb inflates to
CLAIMED = 100  # the uncompressed size a bomb's metadata claims
# Generous bounds on peak RSS: a Python process with the client imported takes 50-100 MiB; a bomb
# inflated would take more than BOMB_SIZE.
CLIENT_RSS_BOUND = 300 * MIB
APP = "app"  # the producing (and consuming) role: a namespace grant, no super-user
BOMBS = [entry_pb2.ZLIB, entry_pb2.ZSTD]
NAMES = {entry_pb2.LZ4: "LZ4", entry_pb2.ZLIB: "ZLIB", entry_pb2.ZSTD: "ZSTD"}


# ---- the hostile entries ----

@functools.cache
def bomb_payload(codec: int) -> bytes:
    """BOMB_SIZE zero bytes compressed (about 1 MiB with ZLIB, 32 KiB with ZSTD, whose frame header
    declares the true size), made a megabyte at a time."""
    chunk = bytes(MIB)
    if codec == entry_pb2.ZLIB:
        deflater = zlib.compressobj(6)
        return b"".join(deflater.compress(chunk) for _ in range(BOMB_SIZE // MIB)) + deflater.flush()
    zstd = zstandard.ZstdCompressor().compressobj(size=BOMB_SIZE)
    return b"".join(zstd.compress(chunk) for _ in range(BOMB_SIZE // MIB)) + zstd.flush()


def compressed_entry(producer: str, sequence_id: int, codec: int, data: bytes, uncompressed_size: int,
                     num_messages: int = 1) -> bytes:
    metadata = EntryMetadata(producer_name=producer, sequence_id=sequence_id, highest_sequence_id=sequence_id,
                             num_messages=num_messages, batched=True, compression=codec,  # type: ignore[arg-type]
                             uncompressed_size=uncompressed_size, publish_time=int(time.time() * 1000))
    return encode_entry(metadata, data)


def lying_entry(producer: str, sequence_id: int, num_messages: int, value: bytes = b"lie") -> bytes:
    """One record under metadata claiming `num_messages`."""
    payload = bytearray()
    pack_record(payload, value)
    metadata = EntryMetadata(producer_name=producer, sequence_id=sequence_id, highest_sequence_id=sequence_id,
                             num_messages=num_messages, batched=True, publish_time=int(time.time() * 1000))
    return encode_entry(metadata, payload)


def send_error(reply: broker_pb2.ProduceResponse) -> tuple[str, str]:
    assert reply.HasField("send_error"), f"expected the send to be refused, got {reply}"
    error = reply.send_error.error
    return common_pb2.ErrorCode.Name(error.code), error.message


def receipt(reply: broker_pb2.ProduceResponse) -> tuple[int, int]:
    assert reply.HasField("receipt"), f"expected a receipt, got {reply}"
    return reply.receipt.ledger_id, reply.receipt.entry_id


# ---- the cluster, a namespace where APP may produce and consume, raw streams ----

@dataclass
class Place:
    server: StandaloneProcess
    pki: Pki
    keys: Keys
    namespace: str

    def topic(self, name: str = "t") -> str:
        return unique_topic(name, self.namespace)

    def wire(self, role: str = APP) -> WireClient:
        """Raw gRPC streams over TLS with `role`'s token."""
        credentials = grpc.composite_channel_credentials(
            grpc.ssl_channel_credentials(self.pki.ca_cert.read_bytes()),
            grpc.access_token_call_credentials(self.keys.token(role)))
        return WireClient(self.server.port, credentials=credentials)

    def client(self, role: str = APP) -> AsyncClient:
        return AsyncClient(self.server.service_url, auth=AuthenticationToken(self.keys.token(role)),
                           tls_trust_certs_file_path=str(self.pki.ca_cert), operation_timeout=10.0,
                           connection_timeout=5.0, stats_interval=0)


@pytest.fixture
async def place(secure_standalone: StandaloneProcess, pki: Pki, keys: Keys) -> Place:
    tenant = unique_name("hostile")
    namespace = f"{tenant}/ns"
    async with AdminClient(secure_standalone.service_url, timeout=10, auth=AuthenticationToken(keys.token(ADMIN)),
                           tls_trust_certs_file_path=str(pki.ca_cert)) as admin:
        await admin.create_tenant(tenant, allowed_clusters=["standalone"])
        await admin.create_namespace(namespace)
        await admin.grant_permission(APP, ["produce", "consume"], namespace=namespace)
    return Place(secure_standalone, pki, keys, namespace)


@pytest.fixture
async def wire(place: Place) -> AsyncIterator[WireClient]:
    async with place.wire() as client:
        yield client


async def authorized(make: Callable[[], Awaitable[Any]], what: str) -> Any:
    """`make()`, retried while the namespace grant has not reached the broker yet."""
    async def attempt() -> Any:
        try:
            return await make()
        except WireError as exc:
            if exc.code == common_pb2.AUTHORIZATION_ERROR:
                raise AuthorizationError(str(exc)) from exc  # not yet: as the client would say it
            raise

    return await eventually_passes(attempt, f"{what}: allowed", retry=(AuthorizationError,))


async def registered(wire: WireClient, topic: str, name: str = "") -> WireProducer:
    """A raw producer on `topic`."""
    producer: WireProducer = await authorized(lambda: wire.producer(topic, name), f"a producer on {topic}")
    return producer


async def subscribed(client: AsyncClient, topic: str, **options: Any) -> Any:
    return await authorized(lambda: client.subscribe(topic, "s", initial_position=InitialPosition.Earliest,
                                                     **options), f"a consumer of {topic}")


# ---- processes measured ----

@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str
    peak_rss: int  # bytes


# Runs `herald` (or a script) in this interpreter and, at exit, writes the process's own VmHWM. ru_maxrss of a
# child is no measure here: Linux keeps the parent's high-water mark across fork and exec, so a
# child of a long test session would report the session's size.
_MEASURED_HERALD = """
import atexit, re, sys
def _report(path=sys.argv[1]):
    with open("/proc/self/status") as status:
        found = re.search(r"^VmHWM:\\s+(\\d+) kB", status.read(), re.MULTILINE)
    with open(path, "w") as out:
        out.write(found.group(1) if found else "")
atexit.register(_report)
if sys.argv[2] == "herald":
    sys.argv = ["herald", *sys.argv[3:]]
    from herald.cli.main import main
    main()
else:
    import runpy
    sys.argv = sys.argv[2:]
    runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_measured(argv: list[str], tmp_path: Path, timeout: float = 90.0) -> Finished:
    """Run `herald <argv[1:]>` (argv[0] the herald command) or a Python script (argv[0] this
    interpreter, argv[1] the script) to its end; its peak RSS is its own VmHWM, written by the
    process itself as it exits."""
    tag = unique_name("run")
    out, err, hwm = tmp_path / f"out-{tag}", tmp_path / f"err-{tag}", tmp_path / f"hwm-{tag}"
    program = ["herald"] if Path(argv[0]).name == "herald" else []
    command = [sys.executable, "-c", _MEASURED_HERALD, str(hwm), *program, *argv[1:]]
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen(command, stdout=stdout, stderr=stderr, env=service_env())
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise TimeoutError(f"{argv[:4]} did not finish within {timeout}s:\n{err.read_text()[-4000:]}") from None
    reported = hwm.read_text() if hwm.exists() else ""
    assert reported, f"{argv[:4]} exited ({proc.returncode}) without reporting its peak RSS:\n{err.read_text()[-4000:]}"
    return Finished(proc.returncode, out.read_text(), err.read_text(), int(reported) * 1024)


def peak_rss_of(pid: int) -> int:
    """VmHWM of a running process, in bytes."""
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    assert found, status
    return int(found.group(1)) * 1024


CONSUMER_SCRIPT = '''
import asyncio, json, logging, sys
from herald.client import AsyncClient, AuthenticationToken, InitialPosition

async def main(url, ca, token, topic, wanted):
    async with AsyncClient(url, auth=AuthenticationToken(token), tls_trust_certs_file_path=ca,
                           operation_timeout=10.0, stats_interval=0) as client:
        consumer = await client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
        values = []
        while len(values) < wanted:
            message = await consumer.receive(timeout=30)
            if message is None:
                break
            values.append(message.data().decode())
            consumer.acknowledge(message)
        print(json.dumps({"values": values, "dropped": consumer.stats().dropped_entries}))

logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])))
'''


def consume_in_a_process(place: Place, topic: str, wanted: int, tmp_path: Path) -> tuple[dict[str, Any], Finished]:
    """A Herald consumer (its own process) reading `topic` from the earliest: what it received."""
    script = tmp_path / "consumer.py"
    script.write_text(CONSUMER_SCRIPT)
    finished = run_measured([sys.executable, str(script), place.server.service_url, str(place.pki.ca_cert),
                             place.keys.token(APP), topic, str(wanted)], tmp_path)
    assert finished.returncode == 0, finished.stderr[-4000:]
    return json.loads(finished.stdout), finished


def report(figure: str) -> None:
    """A figure the issue asks for, shown with -s."""
    print(f"\n[figure] {figure}")


# ---- item 3: decompression bombs ----

@pytest.mark.parametrize("codec", BOMBS, ids=[NAMES[c] for c in BOMBS])
async def test_a_decompression_bomb_is_dropped_by_the_consumer_with_an_error_and_its_memory_stays_small(
    place: Place, wire: WireClient, tmp_path: Path, codec: int,
) -> None:
    topic = place.topic("bomb")
    producer = await registered(wire, topic)
    bomb = compressed_entry(producer.name, 0, codec, bomb_payload(codec), CLAIMED)
    receipt(await producer.send_entry(bomb, 0))  # the broker does not decompress: it cannot tell
    receipt(await producer.send_entry(make_entry(producer.name, 1, b"after the bomb"), 1))
    got, finished = consume_in_a_process(place, topic, 1, tmp_path)
    name = NAMES[codec]
    assert place.server.proc is not None
    report(f"consumer, {name} bomb of {len(bomb)} bytes inflating to {BOMB_SIZE}: peak RSS "
           f"{finished.peak_rss / MIB:.0f} MiB; standalone peak RSS {peak_rss_of(place.server.proc.pid) / MIB:.0f} MiB")
    assert finished.peak_rss < CLIENT_RSS_BOUND
    assert got == {"values": ["after the bomb"], "dropped": 1}
    assert ("dropped corrupt entry" in finished.stderr
            and f"decompresses with {name} to more than the {CLAIMED} bytes its metadata says" in finished.stderr
            ), finished.stderr


@pytest.mark.parametrize("codec", [entry_pb2.LZ4, *BOMBS], ids=["LZ4", *[NAMES[c] for c in BOMBS]])
async def test_an_entry_claiming_to_decompress_past_the_max_message_size_is_refused_at_publish(
    place: Place, wire: WireClient, codec: int,
) -> None:
    # LZ4 blocks carry no size of their own: a consumer sizes its buffer by the claim, so a claim of
    # 1 GiB over 4 MiB of compressed zeros was a 1 GiB allocation in every consumer.
    topic = place.topic("claim")
    async with place.wire() as other:
        reader = await authorized(lambda: other.consumer(topic, "s", initial_position=broker_pb2.EARLIEST),
                                  f"a consumer of {topic}")
        await reader.flow(10)
        producer = await registered(wire, topic)
        data = {entry_pb2.LZ4: b"\x00" * 16, entry_pb2.ZLIB: zlib.compress(b"x" * 16),
                entry_pb2.ZSTD: zstandard.ZstdCompressor().compress(b"x" * 16)}[codec]
        refused = await producer.send_entry(compressed_entry(producer.name, 0, codec, data, 1 << 30), 0)
        code, message = send_error(refused)
        assert (code, message) == (
            "MESSAGE_TOO_LARGE", "entry metadata says its payload decompresses to 1073741824 bytes, more than the "
            "maximum message size of 5242880 bytes: send smaller messages or smaller batches")
        receipt(await producer.send_entry(make_entry(producer.name, 1, b"next"), 1))  # the stream goes on
        (entry,) = await reader.receive(1)
        assert values_of(entry) == [b"next"]
        report(f"publish of a {NAMES[codec]} entry claiming 1 GiB: {code}: {message}")


async def _make_dead_letter(place: Place, wire: WireClient, topic: str, entry_of: Callable[[str], bytes]) -> None:
    """Publish an entry and nack it once on a subscription with max_redeliver_count 1: a dead letter."""
    consumer: WireConsumer = await authorized(lambda: wire.consumer(
        topic, "s", type=broker_pb2.SHARED, initial_position=broker_pb2.EARLIEST,
        dead_letter_policy=broker_pb2.DeadLetterPolicy(max_redeliver_count=1)), f"a consumer of {topic}")
    await consumer.flow(10)
    producer = await registered(wire, topic)
    receipt(await producer.send_entry(entry_of(producer.name), 0))
    (delivered,) = await consumer.receive(1)
    await consumer.nack(delivered, delay_ms=0)


class Worker:
    """`herald dlq-worker` with the standalone's internal token (a dlq-worker role)."""

    def __init__(self, place: Place, log_path: Path) -> None:
        env = service_env()
        env.update({"HERALD_DLQ_WORKER_AUTH_TOKEN_FILE": str(place.server.data_dir / "internal.token"),
                    "HERALD_DLQ_WORKER_TLS_TRUST_CERTS_FILE": str(place.pki.ca_cert),
                    "HERALD_DLQ_WORKER_BROKER_REFRESH_INTERVAL": "0.2", "HERALD_DLQ_WORKER_RETRY_DELAY": "0.2",
                    "HERALD_DLQ_WORKER_RETRY_DELAY_MAX": "1.0"})
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [str(VENV_BIN / "herald"), "dlq-worker", "--url", place.server.service_url,
                 "--metrics-port", "0"], stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 30
        while not (found := re.search(r"metrics on http://(\S+)/metrics", self.log())):
            assert self.proc.poll() is None, f"dlq-worker exited:\n{self.log()[-4000:]}"
            assert time.monotonic() < deadline, f"dlq-worker did not start:\n{self.log()[-4000:]}"
            time.sleep(0.05)
        self.metrics_address = found.group(1)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def letters_moved(self) -> float:
        with urllib.request.urlopen(f"http://{self.metrics_address}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        found = re.search(r"^herald_dlq_letters_moved_total (\S+)$", text, re.MULTILINE)
        return float(found.group(1)) if found else 0.0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)


@pytest.mark.parametrize("codec", BOMBS, ids=[NAMES[c] for c in BOMBS])
async def test_a_dead_letter_bomb_is_moved_as_it_is_by_the_dlq_worker_and_left_out_by_peek(
    place: Place, wire: WireClient, tmp_path: Path, codec: int,
) -> None:
    topic = place.topic("dead")
    worker = Worker(place, tmp_path / "worker.log")
    try:
        await _make_dead_letter(place, wire, topic,
                                lambda name: compressed_entry(name, 0, codec, bomb_payload(codec), CLAIMED))

        async def moved() -> bool:
            return worker.letters_moved() >= 1

        await eventually(moved, "the dlq-worker to move the dead letter", timeout=60)
        worker_rss = peak_rss_of(worker.proc.pid)
    finally:
        worker.stop()
    token = tmp_path / "admin.token"
    token.write_text(place.keys.token(ADMIN))
    peeked = run_measured([str(VENV_BIN / "herald"), "admin", "--url", place.server.service_url, "--json",
                           "--auth-token-file", str(token), "--tls-trust-certs-file", str(place.pki.ca_cert),
                           "dlq", "peek", topic, "-s", "s"], tmp_path)
    name = NAMES[codec]
    report(f"dlq-worker moving a {name} bomb (inflating to {BOMB_SIZE}): peak RSS {worker_rss / MIB:.0f} MiB; "
           f"herald admin dlq peek: peak RSS {peeked.peak_rss / MIB:.0f} MiB")
    assert worker_rss < CLIENT_RSS_BOUND
    assert peeked.peak_rss < CLIENT_RSS_BOUND
    moved_as_it_is = (rf"its messages cannot be unpacked \(entry payload decompresses with {name} to more than "
                      rf"the {CLAIMED} bytes its metadata says.*\); it is moved as it is")
    assert re.search(moved_as_it_is, worker.log()), worker.log()
    assert peeked.returncode == 0, peeked.stderr
    assert json.loads(peeked.stdout)["messages"] == []
    assert re.search(rf"dead letter entry \d+:\d+ of {re.escape(topic)}-s-DLQ is not shown: entry payload "
                     rf"decompresses with {name} to more than the {CLAIMED} bytes", peeked.stderr), peeked.stderr


# ---- item 5: lying batch metadata ----

LIES = {
    "zero": (0, 0, "entry metadata says num_messages=0: an entry holds one message or more"),
    "negative": (-1, -1, "entry metadata says num_messages=-1: an entry holds one message or more"),
    "int32-max": (2**31 - 1, 2**31 - 1,
                  "entry metadata says num_messages=2147483647, but its payload of 8 bytes holds at most 1 "
                  "(a message takes 5 bytes at least)"),
    "not-the-send's": (1, 2, "the send says num_messages=2, but the entry's metadata says 1: they must agree"),
}


@pytest.mark.parametrize("lie", list(LIES))
async def test_an_entry_whose_message_count_lies_is_refused_and_the_subscription_keeps_flowing(
    place: Place, wire: WireClient, lie: str,
) -> None:
    claimed, sent, refusal = LIES[lie]
    topic = place.topic("lies")
    async with place.client() as client:
        consumer = await subscribed(client, topic, receiver_queue_size=10)
        producer = await registered(wire, topic)
        await producer.stream.send(broker_pb2.ProduceRequest(send=broker_pb2.SendEntry(
            sequence_id=0, highest_sequence_id=0, num_messages=sent, entry=lying_entry(producer.name, 0, claimed))))
        reply = await producer.stream.reply()
        started = time.monotonic()
        for sequence_id in range(1, 21):  # twice the consumer's permits: flow must go on
            receipt(await producer.send_entry(make_entry(producer.name, sequence_id, b"good-%d" % sequence_id),
                                              sequence_id))
        received: list[bytes] = []
        while len(received) < 20:
            message = await consumer.receive(timeout=15)
            if message is None:
                report(f"num_messages {lie}: the subscription stalled after {received}")
                break
            received.append(message.data())
            consumer.acknowledge(message)
        else:
            report(f"num_messages {lie}: the 20 messages sent after it arrived in "
                   f"{(time.monotonic() - started) * 1000:.0f} ms")
        assert received == [b"good-%d" % i for i in range(1, 21)]
        assert await consumer.receive(timeout=0) is None
    code, text = send_error(reply)
    report(f"num_messages {lie}: refused with {code}: {text!r}")
    assert (code, text) == ("INVALID_ARGUMENT", refusal)


async def test_a_compressed_entry_claiming_more_messages_than_its_uncompressed_size_holds_is_refused(
    place: Place, wire: WireClient,
) -> None:
    topic = place.topic("lies")
    producer = await registered(wire, topic)
    payload = bytearray()
    pack_record(payload, b"x" * 95)
    entry = compressed_entry(producer.name, 0, entry_pb2.ZLIB, zlib.compress(payload), len(payload), 1000)
    code, message = send_error(await producer.send_entry(entry, 0, 1000))
    assert (code, message) == (
        "INVALID_ARGUMENT",
        "entry metadata says num_messages=1000, but its uncompressed_size of 100 bytes holds at most 20 "
        "(a message takes 5 bytes at least)")
    receipt(await producer.send_entry(make_entry(producer.name, 1, b"fine"), 1))


@pytest.mark.parametrize("codec", [entry_pb2.NONE, entry_pb2.LZ4], ids=["uncompressed", "LZ4"])
async def test_an_entry_holding_more_messages_than_its_metadata_says_is_dropped_and_the_consumer_stays_small(
    place: Place, wire: WireClient, tmp_path: Path, codec: int,
) -> None:
    # Found by tests/fuzz/test_hostile_fuzz.py: 5 MiB of zeros (20 KB with LZ4) are a million empty
    # records; under num_messages=1 the broker takes the entry (one message fits), and the consumer
    # made a message of every record: a million messages, hundreds of MiB, for one permit.
    topic = place.topic("swarm")
    producer = await registered(wire, topic)
    zeros = bytes(MAX_MESSAGE_SIZE)
    data = zeros if codec == entry_pb2.NONE else lz4.block.compress(zeros, store_size=False)
    swarm = compressed_entry(producer.name, 0, codec, data, len(zeros) if codec else 0)
    receipt(await producer.send_entry(swarm, 0))
    receipt(await producer.send_entry(make_entry(producer.name, 1, b"after the swarm"), 1))
    got, finished = consume_in_a_process(place, topic, 1, tmp_path)
    report(f"consumer, an entry of {len(swarm)} bytes holding {len(zeros) // 5} empty records under "
           f"num_messages=1 ({NAMES.get(codec, 'uncompressed')}): peak RSS {finished.peak_rss / MIB:.0f} MiB")
    assert got == {"values": ["after the swarm"], "dropped": 1}
    assert finished.peak_rss < CLIENT_RSS_BOUND
    assert "the entry holds more than the 1 message(s) its metadata says (num_messages)" in finished.stderr, \
        finished.stderr[-4000:]


# ---- item 11 (part): spoofed producer names ----

async def test_an_entry_naming_another_producer_is_refused(place: Place, wire: WireClient) -> None:
    topic = place.topic("names")
    async with place.client() as client:
        consumer = await subscribed(client, topic)
        honest = await registered(wire, topic, "honest")
        forged = await honest.send_entry(make_entry("payments-service", 0, b"forged"), 0)
        receipt(await honest.send_entry(make_entry("honest", 1, b"genuine"), 1))
        seen = []
        while (received := await consumer.receive(timeout=15 if not seen else 0)) is not None:
            seen.append((received.data(), received.producer_name))
        report(f"spoofed producer name: the consumer saw {seen}")
        assert seen == [(b"genuine", "honest")]
    code, text = send_error(forged)
    report(f"spoofed producer name: refused with {code}: {text!r}")
    assert (code, text) == (
        "INVALID_ARGUMENT",
        "entry metadata names producer 'payments-service', but it was sent by producer 'honest': an entry "
        "carries the name its producer registered with")


async def test_every_herald_writer_still_publishes(place: Place, tmp_path: Path) -> None:
    """The client's producers (batched, compressed, chunked, key-based), whose entries carry the
    name the broker gave them, pass every check; a message larger than the max message size that
    compresses into one entry goes as a chunk."""
    from herald.client import BatchingType, CompressionType

    topic = place.topic("writers")
    async with place.client() as client:
        consumer = await subscribed(client, topic)
        sent: list[bytes] = []
        options: list[dict[str, Any]] = [
            {}, {"compression_type": CompressionType.ZSTD}, {"compression_type": CompressionType.LZ4},
            {"batching_type": BatchingType.KeyBased, "compression_type": CompressionType.ZLIB},
            {"chunking_enabled": True, "batching_enabled": False, "compression_type": CompressionType.ZLIB},
        ]
        for index, option in enumerate(options):
            try:
                producer = await client.create_producer(topic, **option)
            except HeraldError as exc:
                raise AssertionError(f"{option}: {exc}") from exc
            values = [b"%d-%d-" % (index, i) + os.urandom(50) for i in range(5)]
            if option.get("chunking_enabled"):  # chunks, and one compressing into a single chunk
                values[:2] = [os.urandom(8 * MIB), b"compresses well " * (MIB // 2)]
            sends = [await producer.send_async(value, key=f"k{i % 2}") for i, value in enumerate(values)]
            await asyncio.gather(*sends)
            await producer.close()
            sent += values
        received = []
        while len(received) < len(sent):
            message = await consumer.receive(timeout=15)
            assert message is not None, f"received {len(received)} of {len(sent)}"
            received.append(message.data())
            consumer.acknowledge(message)
        assert sorted(received) == sorted(sent)
