"""`herald consume TOPIC`: receive messages through a subscription (acknowledged as printed), or
read them with a Reader (--reader: nothing acknowledged, no subscription left behind), from one
topic or every topic a regex matches (--topics-pattern), from a position or a time, printed as
values, JSON lines, text or a kcat-style format string (cli/output_format.py)."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from herald.cli.client_command import add_url_option, run_client_command, time_ms, usage_error
from herald.cli.client_options import client_security, client_security_flags
from herald.cli.output_format import OUTPUTS, formatter
from herald.cli.vocabulary import EXIT_FAILED, EXIT_OK, deprecated_alias, subscription_type
from herald.client.config import ConsumerType, InitialPosition
from herald.common.codec.message_id import MessageId
from herald.common.errors import InvalidArgumentError


def position(text: str) -> MessageId:
    """earliest, latest (any case) or LEDGER:ENTRY[:PARTITION[:BATCH]], for --position."""
    if text.lower() == "earliest":
        return MessageId.earliest
    if text.lower() == "latest":
        return MessageId.latest
    try:
        return MessageId.from_str(text)
    except InvalidArgumentError:
        raise argparse.ArgumentTypeError(
            f"invalid position {text!r}: use earliest, latest or a message id LEDGER:ENTRY[:PARTITION[:BATCH]]"
        ) from None


def _initial(start: MessageId | None) -> InitialPosition:
    return InitialPosition.Latest if start == MessageId.latest else InitialPosition.Earliest


def consume(args: argparse.Namespace) -> int:
    from herald.client import Client

    render, end = formatter(args.output, args.format)
    timeout = args.timeout or None  # 0: wait forever
    topic: Any = re.compile(args.topics_pattern) if args.topics_pattern else args.topic
    received = 0
    with Client(args.url, **client_security(args)) as client:
        source: Any
        if args.reader:
            source = client.create_reader(args.topic, args.position or MessageId.earliest)
            receive = source.read_next
        else:
            source = client.subscribe(topic, args.subscription, consumer_type=args.type,
                                      initial_position=_initial(args.position))
            receive = source.receive
        with source:
            # Asked for explicitly: move there, whether the subscription is new or not. Without
            # --position or --time an existing subscription goes on where it was.
            if args.time is not None:
                source.seek(args.time)
            elif args.position is not None and not args.reader:
                source.seek(args.position)
            while args.count <= 0 or received < args.count:
                message = receive(timeout)
                if message is None:
                    print(f"no message within {args.timeout}s", file=sys.stderr, flush=True)
                    break
                sys.stdout.write(render(message) + end)
                sys.stdout.flush()
                if not args.reader:
                    source.acknowledge(message)
                received += 1
    name = args.topics_pattern or args.topic
    print(f"{received} message(s) consumed from {name}", file=sys.stderr, flush=True)
    return EXIT_FAILED if args.count > 0 and received < args.count else EXIT_OK


def cmd_consume(args: argparse.Namespace) -> None:
    if args.topics_pattern is not None and args.topic is not None:
        usage_error("consume", "give a TOPIC or --topics-pattern, not both")
    if args.topics_pattern is None and args.topic is None:
        usage_error("consume", "give a TOPIC (or --topics-pattern REGEX)")
    if args.reader and args.subscription is not None:
        usage_error("consume", "--reader reads without a subscription: drop -s/--subscription")
    if args.reader and args.topics_pattern is not None:
        usage_error("consume", "--reader reads one topic: give a TOPIC, not --topics-pattern")
    if not args.reader and not args.subscription:
        usage_error("consume", "-s/--subscription is required (or --reader, to read without one)")
    if args.time is not None and args.position is not None:
        usage_error("consume", "give --position or --time, not both")
    if args.topics_pattern is not None:
        try:
            re.compile(args.topics_pattern)
        except re.error as exc:
            usage_error("consume", f"invalid --topics-pattern {args.topics_pattern!r}: {exc}")
    run_client_command(consume, args)


def add_consume_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "consume", help="receive and print messages (acknowledged), or read them (--reader)",
        description="Receive messages through a subscription and acknowledge them as they are printed, or "
                    "read them without a subscription (--reader).")
    sub.add_argument("topic", nargs="?", default=None,
                     help="topic name (persistent://tenant/namespace/name, or a short name in public/default)")
    sub.add_argument("-s", "--subscription", default=None, help="subscription name (required unless --reader)")
    sub.add_argument("-t", "--type", type=subscription_type, default=ConsumerType.Exclusive, metavar="TYPE",
                     help="subscription type: Exclusive (default), Shared, Failover or Key_Shared")
    count = sub.add_argument("-n", "--count", type=int, default=1, metavar="N",
                             help="how many messages to receive (default 1; 0 = forever)")
    deprecated_alias(sub, "--num-messages", count)
    start = sub.add_argument(
        "--position", type=position, default=None, metavar="earliest|latest|LEDGER:ENTRY",
        help="where to start: a new subscription starts there (default earliest); an existing subscription "
             "or a reader is moved there (seek); without it an existing subscription goes on where it was")
    deprecated_alias(sub, "--initial-position", start)
    deprecated_alias(sub, "-p", start)
    sub.add_argument("--time", type=time_ms, default=None, metavar="ISO|MS",
                     help="start at the first message published at or after this time (unix milliseconds or "
                          "ISO 8601, UTC unless it names a zone): a seek")
    sub.add_argument("--reader", action="store_true",
                     help="read with a Reader: nothing is acknowledged and no subscription is left behind")
    sub.add_argument("--topics-pattern", default=None, metavar="REGEX",
                     help="subscribe to every topic whose full name matches, in the pattern's namespace, e.g. "
                          "'persistent://public/default/orders-.*' (followed as topics come and go)")
    sub.add_argument("-o", "--output", choices=OUTPUTS, default="text",
                     help="text (default): id, key and value; value: the payload only, one per line; json: one "
                          "JSON object per line (id, topic, key, properties, publish_time, event_time, "
                          "redelivery_count, value; value_encoding says utf-8 or base64)")
    sub.add_argument("-F", "--format", default=None, metavar="STR",
                     help=r"kcat -f style format, instead of -o: %%t topic, %%k key, %%s value, %%i id, %%T publish "
                          r"time (ms), %%h properties, %%p partition, %%%% a percent sign; \n \t escapes")
    sub.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                     help="seconds to wait for each message (default 30; 0 = forever)")
    add_url_option(sub)
    client_security_flags(sub)
    sub.set_defaults(func=cmd_consume)
