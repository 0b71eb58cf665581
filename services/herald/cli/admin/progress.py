"""Progress of long admin commands (a dlq replay, an expiry over every subscription): a rich
progress bar on stderr when stderr is a terminal, else a plain line now and then ("replayed
5000/20000") that a log keeps readable; nothing with --json, whose stdout is one document and whose
stderr stays for errors."""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import IO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

PLAIN_INTERVAL = 2.0  # seconds between plain lines (and one at the end)


class CommandProgress:
    """`with CommandProgress("replayed", total) as progress: progress.update(done)`; total None when
    unknown. `enabled` False (--json) shows nothing; `stream` is stderr unless a test gives one."""

    def __init__(self, verb: str, total: int | None, *, enabled: bool = True, stream: IO[str] | None = None,
                 terminal: bool | None = None, interval: float = PLAIN_INTERVAL) -> None:
        self.verb = verb
        self.total = total
        self.done = 0
        self._stream = stream if stream is not None else sys.stderr
        self._enabled = enabled
        self._terminal = self._stream.isatty() if terminal is None else terminal
        self._interval = interval
        self._last_line = 0.0
        self._shown = -1
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> CommandProgress:
        if self._enabled and self._terminal:
            console = Console(file=self._stream, force_terminal=True)
            self._bar = Progress(TextColumn(self.verb), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=console, transient=False)
            self._bar.start()
            self._task = self._bar.add_task(self.verb, total=self.total)
        return self

    def update(self, done: int) -> None:
        self.done = done
        if not self._enabled:
            return
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=done)
            return
        now = time.monotonic()
        if now - self._last_line >= self._interval:
            self._line()
            self._last_line = now

    def _line(self) -> None:
        if self.done == self._shown:
            return
        self._shown = self.done
        of = f"/{self.total}" if self.total is not None else ""
        print(f"{self.verb} {self.done}{of}", file=self._stream, flush=True)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.stop()
        elif self._enabled:
            self._line()  # where it ended, however soon
