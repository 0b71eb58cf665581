"""The nemesis's checker, independent of the workload: it shares no code with the producers. It
reads the workload's history as plain JSON data, reads every topic back with a fresh client from
earliest on a new subscription, and counts violations of Herald's guarantees:

  lost           an acknowledged message is not stored
  duplicate      a message is stored more than once, under two ids (every producer is named:
                 dedup is on); the same id read twice is a redelivery to the checker, not counted
  wrong-id       an acknowledged message is stored under another id than its receipt named
                 (a receipt of ledger -1 names no id: the broker answered a resend that dedup
                 recognised, as Pulsar does; those are counted as duplicate_receipts, not violations)
  reordered      one producer's messages are stored out of send order within a partition
  id-order       message ids are not unique and increasing within a partition
  unknown        a stored message nobody sent
  undelivered    a live subscription never delivered an acknowledged message

History format (what the workload writes): {"topics": {topic: partitions}, "subscriptions": [...],
"sends": [{"producer", "topic", "seq", "payload", "acked", "id": [ledger, entry, partition, batch]}],
"deliveries": {topic: {subscription: [[payload, id], ...]}}}."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from herald.client import AsyncClient, InitialPosition
from herald.common.errors import HeraldError

VIOLATIONS = ("lost", "duplicate", "wrong-id", "reordered", "id-order", "unknown", "undelivered")
READ_ATTEMPTS = 5
Stored = dict[str, list[tuple[str, tuple[int, ...]]]]  # topic -> [(payload, id)] in the order read


@dataclass
class Report:
    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    acked: int = 0
    stored: int = 0
    read_retries: list[str] = field(default_factory=list)  # errors a read-back met and retried past
    duplicate_receipts: int = 0  # receipts of resends dedup recognised: no message id, by design
    redelivered: int = 0  # copies the read-back got again under the same id (not stored twice)

    def add(self, kind: str, example: str) -> None:
        self.counts[kind] += 1
        if len(self.examples.setdefault(kind, [])) < 5:
            self.examples[kind].append(example)

    @property
    def ok(self) -> bool:
        return not any(self.counts[kind] for kind in VIOLATIONS)

    def render(self) -> str:
        lines = [f"acknowledged {self.acked} ({self.duplicate_receipts} by a duplicate receipt), "
                 f"stored {self.stored} (read back again: {self.redelivered}); violations: "
                 + ", ".join(f"{kind}={self.counts[kind]}" for kind in VIOLATIONS)]
        lines += [f"  {kind}: {example}" for kind, examples in self.examples.items() for example in examples]
        lines += [f"  read-back retried after: {error}" for error in self.read_retries[:5]]
        return "\n".join(lines)


def _producer_and_seq(payload: str) -> tuple[str, int] | None:
    name, _, seq = payload.rpartition(":")
    return (name, int(seq)) if name and seq.isdigit() else None


def check(history: dict[str, Any], stored: Stored) -> Report:
    """Compare what the history says was acknowledged and delivered with what is stored."""
    report = Report()
    sent = {(s["topic"], s["payload"]): s for s in history["sends"]}
    acked = {key: s for key, s in sent.items() if s["acked"]}
    report.acked = len(acked)
    for topic, read in stored.items():
        # A copy read twice under one id is a redelivery to the checker (its consumer reconnected),
        # not a second stored copy: each stored copy counts once, at its first reading.
        first_reads: dict[tuple[int, ...], str] = {}
        for payload, message_id in read:
            first_reads.setdefault(tuple(message_id), payload)
        report.redelivered += len(read) - len(first_reads)
        messages = [(payload, message_id) for message_id, payload in first_reads.items()]
        report.stored += len(messages)
        copies = Counter(payload for payload, _ in messages)
        for payload, count in copies.items():
            if count > 1:
                report.add("duplicate", f"{topic} {payload} stored {count} times")
        last_seq: dict[tuple[int, str], int] = {}
        last_id: dict[int, tuple[int, ...]] = {}
        for payload, message_id in messages:
            send = sent.get((topic, payload))
            if send is None:
                report.add("unknown", f"{topic} {payload} at {message_id}")
            elif send["acked"] and send["id"][0] < 0:
                report.duplicate_receipts += 1
            elif send["acked"] and tuple(send["id"]) != tuple(message_id):
                report.add("wrong-id", f"{topic} {payload} acknowledged as {send['id']}, stored at {message_id}")
            partition = message_id[2]
            if partition in last_id and message_id <= last_id[partition]:
                report.add("id-order", f"{topic} {message_id} read after {last_id[partition]}")
            last_id[partition] = message_id
            parsed = _producer_and_seq(payload)
            if parsed is not None:
                key = (partition, parsed[0])
                if key in last_seq and parsed[1] < last_seq[key]:
                    report.add("reordered", f"{topic} partition {partition}: {payload} after seq {last_seq[key]}")
                last_seq[key] = parsed[1]
    present = {(topic, payload) for topic, messages in stored.items() for payload, _ in messages}
    for topic, payload in sorted(set(acked) - present):
        report.add("lost", f"{topic} {payload} acknowledged as {acked[topic, payload]['id']}")
    for topic, subscriptions in history["deliveries"].items():
        for subscription in history["subscriptions"]:
            delivered = {payload for payload, _ in subscriptions.get(subscription, [])}
            for key in sorted(k for k in acked if k[0] == topic and k[1] not in delivered):
                report.add("undelivered", f"{subscription}@{topic} never delivered {key[1]}")
    return report


async def _read_topic(service_url: str, topic: str, expected: set[str],
                      quiet: float) -> list[tuple[str, tuple[int, ...]]]:
    """Every message of `topic` from earliest on a new subscription: until every expected payload
    came and then `quiet` seconds passed without another, or `quiet` * 6 without any."""
    subscription = f"nemesis-check-{uuid.uuid4().hex[:8]}"
    async with AsyncClient(service_url, operation_timeout=60.0, keep_alive=1.0) as client:
        consumer = await client.subscribe(topic, subscription, initial_position=InitialPosition.Earliest,
                                          receiver_queue_size=2000)
        out: list[tuple[str, tuple[int, ...]]] = []
        seen: set[str] = set()
        while True:
            message = await consumer.receive(timeout=quiet if expected <= seen else quiet * 6)
            if message is None:
                break
            payload = message.value.decode(errors="replace")
            mid = message.message_id
            out.append((payload, (mid.ledger_id, mid.entry_id, mid.partition, mid.batch_index)))
            seen.add(payload)
            consumer.acknowledge(message)
        await consumer.close()
        return out


def read_back(service_url: str, history: dict[str, Any], quiet: float = 5.0,
              retried: list[str] | None = None) -> Stored:
    """Each topic of the history, read with a fresh client (never the workload's). A read that
    fails (the cluster may still be settling after the heal) starts over on a new subscription,
    up to READ_ATTEMPTS times; the errors go into `retried` for the report."""
    async def read_all() -> Stored:
        stored: Stored = {}
        for topic in history["topics"]:
            expected = {s["payload"] for s in history["sends"] if s["topic"] == topic and s["acked"]}
            for attempt in range(READ_ATTEMPTS):
                try:
                    stored[topic] = await _read_topic(service_url, topic, expected, quiet)
                    break
                except HeraldError as exc:
                    if retried is not None:
                        retried.append(f"{topic}: {exc}")
                    if attempt == READ_ATTEMPTS - 1:
                        raise
                    await asyncio.sleep(2.0)
        return stored
    return asyncio.run(read_all())
