"""A bench-only stage recorder for one produce window's life (bench/window_trace.py): wrappers that
note time.perf_counter_ns() at each stage boundary, installed by monkeypatching, so Herald's code
carries no instrument. perf_counter_ns is CLOCK_MONOTONIC on Linux, one clock for every process of
the machine: the client's and the standalone's marks line up.

The client's hooks are installed in the bench process; the standalone's by bench/trace_site/
sitecustomize.py when HERALD_BENCH_TRACE names the file its marks go to (written at exit)."""

from __future__ import annotations

import atexit
import functools
import json
import os
import time
from collections.abc import Callable
from typing import Any

_now = time.perf_counter_ns
EVENTS: list[tuple[str, int]] = []
_note = EVENTS.append


def mark(name: str) -> None:
    _note((name, _now()))


def _wrap(owner: Any, attr: str, before: str | None, after: str | None,
          when: Callable[[Any], bool] | None = None) -> None:
    original = getattr(owner, attr)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if before is not None:
            _note((before, _now()))
        result = original(*args, **kwargs)
        if after is not None and (when is None or when(result)):
            _note((after, _now()))
        return result

    setattr(owner, attr, wrapper)


def _wrap_async(owner: Any, attr: str, before: str | None, after: str | None) -> None:
    original = getattr(owner, attr)

    @functools.wraps(original)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        if before is not None:
            _note((before, _now()))
        result = await original(*args, **kwargs)
        if after is not None:
            _note((after, _now()))
        return result

    setattr(owner, attr, wrapper)


def install_client_hooks() -> None:
    from herald.client import producer_protocol, sender

    _wrap(sender.Sender, "ship", "c.batch_closed", None)
    _wrap(producer_protocol.ProducerProtocol, "next_request", "c.next_request", "c.request_taken",
          lambda r: r is not None)
    _wrap(producer_protocol.ProducerProtocol, "request_written", "c.grpc_write_done", None)
    _wrap(producer_protocol.ProducerProtocol, "on_receipt", "c.receipt_read", "c.futures_resolved")


def install_server_hooks(path: str) -> None:
    from herald.broker.core import managed_ledger, producer, producer_session
    from herald.broker.grpc import broker_servicer
    from herald.storage.client import local_node
    from herald.storage.node import journal

    _wrap(producer_session.ProducerSession, "publish", "s.publish", "s.published")
    _wrap(producer.Producer, "check", "s.check", "s.checked")
    _wrap(managed_ledger.ManagedLedger, "add_entry_nowait", "s.ml_add", None)
    _wrap(local_node.LocalAddStream, "add", "s.local_add", None)
    _wrap(journal.Journal, "append", "s.journal_append", None)
    _wrap(journal.Journal, "_write_batch", "w.write_start", "w.batch_done")
    _wrap(journal.Journal, "_complete", "s.loop_completion", None)
    _wrap(local_node.LocalAddStream, "_answer", None, "s.add_answered")
    _wrap(producer_session.Receipt, "succeed", "s.receipt_succeed", None)
    _wrap_async(producer_session.ProducerSession, "receipts", None, "s.receipts_taken")
    _wrap_async(broker_servicer._Replies, "write", "s.reply_write", "s.reply_written")

    init = journal.Journal.__init__

    def journal_init(self: journal.Journal, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        fsync = self._fsync

        def timed_fsync(fd: int) -> None:
            _note(("w.fsync_start", _now()))
            fsync(fd)
            _note(("w.fsync_done", _now()))

        self._fsync = timed_fsync

    journal.Journal.__init__ = journal_init  # type: ignore[method-assign]

    def dump() -> None:
        with open(path, "w") as out:
            json.dump(EVENTS, out)

    atexit.register(dump)


def load(path: str) -> list[tuple[str, int]]:
    with open(path) as f:
        return [(name, int(t)) for name, t in json.load(f)]


def server_trace_path() -> str | None:
    return os.environ.get("HERALD_BENCH_TRACE") or None
