"""The blocking TableView: AsyncTableView's API for threads. Reads of the dict are answered from a
copy taken on the client's loop (the loop applies updates, so a copy made there is consistent);
actions run on a thread of the view's own, one update at a time and in order, never on the loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from herald.client.sync.loop import LoopThread
from herald.client.table_view import AsyncTableView

if TYPE_CHECKING:
    from herald.client.client import AsyncClient
    from herald.client.schema import Schema

T = TypeVar("T")
R = TypeVar("R")
SyncAction = Callable[[str, Any], Any]


class TableView(Generic[T]):
    """A topic as a dict of key -> latest value, kept up to date. Made by `Client.create_table_view`."""

    def __init__(self, thread: LoopThread, view: AsyncTableView[T]) -> None:
        self._thread = thread  # the client's
        self._async = view
        self._action_thread: concurrent.futures.ThreadPoolExecutor | None = None

    @classmethod
    def _create(cls, thread: LoopThread, core: AsyncClient, topic: str, schema: Schema[Any] | None) -> TableView[Any]:
        async def create() -> AsyncTableView[Any]:
            if schema is None:
                return await core.create_table_view(topic)
            return await core.create_table_view(topic, schema=schema)

        return cls(thread, thread.run(create()))

    @property
    def topic(self) -> str:
        return self._async.topic

    @property
    def closed(self) -> bool:
        return self._async.closed

    # ---- what it holds (a consistent copy, taken on the loop) ----

    def _snapshot(self) -> dict[str, T]:
        return self._run(_copy(self._async))

    def get(self, key: str, default: T | None = None) -> T | None:
        return self._snapshot().get(key, default)

    def __getitem__(self, key: str) -> T:
        return self._snapshot()[key]

    def __contains__(self, key: object) -> bool:
        return key in self._snapshot()

    def __len__(self) -> int:
        return len(self._snapshot())

    def __iter__(self) -> Iterator[str]:
        return iter(self._snapshot())

    def keys(self) -> list[str]:
        return list(self._snapshot())

    def values(self) -> list[T]:
        return list(self._snapshot().values())

    def items(self) -> list[tuple[str, T]]:
        return list(self._snapshot().items())

    # ---- actions, on the view's own thread ----

    def for_each(self, action: SyncAction) -> None:
        """action(key, value) for each key held now (on the view's thread, waited for); an action
        that raises is logged and the others still run."""
        self._run(self._async.for_each(self._on_thread(action)))

    def listen(self, action: SyncAction) -> None:
        """action(key, value) for every update from now on (value None: removed), on the view's thread."""
        self._async_call(lambda: self._async.listen(self._on_thread(action)))

    def for_each_and_listen(self, action: SyncAction) -> None:
        """for_each, then listen, with no update missed or seen twice between the two."""
        self._run(self._async.for_each_and_listen(self._on_thread(action)))

    def _on_thread(self, action: SyncAction) -> Callable[[str, Any], Coroutine[Any, Any, None]]:
        if self._action_thread is None:
            self._action_thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="herald-table-view")
        executor = self._action_thread

        async def run(key: str, value: Any) -> None:
            await asyncio.get_running_loop().run_in_executor(executor, action, key, value)

        return run

    def _async_call(self, call: Callable[[], None]) -> None:
        async def on_loop() -> None:
            call()

        self._run(on_loop())

    # ---- lifecycle ----

    def close(self) -> None:
        """Stop following the topic; closing twice does nothing."""
        try:
            if not self._thread.closed:
                self._run(self._async.close())
        finally:
            if self._action_thread is not None:
                self._action_thread.shutdown(wait=False)  # an action calling close() runs on it

    def _run(self, coro: Coroutine[Any, Any, R]) -> R:
        return self._thread.run(coro)

    def __enter__(self) -> TableView[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TableView(topic={self.topic!r})"


async def _copy(view: AsyncTableView[T]) -> dict[str, T]:
    return dict(view.items())
