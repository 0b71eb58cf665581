"""What every `herald perf` run shares: the reporting task (a line every --report-interval, due
times computed from the start so that lines do not drift), the warm-up, the stop conditions
(--duration here; --count in the drivers, which know what they counted), Ctrl-C, and the summary.
Drivers get a `Run`, record into its recorders and return once `run.stopping` is set or their
count is done."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

from herald.common.errors import InvalidArgumentError
from herald.perf.recorder import Recorder
from herald.perf.report import interval_line, summary_line

TICK = 0.05  # seconds between folds of recorded values and checks of the stop conditions
DRAIN_TIMEOUT = 30.0  # how long a stopping driver may wait for its messages in flight


@dataclass(frozen=True, slots=True)
class RunLimits:
    count: int = 0  # messages (0: no limit)
    duration: float = 0.0  # seconds (0: no limit)
    warmup: float = 0.0  # seconds left out of the summary
    report_interval: float = 10.0
    as_json: bool = False


class Run:
    """One run's shared state: its recorders, the stop signal, the errors seen."""

    def __init__(self, command: str, recorders: Sequence[Recorder], limits: RunLimits,
                 out: TextIO | None = None) -> None:
        self.command = command
        self.recorders = list(recorders)
        self.limits = limits
        self.out = out if out is not None else sys.stdout
        self.stopping = asyncio.Event()
        self.interrupted = False
        self.errors = 0
        self.first_error: str | None = None
        self.started = time.monotonic()
        self.measure_started = self.started
        self.finished: float | None = None  # when the driver returned
        self._reporter: asyncio.Task[None] | None = None
        for recorder in self.recorders:
            recorder.measuring = limits.warmup <= 0

    def ready(self) -> None:
        """The drivers' producers and consumers are up: the clock of the run (its report lines,
        warm-up and --duration) starts now, not while connecting."""
        if self._reporter is not None:
            return
        self.started = self.measure_started = time.monotonic()
        self._reporter = asyncio.create_task(self.report())

    async def close(self) -> None:
        """Stop the reporting task (the driver returned)."""
        self.finished = time.monotonic()
        self.stop()
        if self._reporter is not None:
            self._reporter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reporter

    def stop(self) -> None:
        self.stopping.set()

    def interrupt(self) -> None:
        self.interrupted = True
        self.stopping.set()

    def error(self, message: str) -> None:
        """A failed operation (a send refused, a receive failed): counted, the first one kept."""
        self.errors += 1
        if self.first_error is None:
            self.first_error = message

    def emit(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    async def report(self) -> None:
        """Fold, print a line every report interval, end the warm-up and stop at --duration."""
        limits = self.limits
        warming = limits.warmup > 0
        warmup_end = self.started + limits.warmup
        end = self.started + limits.warmup + limits.duration if limits.duration > 0 else None
        intervals = 1
        last_line = self.started
        while True:
            now = time.monotonic()
            due = self.started + intervals * limits.report_interval
            if now >= due:
                # Skipped intervals (a stalled loop) are merged into one line rather than drifting.
                # Emitted before the warm-up ends at this tick: the interval ran in the warm-up.
                intervals = int((now - self.started) / limits.report_interval) + 1
                self.emit(interval_line(now - self.started, [r.interval(now - last_line) for r in self.recorders],
                                        warmup=warming, as_json=limits.as_json))
                last_line = now
                due = self.started + intervals * limits.report_interval
            else:
                for recorder in self.recorders:
                    recorder.fold()
            if warming and now >= warmup_end:
                warming = False
                for recorder in self.recorders:
                    recorder.end_warmup()
                self.measure_started = now
            if end is not None and now >= end:
                self.stop()
                return
            wake = min(due, now + TICK) if end is None else min(due, end, now + TICK)
            await asyncio.sleep(max(0.0, wake - time.monotonic()))

    def summary(self) -> str:
        seconds = (self.finished if self.finished is not None else time.monotonic()) - self.measure_started
        streams = [recorder.summary(seconds) for recorder in self.recorders]
        warmup_messages = max((recorder.warmup_messages for recorder in self.recorders), default=0)
        return summary_line(self.command, seconds, streams, warmup_s=self.limits.warmup,
                            warmup_messages=warmup_messages, errors=self.errors, interrupted=self.interrupted,
                            as_json=self.limits.as_json)


async def execute(run: Run, driver: Callable[[Run], Awaitable[None]]) -> int:
    """Run `driver` with the reporting task beside it until it returns (its count done, or it saw
    `stopping`); Ctrl-C stops it (a second Ctrl-C ends the process at once). Prints the summary;
    returns the exit status: 0, 1 when an operation failed, 2 when the run could not start as asked."""
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, _interrupt, run, loop)
    status = 0
    try:
        await driver(run)
    except InvalidArgumentError as error:  # the run cannot start as asked (e.g. pulsar-client missing): usage
        run.error(_describe(error))
        status = 2
    except Exception as error:  # any other failure ends the run with its message and status 1
        run.error(_describe(error))
        status = 1
    finally:
        await run.close()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)
    run.emit(run.summary())
    if run.errors:
        print(f"error: {run.first_error}" + (f" ({run.errors} operations failed)" if run.errors > 1 else ""),
              file=sys.stderr, flush=True)
        status = status or 1
    return status


def _interrupt(run: Run, loop: asyncio.AbstractEventLoop) -> None:
    run.interrupt()
    # A second Ctrl-C is not handled here: the default handler raises KeyboardInterrupt.
    loop.remove_signal_handler(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _describe(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return text
