"""`herald produce TOPIC`: send messages given on the command line (-m, repeated -n times), or read
from a file or stdin (-f: one message per line or per separator, or the whole file), with a key,
properties and an event time, at a rate. A file is streamed: it is read a chunk at a time and the
producer's bounded queue holds back the reading (block_if_queue_full), so a file of any size is sent
in a fixed amount of memory."""

from __future__ import annotations

import argparse
import codecs
import sys
import threading
import time
from collections.abc import Iterator
from typing import BinaryIO

from herald.cli.client_command import add_url_option, run_client_command, time_ms, usage_error
from herald.cli.client_options import client_security, client_security_flags
from herald.cli.vocabulary import EXIT_FAILED, EXIT_OK, deprecated_alias
from herald.common.codec.message_id import MessageId
from herald.common.errors import HeraldError

# Messages waiting for the broker's receipt: past this many, reading the input waits.
MAX_PENDING = 1000
READ_CHUNK_BYTES = 64 * 1024


def property_pair(text: str) -> tuple[str, str]:
    """KEY=VALUE, for -p/--property."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"invalid property {text!r}: write KEY=VALUE")
    return key, value


def separator(text: str) -> bytes:
    r"""A separator, with \n, \t, \0 and \\ read as escapes (a shell passes them literally)."""
    try:
        value = codecs.decode(text, "unicode_escape").encode()
    except UnicodeDecodeError as exc:
        raise argparse.ArgumentTypeError(f"invalid separator {text!r}: {exc}") from None
    if not value:
        raise argparse.ArgumentTypeError("the separator is empty: give one, or use --whole-file")
    return value


def split_stream(stream: BinaryIO, sep: bytes, chunk_bytes: int = READ_CHUNK_BYTES) -> Iterator[bytes]:
    """The messages of `stream` separated by `sep`, read a chunk at a time (never the whole input);
    a separator at the very end does not make an empty last message."""
    pending = b""
    while chunk := stream.read(chunk_bytes):
        pending += chunk
        *messages, pending = pending.split(sep)
        yield from messages
    if pending:
        yield pending


class RateLimiter:
    """A token bucket of one second's worth of messages: `wait()` returns when the next message may
    go, sleeping the sending thread only (the client's event loop runs on its own thread)."""

    def __init__(self, per_second: float) -> None:
        self._interval = 1.0 / per_second if per_second > 0 else 0.0
        self._capacity = max(1.0, per_second)
        self._tokens = 1.0
        self._last = time.monotonic()

    def wait(self) -> None:
        if not self._interval:
            return
        now = time.monotonic()
        self._tokens = min(self._capacity, self._tokens + (now - self._last) / self._interval)
        self._last = now
        if self._tokens < 1.0:
            time.sleep((1.0 - self._tokens) * self._interval)
            self._tokens = 1.0
            self._last = time.monotonic()
        self._tokens -= 1.0


def _messages(args: argparse.Namespace, stream: BinaryIO | None) -> Iterator[bytes]:
    if stream is not None:
        if args.whole_file:
            yield stream.read()
        else:
            yield from split_stream(stream, args.separator)
        return
    texts = args.message or ["hello"]
    number = 0
    for _ in range(args.count):
        for text in texts:
            yield text.replace("{i}", str(number)).encode()
            number += 1


class _Receipts:
    """Counts the broker's receipts (on the client's thread) and prints each id unless quiet."""

    def __init__(self, quiet: bool) -> None:
        self.stored = 0
        self.error: HeraldError | None = None
        self._quiet = quiet
        self._lock = threading.Lock()

    def __call__(self, error: HeraldError | None, message_id: MessageId | None) -> None:
        with self._lock:
            if error is not None:
                self.error = self.error or error
                return
            self.stored += 1
            if not self._quiet:
                print(f"sent {message_id}", flush=True)


def produce(args: argparse.Namespace) -> int:
    """Open the input first (a missing file fails before any connection), then send."""
    if args.file is None or args.file == "-":
        return _produce(args, None if args.file is None else sys.stdin.buffer)
    try:
        stream = open(args.file, "rb")  # noqa: SIM115 - closed below, after the sends
    except OSError as exc:
        print(f"herald produce: error: cannot read {args.file}: {exc.strerror}", file=sys.stderr, flush=True)
        return EXIT_FAILED
    with stream:
        return _produce(args, stream)


def _produce(args: argparse.Namespace, stream: BinaryIO | None) -> int:
    from herald.client import Client

    properties = dict(args.property) if args.property else None
    receipts = _Receipts(args.quiet)
    limiter = RateLimiter(args.rate)
    sent = 0
    with Client(args.url, **client_security(args)) as client, client.create_producer(
            args.topic, max_pending_messages=MAX_PENDING, block_if_queue_full=True) as producer:
        started = time.perf_counter()
        for data in _messages(args, stream):
            if receipts.error is not None:
                break
            limiter.wait()
            producer.send_async(data, receipts, key=args.key, properties=properties, event_time=args.event_time)
            sent += 1
        producer.flush()
        elapsed = time.perf_counter() - started
    if receipts.error is not None:
        print(f"herald produce: error: {receipts.error}", file=sys.stderr, flush=True)
        print(f"{receipts.stored} of {sent} message(s) produced to {args.topic}", file=sys.stderr, flush=True)
        return EXIT_FAILED
    print(f"{receipts.stored} message(s) produced to {args.topic} in {elapsed:.3f}s", flush=True)
    return EXIT_OK


def cmd_produce(args: argparse.Namespace) -> None:
    if args.file is not None and (args.message or args.count_given):
        usage_error("produce", "-f/--file reads the messages; it does not go with -m or -n")
    if args.whole_file and args.file is None:
        usage_error("produce", "--whole-file needs -f/--file")
    run_client_command(produce, args)


class _Count(argparse.Action):
    """Stores -n and notes that it was given (it does not go with -f)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        namespace.count = values
        namespace.count_given = True


def non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: give a number >= 0")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: give a whole number >= 1")
    return value


def add_produce_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser("produce", help="send messages to a topic",
                              description="Send messages to a topic: given with -m, or read from a file or stdin.")
    sub.add_argument("topic", help="topic name (persistent://tenant/namespace/name, or a short name in public/default)")
    sub.add_argument("-m", "--message", action="append", metavar="TEXT",
                     help="a message (repeat for several); {i} is replaced by the message number (default: hello)")
    count = sub.add_argument("-n", "--count", type=positive_int, default=1, action=_Count, metavar="N",
                             help="send the -m messages N times (default 1)")
    deprecated_alias(sub, "--num-messages", count)
    sub.set_defaults(count_given=False)
    sub.add_argument("-f", "--file", metavar="PATH",
                     help="read the messages from a file ('-': stdin), one per line unless --separator or --whole-file")
    sub.add_argument("--separator", type=separator, default=b"\n", metavar="SEP",
                     help=r"what separates the messages of -f (default a newline; \n \t \0 escapes work)")
    sub.add_argument("--whole-file", action="store_true", help="send the whole -f file as one message")
    sub.add_argument("-k", "--key", default=None,
                     help="message key (routes and orders messages; compaction keeps the last of each)")
    sub.add_argument("-p", "--property", type=property_pair, action="append", metavar="KEY=VALUE",
                     help="a message property (repeat for several)")
    sub.add_argument("--event-time", type=time_ms, default=None, metavar="ISO|MS",
                     help="the messages' event time: unix milliseconds or ISO 8601 (UTC unless it names a zone)")
    sub.add_argument("-r", "--rate", type=non_negative, default=0.0, metavar="N",
                     help="messages per second (default 0: as fast as the cluster takes them)")
    sub.add_argument("-q", "--quiet", action="store_true", help="print only the summary, not each message id")
    add_url_option(sub)
    client_security_flags(sub)
    sub.set_defaults(func=cmd_produce)
