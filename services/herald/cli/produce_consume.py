"""`herald produce` and `herald consume`: send messages to a topic, or receive, print and acknowledge
them, through herald.client."""

from __future__ import annotations

import argparse
import os
import sys
import time

from herald.cli.client_options import DEFAULT_SERVICE_URL, client_security, client_security_flags


def cmd_produce(args: argparse.Namespace) -> None:
    from herald.client import Client

    with Client(args.service_url, **client_security(args)) as client, client.create_producer(args.topic) as producer:
        started = time.perf_counter()
        for i in range(args.num_messages):
            text = args.message.replace("{i}", str(i))
            message_id = producer.send(text.encode(), key=args.key)
            if not args.quiet:
                print(f"sent {message_id}", flush=True)
        elapsed = time.perf_counter() - started
    print(f"{args.num_messages} message(s) produced to {args.topic} in {elapsed:.3f}s", flush=True)


def cmd_consume(args: argparse.Namespace) -> None:
    from herald.client import Client, ConsumerType, InitialPosition

    consumer_type = ConsumerType[args.type]
    position = InitialPosition[args.initial_position]
    received = 0
    with Client(args.service_url, **client_security(args)) as client, client.subscribe(
        args.topic, args.subscription, consumer_type=consumer_type, initial_position=position
    ) as consumer:
        while args.num_messages <= 0 or received < args.num_messages:
            message = consumer.receive(timeout=args.timeout)
            if message is None:
                print(f"no message within {args.timeout}s", file=sys.stderr, flush=True)
                break
            consumer.acknowledge(message)
            received += 1
            value = message.value.decode(errors="replace")
            key = f" key={message.key}" if message.key is not None else ""
            print(f"{message.message_id}{key}: {value}", flush=True)
    print(f"{received} message(s) consumed from {args.topic}", flush=True)
    if args.num_messages > 0 and received < args.num_messages:
        raise SystemExit(1)


def add_produce_consume_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `produce` and `consume` to the `herald` command's subparsers."""
    env_url = os.environ.get("HERALD_SERVICE_URL", DEFAULT_SERVICE_URL)
    sub = commands.add_parser("produce", help="send messages to a topic")
    sub.add_argument("topic")
    sub.add_argument("-m", "--message", default="hello", help="message text; {i} is replaced by the message number")
    sub.add_argument("-n", "--num-messages", type=int, default=1)
    sub.add_argument("-k", "--key", default=None, help="message key")
    sub.add_argument("-q", "--quiet", action="store_true", help="print only the summary")
    sub.add_argument("--service-url", default=env_url, help=f"default {env_url} (env HERALD_SERVICE_URL)")
    client_security_flags(sub)
    sub.set_defaults(func=cmd_produce)

    sub = commands.add_parser("consume", help="receive, print and acknowledge messages")
    sub.add_argument("topic")
    sub.add_argument("-s", "--subscription", required=True)
    sub.add_argument("-n", "--num-messages", type=int, default=1, help="how many to receive (0 = forever)")
    sub.add_argument("-t", "--type", default="Exclusive", choices=["Exclusive", "Shared", "Failover", "KeyShared"])
    sub.add_argument("-p", "--initial-position", default="Earliest", choices=["Earliest", "Latest"])
    sub.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each message")
    sub.add_argument("--service-url", default=env_url, help=f"default {env_url} (env HERALD_SERVICE_URL)")
    client_security_flags(sub)
    sub.set_defaults(func=cmd_consume)
