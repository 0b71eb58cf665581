"""Issue 22, item 6: long admin commands show progress: a rich progress bar on stderr when it is a
terminal (checked in-process with a forced terminal, and through a real pty), plain periodic lines
otherwise ("replayed 30/30", checked through a subprocess whose stderr is a pipe), never with --json."""

from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import time

import pytest
from herald.cli.admin.progress import CommandProgress
from herald.client import Client
from herald.dlq.peek import dead_letter_topic

from tests.conftest import VENV_BIN, StandaloneProcess, service_env
from tests.helpers import unique_topic

DEAD_LETTERS = 30


def test_a_terminal_gets_a_progress_bar() -> None:
    stream = io.StringIO()
    with CommandProgress("replayed", 10, stream=stream, terminal=True) as progress:
        for done in range(1, 11):
            progress.update(done)
    shown = stream.getvalue()
    assert "replayed" in shown and "10/10" in shown and "━" in shown and "\x1b[" in shown  # drawn, in colour


def test_a_pipe_gets_plain_periodic_lines() -> None:
    stream = io.StringIO()
    with CommandProgress("replayed", 20000, stream=stream, terminal=False, interval=0) as progress:
        for done in (5000, 10000, 20000):
            progress.update(done)
    assert stream.getvalue().splitlines() == ["replayed 5000/20000", "replayed 10000/20000", "replayed 20000/20000"]
    unknown = io.StringIO()
    with CommandProgress("skipped", None, stream=unknown, terminal=False) as progress:
        progress.update(7)
    assert unknown.getvalue() == "skipped 7\n"  # no total known: the count alone (and once: it did not change)


@pytest.mark.parametrize("terminal", [True, False])
def test_json_output_shows_no_progress(terminal: bool) -> None:
    stream = io.StringIO()
    with CommandProgress("replayed", 3, stream=stream, terminal=terminal, enabled=False) as progress:
        progress.update(3)
    assert stream.getvalue() == ""


def _dead_letters(server: StandaloneProcess) -> tuple[str, str]:
    """A topic whose subscription `billing` has DEAD_LETTERS letters waiting in its dead-letter topic."""
    topic = unique_topic("replayed")
    with Client(server.service_url) as client, client.create_producer(
            dead_letter_topic(topic, "billing"), batching_enabled=False) as producer:
        for i in range(DEAD_LETTERS):
            producer.send(b"letter %d" % i)
    return topic, "billing"


def _replay(server: StandaloneProcess, topic: str, *options: str) -> list[str]:
    return [str(VENV_BIN / "herald"), "admin", "--url", server.service_url, *options, "dlq", "replay", topic,
            "-s", "billing"]


def test_a_replay_piped_prints_plain_progress_lines(shared_standalone: StandaloneProcess) -> None:
    topic, _ = _dead_letters(shared_standalone)
    result = subprocess.run(_replay(shared_standalone, topic), capture_output=True, text=True, env=service_env(),
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[-1] == f"replayed {DEAD_LETTERS}/{DEAD_LETTERS}"
    assert "\x1b[" not in result.stderr  # no terminal codes in a log
    assert result.stdout.startswith(f"replayed {DEAD_LETTERS} messages from ")

    again, _ = _dead_letters(shared_standalone)
    quiet = subprocess.run(_replay(shared_standalone, again, "--json"), capture_output=True, text=True,
                           env=service_env(), timeout=120)
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert json.loads(quiet.stdout)["replayed"] == DEAD_LETTERS


def test_a_replay_on_a_terminal_draws_a_progress_bar(shared_standalone: StandaloneProcess) -> None:
    topic, _ = _dead_letters(shared_standalone)
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(_replay(shared_standalone, topic), stdout=subprocess.PIPE, stderr=terminal,
                                   env=service_env())
        os.close(terminal)
        shown = b""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the child closed its end: everything was read
                break
            if not chunk:
                break
            shown += chunk
        assert process.wait(timeout=120) == 0
        assert process.stdout is not None
        assert process.stdout.read().decode().startswith(f"replayed {DEAD_LETTERS} messages")
        process.stdout.close()
    finally:
        os.close(controller)
    text = shown.decode(errors="replace")
    assert "replayed" in text and f"{DEAD_LETTERS}/{DEAD_LETTERS}" in text and "━" in text, text
