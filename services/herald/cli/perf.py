"""`herald perf produce | consume | end-to-end`: the flags (pulsar-perf's and
kafka-*-perf-test's, under Herald's spellings, with pulsar-perf's short forms: -r, -m, -n, -s, ...),
checked into herald.perf's options, and the run.
Usage errors exit with status 2, a failed run with 1 (herald.perf.runner)."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from herald.cli.client_options import DEFAULT_SERVICE_URL, client_security, client_security_flags
from herald.cli.vocabulary import deprecated_alias
from herald.common.errors import InvalidArgumentError

if TYPE_CHECKING:
    from herald.perf.options import PerfOptions

DEFAULT_PULSAR_URL = "pulsar://127.0.0.1:6650"
SUBSCRIPTION_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected zero or a positive number, got {text!r}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected zero or a positive number, got {text!r}")
    return value


def _subscription_type(text: str) -> str:
    if text == "KeyShared":
        print("note: --subscription-type KeyShared is deprecated: write Key_Shared (Pulsar's spelling)",
              file=sys.stderr, flush=True)
        return "Key_Shared"
    if text not in SUBSCRIPTION_TYPES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(SUBSCRIPTION_TYPES)}, got {text!r}")
    return text


def _common_flags(sub: argparse.ArgumentParser) -> None:
    env_pulsar = os.environ.get("HERALD_PULSAR_URL", DEFAULT_PULSAR_URL)
    # None: main() resolves it as every client's (flag > HERALD_SERVICE_URL > context > default).
    url = sub.add_argument("--url", dest="url", default=None,
                           help=f"Herald service URL (default: $HERALD_SERVICE_URL, else the context's, else "
                                f"{DEFAULT_SERVICE_URL}); also used to create partitioned topics with "
                                "--protocol pulsar")
    deprecated_alias(sub, "--service-url", url)
    sub.add_argument("--protocol", choices=["herald", "pulsar"], default="herald",
                     help="herald: Herald's client over gRPC (default); pulsar: the official pulsar-client "
                          "against --pulsar-url")
    sub.add_argument("--pulsar-url", default=env_pulsar,
                     help=f"Pulsar service URL for --protocol pulsar (default {env_pulsar}, env HERALD_PULSAR_URL)")
    sub.add_argument("--count", "-m", type=_count, default=0, metavar="N",
                     help="stop after N messages (produce: sent and acknowledged; consume: received); 0: no limit")
    sub.add_argument("--duration", "-time", type=_positive_float, default=0.0, metavar="SECONDS",
                     help="stop after this long, warm-up not included; 0: no limit (Ctrl-C ends the run)")
    sub.add_argument("--warmup", type=_positive_float, default=0.0, metavar="SECONDS",
                     help="left out of the summary (default 0)")
    sub.add_argument("--report-interval", "-i", type=_positive_float, default=10.0, metavar="SECONDS",
                     help="a report line this often (default 10)")
    sub.add_argument("--json", action="store_true", help="print one JSON object per line (docs/perf.md)")
    client_security_flags(sub)


def _produce_flags(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--partitions", type=_count, default=0, metavar="N",
                     help="create each topic with N partitions unless it exists (default 0: leave it as it is)")
    sub.add_argument("--producers-per-topic", "-n", type=_count, default=1, metavar="N",
                     help="producers on each topic (default 1)")
    sub.add_argument("--size", "-s", type=_count, default=1024, metavar="BYTES", help="message size (default 1024)")
    sub.add_argument("--payload-file", "-f", metavar="FILE", help="send the messages of this file instead, in turn")
    sub.add_argument("--payload-delimiter", default="\n", metavar="TEXT",
                     help="what separates messages in --payload-file (default a newline; '' sends the whole "
                          "file as one message)")
    sub.add_argument("--rate", "-r", type=_positive_float, default=0.0, metavar="MSG/S",
                     help="messages per second over all producers (default 0: unlimited)")
    sub.add_argument("--max-pending", "-o", type=_count, default=1000, metavar="N",
                     help="messages in flight per producer (the send window, default 1000)")
    sub.add_argument("--batching", choices=["on", "off"], default="on",
                     help="pack messages into batches (default on)")
    sub.add_argument("--batch-max-messages", "-bm", type=_count, default=1000, metavar="N",
                     help="most messages in one batch (default 1000)")
    sub.add_argument("--batch-max-delay-ms", type=_positive_float, default=1.0, metavar="MS",
                     help="longest a batch waits to fill before it is sent (default 1)")
    sub.add_argument("--compression", "-z", choices=["none", "lz4", "zlib", "zstd", "snappy"], default="none",
                     help="snappy: --protocol pulsar only")
    sub.add_argument("--keys", type=_count, default=0, metavar="N", help="N distinct message keys (default 0: none)")
    sub.add_argument("--key-order", choices=["round-robin", "random"], default="round-robin",
                     help="how the --keys are given to messages (default round-robin)")


def _consume_flags(sub: argparse.ArgumentParser, *, subscription: str, position: str, short_n: bool) -> None:
    sub.add_argument("--subscription", "-ss", default=subscription, help=f"default {subscription}")
    sub.add_argument("--subscription-type", "-st", type=_subscription_type, default="Exclusive",
                     metavar="|".join(SUBSCRIPTION_TYPES), help="default Exclusive (KeyShared: deprecated)")
    # -n is pulsar-perf's for both; end-to-end gives it to the producers.
    sub.add_argument("--consumers-per-topic", *(["-n"] if short_n else []), type=_count, default=1, metavar="N",
                     help="consumers on each topic (default 1; more than one needs a Shared, Failover or "
                          "Key_Shared subscription)")
    sub.add_argument("--receiver-queue-size", "-q", type=_count, default=1000, metavar="N",
                     help="messages each consumer lets the broker send ahead (flow permits, default 1000)")
    sub.add_argument("--initial-position", type=str.lower, choices=["earliest", "latest"], default=position,
                     help=f"where a new subscription starts (default {position})")


def _options(args: argparse.Namespace) -> PerfOptions:
    from herald.perf.options import ConsumeOptions, PerfOptions, ProduceOptions

    produce = ProduceOptions()
    if hasattr(args, "size"):
        produce = ProduceOptions(
            partitions=args.partitions, producers_per_topic=args.producers_per_topic, size=args.size,
            payload_file=args.payload_file, payload_delimiter=args.payload_delimiter, rate=args.rate,
            max_pending=args.max_pending, batching=args.batching == "on", batch_max_messages=args.batch_max_messages,
            batch_max_delay_ms=args.batch_max_delay_ms, compression=args.compression, keys=args.keys,
            key_order=args.key_order)
    consume = ConsumeOptions()
    if hasattr(args, "subscription"):
        consume = ConsumeOptions(
            subscription=args.subscription, subscription_type=args.subscription_type,
            consumers_per_topic=args.consumers_per_topic, receiver_queue_size=args.receiver_queue_size,
            initial_position=args.initial_position)
    security = client_security(args) if args.protocol == "herald" or _security_given(args) else {}
    options = PerfOptions(topics=tuple(args.topics), protocol=args.protocol, url=args.url, pulsar_url=args.pulsar_url,
                          security=security, produce=produce, consume=consume)
    options.check()
    return options


def _security_given(args: argparse.Namespace) -> bool:
    return any(getattr(args, name, None) for name in ("auth_token_file", "tls_trust_certs_file", "tls_cert_file",
                                                        "tls_key_file"))


def cmd_perf(args: argparse.Namespace) -> None:
    from herald.perf import herald_driver, pulsar_driver
    from herald.perf.options import E2E_HEADER
    from herald.perf.payloads import Keys, file_payloads, sized_payload
    from herald.perf.recorder import Recorder, ThreadedRecorder
    from herald.perf.runner import Run, RunLimits, execute

    if args.report_interval <= 0:
        raise InvalidArgumentError(
            f"--report-interval must be a positive number of seconds, got {args.report_interval}")
    options = _options(args)
    command = args.perf_command
    knobs = options.produce
    if command == "end-to-end" and (knobs.payload_file is not None or knobs.size < E2E_HEADER):
        raise InvalidArgumentError(
            f"end-to-end carries the send time in the first {E2E_HEADER} bytes of each message: give "
            f"--size {E2E_HEADER} or more (and no --payload-file)")
    payloads: Callable[[], bytes]
    if knobs.payload_file is not None:
        payloads = itertools.cycle(file_payloads(knobs.payload_file, knobs.payload_delimiter)).__next__
    else:
        payload = sized_payload(knobs.size)
        payloads = lambda: payload  # noqa: E731 - the cheapest callable on the hot path
    keys = Keys(knobs.keys, knobs.key_order)
    limits = RunLimits(count=args.count, duration=args.duration, warmup=args.warmup,
                       report_interval=args.report_interval, as_json=args.json)
    kind = ThreadedRecorder if options.protocol == "pulsar" else Recorder
    driver = herald_driver if options.protocol == "herald" else pulsar_driver

    async def main() -> int:
        run: Run
        work: Callable[[Run], Awaitable[None]]
        if command == "produce":
            run = Run("produce", [kind("produce")], limits)
            work = lambda run: driver.produce(run, options, payloads, keys)  # noqa: E731
        elif command == "consume":
            run = Run("consume", [kind("consume")], limits)
            work = lambda run: driver.consume(run, options)  # noqa: E731
        else:
            run = Run("end-to-end", [kind("send"), kind("end_to_end")], limits)
            work = lambda run: driver.end_to_end(run, options, payloads, keys)  # noqa: E731
        return await execute(run, work)

    status = asyncio.run(main())
    if status:
        raise SystemExit(status)


def add_perf_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `perf` (produce, consume, end-to-end) to the `herald` command's subparsers."""
    perf = commands.add_parser("perf", help="measure throughput and latency (like pulsar-perf)",
                               description="Load generators and latency meters: see docs/perf.md.")
    kinds = perf.add_subparsers(dest="perf_command", required=True, metavar="produce|consume|end-to-end")

    sub = kinds.add_parser("produce", help="send messages as fast as allowed, or at a fixed rate")
    sub.add_argument("topics", nargs="+", metavar="TOPIC", help="topic(s) to load")
    _common_flags(sub)
    _produce_flags(sub)
    sub.set_defaults(func=cmd_perf)

    sub = kinds.add_parser("consume", help="receive and acknowledge; latency from the publish (or event) time")
    sub.add_argument("topics", nargs="+", metavar="TOPIC", help="topic(s) to load")
    _common_flags(sub)
    _consume_flags(sub, subscription="perf-sub", position="latest", short_n=True)
    sub.set_defaults(func=cmd_perf)

    sub = kinds.add_parser("end-to-end", help="produce and consume one topic in this process; latency send to receive")
    sub.add_argument("topics", nargs=1, metavar="TOPIC", help="the topic to produce to and consume from")
    _common_flags(sub)
    _produce_flags(sub)
    _consume_flags(sub, subscription="perf-e2e", position="latest", short_n=False)
    sub.set_defaults(func=cmd_perf)
