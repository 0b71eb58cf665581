"""A Herald consumer in a process of its own, reading the topic hostile entries go to through a
Shared and a Key_Shared subscription (receive with a timeout, acknowledge, print one JSON line per
message). Its own process, so that its peak RSS (VmHWM) is the consumer's alone, and a crash or an
exception out of receive() is seen (a {"raised": ...} line, the process gone)."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from tests.conftest import service_env
from tests.fuzz.target import TRACEBACK

SUBSCRIPTIONS = ("shared", "key-shared")

SCRIPT = r'''
import asyncio, json, logging, sys, traceback
from herald.client import AsyncClient, AuthenticationToken, AuthorizationError, ConsumerType, InitialPosition

KINDS = {"shared": ConsumerType.Shared, "key-shared": ConsumerType.KeyShared}


def say(**fields):
    print(json.dumps(fields), flush=True)


async def subscribe(client, topic, name):
    for _ in range(150):  # grants are cached for about a second
        try:
            return await client.subscribe(topic, name, KINDS[name], InitialPosition.Earliest)
        except AuthorizationError:
            await asyncio.sleep(0.2)
    raise AssertionError(f"still not allowed to subscribe to {topic}")


async def drain(name, consumer):
    while True:
        message = await consumer.receive(timeout=1.0)
        if message is None:
            continue
        value = message.data()
        say(sub=name, value=value[:64].hex(), size=len(value))
        consumer.acknowledge(message)


async def main(url, ca, token, topic):
    async with AsyncClient(url, auth=AuthenticationToken(token), tls_trust_certs_file_path=ca,
                           operation_timeout=30.0, stats_interval=0) as client:
        consumers = {name: await subscribe(client, topic, name) for name in KINDS}
        say(ready=True)
        await asyncio.gather(*(drain(name, consumer) for name, consumer in consumers.items()))


logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
try:
    asyncio.run(main(*sys.argv[1:5]))
except BaseException as exc:
    say(raised=repr(exc), traceback=traceback.format_exc())
    sys.exit(1)
'''


class ConsumerProcess:
    """The consumer process, its output lines read on a thread."""

    def __init__(self, directory: Path, url: str, ca_file: Path, token: str, topic: str) -> None:
        script = directory / "hostile_consumer.py"
        script.write_text(SCRIPT)
        self.log_path = directory / "hostile_consumer.log"
        self._log_offset = 0
        self._lines: queue.Queue[dict[str, Any]] = queue.Queue()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, str(script), url, str(ca_file), token, topic],
                                         stdout=subprocess.PIPE, stderr=log, env=service_env())
        assert self.proc.stdout is not None
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True, name="hostile-consumer").start()
        self.received = 0  # messages printed, markers and hostile ones
        self.expect(lambda line: line.get("ready") is True, "the consumer to subscribe", 60.0)

    def _read(self, stdout: IO[bytes]) -> None:
        for raw in stdout:
            try:
                self._lines.put(json.loads(raw))
            except ValueError:
                self._lines.put({"unreadable": raw.decode(errors="replace")})

    def expect(self, wanted: Any, what: str, seconds: float) -> None:
        """Read lines until one satisfies `wanted`; fails when the consumer raised, died or
        printed nothing wanted within `seconds`."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"timed out waiting for {what}:\n{self.log_tail()}"
            try:
                line = self._lines.get(timeout=min(left, 0.5))
            except queue.Empty:
                assert self.proc.poll() is None, f"the consumer died ({self.proc.returncode}):\n{self.log_tail()}"
                continue
            assert "raised" not in line, f"the consumer raised {line['raised']}:\n{line.get('traceback')}"
            assert "unreadable" not in line, line
            if "sub" in line:
                self.received += 1
            if wanted(line):
                return

    def wait_for(self, marker: bytes, seconds: float) -> None:
        """Until both subscriptions delivered `marker`."""
        waiting = set(SUBSCRIPTIONS)

        def seen(line: dict[str, Any]) -> bool:
            if line.get("value") == marker.hex():
                waiting.discard(line["sub"])
            return not waiting

        self.expect(seen, f"{marker!r} on {sorted(waiting)}", seconds)

    def peak_rss(self) -> int:
        """Bytes: the kernel's high-water mark of the process's resident set (VmHWM)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM in /proc/<pid>/status")

    def new_log(self) -> str:
        text = self.log_path.read_text(errors="replace")
        new, self._log_offset = text[self._log_offset:], len(text)
        return new

    def check_log(self) -> None:
        new = self.new_log()
        found = TRACEBACK.search(new)
        assert found is None, (
            f"the consumer logged an unhandled exception:\n{new[max(0, found.start() - 2000):][:6000]}")

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
