"""Dead letters moved per second by one `herald dlq-worker` process: a `herald standalone` gets N
dead letters (a Shared subscription with max_redeliver_count 1 nacks every entry once), then a
worker starts and the clock runs from its start-up until the subscription's backlog is 0. Each letter is one entry
of --batch messages. Appends to bench/results/dlq_worker.jsonl."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

from harness import Service, Standalone, append_result
from herald.client import AsyncClient, ConsumerType, DeadLetterPolicy, InitialPosition
from herald.client.admin import AdminClient


async def stats(admin: AdminClient, topic: str) -> tuple[int, int]:
    (sub,) = [s for s in (await admin.topic_stats(topic)).subscriptions if s.name == "s"]
    return sub.dead_letters, sub.backlog_entries


async def make_letters(url: str, topic: str, letters: int, batch: int) -> None:
    async with AsyncClient(url) as client, AdminClient(url) as admin:
        consumer = await client.subscribe(topic, "s", ConsumerType.Shared, InitialPosition.Earliest,
                                          negative_ack_redelivery_delay=0.01, receiver_queue_size=1000,
                                          dead_letter_policy=DeadLetterPolicy(max_redeliver_count=1))
        producer = await client.create_producer(topic, batching_max_messages=batch, batching_max_publish_delay=0.5,
                                                block_if_queue_full=True)
        for i in range(letters):
            for j in range(batch):
                last = await producer.send_async(f"letter {i} message {j}".encode(), properties={"n": str(i)})
            producer.flush_nowait()
        await last
        while (await stats(admin, topic))[0] < letters:
            message = await consumer.receive(timeout=0.2)
            if message is not None:
                consumer.negative_acknowledge(message)
        await consumer.close()


async def wait_drained(url: str, topic: str) -> None:
    async with AdminClient(url) as admin:
        while True:
            if await stats(admin, topic) == (0, 0):
                return
            await asyncio.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--letters", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=1, help="messages per letter")
    parser.add_argument("--flow-permits", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        standalone = Standalone(base, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        standalone.start()
        url = standalone.service_url
        worker = None
        try:
            topic = "persistent://public/default/bench-dlq"
            asyncio.run(make_letters(url, topic, args.letters, args.batch))
            worker = Service(base, "worker", ["dlq-worker", "--service-url", url, "--metrics-port", "-1",
                                              "--flow-permits", str(args.flow_permits),
                                              "--broker-refresh-interval", "0.2"],
                             "is running", env={**os.environ, "PYTHONUNBUFFERED": "1"})
            worker.start()
            started = time.perf_counter()  # from the worker's start-up on (imports not counted)
            asyncio.run(wait_drained(url, topic))
            elapsed = time.perf_counter() - started
        finally:
            for service in (worker, standalone):
                if service is not None:
                    service.stop()
    result = {"bench": "dlq_worker", "letters": args.letters, "messages_per_letter": args.batch,
              "flow_permits": args.flow_permits, "seconds": round(elapsed, 3),
              "letters_per_second": round(args.letters / elapsed, 1),
              "messages_per_second": round(args.letters * args.batch / elapsed, 1)}
    print(json.dumps(append_result("dlq_worker.jsonl", result)))


if __name__ == "__main__":
    main()
