"""`herald produce` and `herald consume` as a user types them (issue 22, items 3 and 4): messages
from stdin and files, keys, properties, event times, a rate; output formats, readers, positions,
times, topic patterns; and a refused connection that fails at once. Every command runs as a
subprocess against one shared standalone; each test uses its own topics."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

from herald.client import Client
from herald.client.admin import SyncAdminClient

from tests.conftest import VENV_BIN, StandaloneProcess


def herald(*args: str, env: dict[str, str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_BIN / "herald"), *args], capture_output=True, text=True, env=env, timeout=180,
                          input=stdin)


def url(server: StandaloneProcess) -> list[str]:
    return ["--url", server.service_url]


def json_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines()]


def consume_json(server: StandaloneProcess, env: dict[str, str], topic: str, count: int,
                 *extra: str) -> list[dict[str, object]]:
    done = herald("consume", topic, "--reader", "-n", str(count), "-o", "json", "--timeout", "20", *url(server),
                  *extra, env=env)
    assert done.returncode == 0, done.stderr
    return json_lines(done.stdout)


def refused_url() -> str:
    """A loopback address where nothing listens (bound then closed: the port is free)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"herald://127.0.0.1:{port}"


# ---- produce ----------------------------------------------------------------------------------

def test_produce_reads_one_message_per_line_of_stdin_with_key_properties_and_event_time(
        shared_standalone: StandaloneProcess, herald_env: dict[str, str]) -> None:
    done = herald("produce", "pc-stdin", "-f", "-", "-k", "k1", "-p", "a=1", "-p", "b=x=y",
                  "--event-time", "2026-11-27T00:00:00Z", "-q", *url(shared_standalone), env=herald_env,
                  stdin="one\ntwo\nthree\n")
    assert done.returncode == 0, done.stderr
    assert "3 message(s) produced" in done.stdout
    records = consume_json(shared_standalone, herald_env, "pc-stdin", 3)
    assert [r["value"] for r in records] == ["one", "two", "three"]
    assert {r["key"] for r in records} == {"k1"}
    assert records[0]["properties"] == {"a": "1", "b": "x=y"}
    assert records[0]["event_time"] == 1795737600000


def test_produce_sends_a_whole_file_or_splits_it_on_a_separator(
        shared_standalone: StandaloneProcess, herald_env: dict[str, str], tmp_path: Path) -> None:
    data = tmp_path / "input.txt"
    data.write_text("a;b\nc;d")
    whole = herald("produce", "pc-file", "-f", str(data), "--whole-file", *url(shared_standalone), env=herald_env)
    assert whole.returncode == 0, whole.stderr
    split = herald("produce", "pc-file", "-f", str(data), "--separator", ";", "--event-time", "1700000000000",
                   *url(shared_standalone), env=herald_env)
    assert split.returncode == 0, split.stderr
    records = consume_json(shared_standalone, herald_env, "pc-file", 4)
    assert [r["value"] for r in records] == ["a;b\nc;d", "a", "b\nc", "d"]
    assert records[1]["event_time"] == 1700000000000


def test_produce_repeats_each_message_option_count_times(
        shared_standalone: StandaloneProcess, herald_env: dict[str, str]) -> None:
    done = herald("produce", "pc-repeat", "-m", "a{i}", "-m", "b{i}", "-n", "2", *url(shared_standalone),
                  env=herald_env)
    assert done.returncode == 0, done.stderr
    assert len([line for line in done.stdout.splitlines() if line.startswith("sent ")]) == 4
    values = [r["value"] for r in consume_json(shared_standalone, herald_env, "pc-repeat", 4)]
    assert values == ["a0", "b1", "a2", "b3"]


def test_produce_at_a_rate_sends_every_message(shared_standalone: StandaloneProcess,
                                               herald_env: dict[str, str]) -> None:
    done = herald("produce", "pc-rate", "-m", "r{i}", "-n", "20", "-r", "40", "-q", *url(shared_standalone),
                  env=herald_env)
    assert done.returncode == 0, done.stderr
    assert "20 message(s) produced" in done.stdout
    print(done.stdout.strip())  # the elapsed time: about half a second at 40 per second


def test_produce_streams_stdin_larger_than_its_queue_in_bounded_memory(
        shared_standalone: StandaloneProcess, herald_env: dict[str, str]) -> None:
    """64 MiB through a pipe, 64k messages of 1 KiB (64 times the producer's queue of 1,000): the
    peak RSS of `herald produce` stays far below what holding the input would take."""
    lines, size = 65_536, 1023
    generator = f"import sys\nline = b'x' * {size} + b'\\n'\nfor _ in range({lines}): sys.stdout.buffer.write(line)"
    runner = (
        "import resource, subprocess, sys\n"
        f"gen = subprocess.Popen([sys.executable, '-c', {generator!r}], stdout=subprocess.PIPE)\n"
        "done = subprocess.run(sys.argv[1:], stdin=gen.stdout, capture_output=True, text=True)\n"
        "gen.stdout.close()\n"
        "gen.wait()\n"
        "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "print(done.stdout, done.stderr, file=sys.stderr)\n")
    baseline_runner = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    command = [str(VENV_BIN / "herald"), "produce", "pc-big", "-q", *url(shared_standalone)]
    baseline = subprocess.run([sys.executable, "-c", baseline_runner, *command, "-m", "x"], capture_output=True,
                              text=True, env=herald_env, timeout=120)
    streamed = subprocess.run([sys.executable, "-c", runner, *command, "-f", "-"], capture_output=True,
                              text=True, env=herald_env, timeout=120)
    status, peak_kib = (int(field) for field in streamed.stdout.split())
    assert status == 0, streamed.stderr
    assert f"{lines} message(s) produced" in streamed.stderr
    base_kib = int(baseline.stdout.split()[1])
    print(f"peak RSS: {peak_kib / 1024:.0f} MiB streaming 64 MiB, {base_kib / 1024:.0f} MiB sending one message")
    assert peak_kib < base_kib + 40 * 1024


# ---- consume ----------------------------------------------------------------------------------

def test_consume_prints_values_json_and_a_format_string(
        shared_standalone: StandaloneProcess, herald_env: dict[str, str]) -> None:
    topic = "persistent://public/default/pc-formats"
    assert herald("produce", topic, "-m", "v{i}", "-n", "2", "-k", "key", "-p", "h=1", *url(shared_standalone),
                  env=herald_env).returncode == 0
    with Client(shared_standalone.service_url) as client, client.create_producer(topic) as producer:
        producer.send(b"\xff\xfe")
    values = herald("consume", topic, "--reader", "-n", "3", "-o", "value", *url(shared_standalone), env=herald_env)
    assert values.returncode == 0, values.stderr
    assert values.stdout.splitlines()[:2] == ["v0", "v1"]
    records = consume_json(shared_standalone, herald_env, topic, 3)
    assert set(records[0]) == {"id", "topic", "key", "properties", "publish_time", "event_time",
                               "redelivery_count", "value", "value_encoding"}
    assert records[0]["key"] == "key" and records[0]["redelivery_count"] == 0 and records[0]["event_time"] is None
    assert records[2]["value_encoding"] == "base64" and base64.b64decode(str(records[2]["value"])) == b"\xff\xfe"
    formatted = herald("consume", topic, "--reader", "-n", "1", "-F", r"%t|%k|%s|%h|%p|%i|100%%\n",
                       *url(shared_standalone), env=herald_env)
    assert formatted.returncode == 0, formatted.stderr
    line = formatted.stdout.splitlines()[0]
    assert line.startswith(f"{topic}|key|v0|h=1|-1|") and line.endswith("|100%")
    assert line.split("|")[5] == records[0]["id"]


def test_an_unknown_format_directive_is_a_usage_error(shared_standalone: StandaloneProcess,
                                                     herald_env: dict[str, str]) -> None:
    done = herald("consume", "pc-bad-format", "--reader", "-F", "%z", *url(shared_standalone), env=herald_env)
    assert done.returncode == 2
    assert "unknown %z" in done.stderr


def test_reader_acknowledges_nothing_and_leaves_no_subscription(
        shared_standalone: StandaloneProcess, herald_env: dict[str, str]) -> None:
    topic = "persistent://public/default/pc-reader"
    assert herald("produce", topic, "-m", "m{i}", "-n", "3", *url(shared_standalone), env=herald_env).returncode == 0
    for _ in range(2):  # read twice: a reader moves nothing
        assert [r["value"] for r in consume_json(shared_standalone, herald_env, topic, 3)] == ["m0", "m1", "m2"]
    with SyncAdminClient(shared_standalone.service_url) as admin:
        assert admin.list_subscriptions(topic) == []


def test_consume_starts_at_a_position_or_a_time_and_moves_an_existing_subscription(
        shared_standalone: StandaloneProcess, herald_env: dict[str, str]) -> None:
    topic = "persistent://public/default/pc-positions"
    ids = []
    for number in range(3):  # one command each: each message its own entry, so an id names one message
        sent = herald("produce", topic, "-m", f"old{number}", *url(shared_standalone), env=herald_env)
        assert sent.returncode == 0, sent.stderr
        ids.append(sent.stdout.split()[1])
    # The subscription is made at the latest position: only what comes after it is received.
    latest = herald("consume", topic, "-s", "later", "--position", "latest", "-n", "1", "--timeout", "1",
                    *url(shared_standalone), env=herald_env)
    assert latest.returncode == 1 and "no message within" in latest.stderr
    middle = time.time_ns() // 1_000_000
    time.sleep(0.01)  # publish times are in milliseconds: the next message is published after `middle`
    assert herald("produce", topic, "-m", "new", *url(shared_standalone), env=herald_env).returncode == 0
    later = herald("consume", topic, "-s", "later", "-n", "1", "-o", "value", *url(shared_standalone), env=herald_env)
    assert later.stdout.splitlines() == ["new"], later.stderr
    # An existing subscription is moved by --position and --time (a seek).
    at_id = herald("consume", topic, "-s", "later", "--position", ":".join(ids[1].split(":")[:2]), "-n", "2",
                   "-o", "value", *url(shared_standalone), env=herald_env)
    assert at_id.stdout.splitlines() == ["old1", "old2"], at_id.stderr
    at_time = herald("consume", topic, "-s", "later", "--time", str(middle), "-n", "1", "-o", "value",
                     *url(shared_standalone), env=herald_env)
    assert at_time.stdout.splitlines() == ["new"], at_time.stderr
    reader_at_time = herald("consume", topic, "--reader", "--time", str(middle), "-n", "1", "-o", "value",
                            *url(shared_standalone), env=herald_env)
    assert reader_at_time.stdout.splitlines() == ["new"], reader_at_time.stderr


def test_consume_follows_a_regex_of_topics_with_a_key_shared_subscription(
        shared_standalone: StandaloneProcess, herald_env: dict[str, str]) -> None:
    for name in ("pc-pattern-a", "pc-pattern-b", "pc-other"):
        assert herald("produce", name, "-m", name, *url(shared_standalone), env=herald_env).returncode == 0
    done = herald("consume", "--topics-pattern", "persistent://public/default/pc-pattern-.*", "-s", "p",
                  "-t", "Key_Shared", "-n", "2", "-o", "value", *url(shared_standalone), env=herald_env)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == ["pc-pattern-a", "pc-pattern-b"]


def test_old_spellings_still_work_with_a_warning(shared_standalone: StandaloneProcess,
                                                 herald_env: dict[str, str]) -> None:
    produced = herald("produce", "pc-old", "-m", "x", "--num-messages", "2", "--service-url",
                      shared_standalone.service_url, env=herald_env)
    assert produced.returncode == 0, produced.stderr
    assert "--service-url is deprecated; use --url" in produced.stderr
    consumed = herald("consume", "pc-old", "-s", "s", "-t", "KeyShared", "--initial-position", "Earliest",
                      "--num-messages", "2", "--service-url", shared_standalone.service_url, env=herald_env)
    assert consumed.returncode == 0, consumed.stderr
    assert "KeyShared is deprecated; use Key_Shared" in consumed.stderr
    assert "--initial-position is deprecated" in consumed.stderr


def test_consume_needs_a_subscription_unless_it_reads(herald_env: dict[str, str]) -> None:
    done = herald("consume", "pc-none", "--url", refused_url(), env=herald_env)
    assert done.returncode == 2
    assert "-s/--subscription is required" in done.stderr


# ---- a refused connection fails at once -----------------------------------------------------------

def test_produce_and_consume_fail_at_once_when_nothing_listens(herald_env: dict[str, str]) -> None:
    address = refused_url()
    for command in (["produce", "t"], ["consume", "t", "-s", "s"], ["consume", "t", "--reader"]):
        started = time.perf_counter()
        done = herald(*command, "--url", address, env=herald_env)
        elapsed = time.perf_counter() - started
        print(f"herald {' '.join(command)} against {address}: exit {done.returncode} after {elapsed:.2f}s: "
              f"{done.stderr.strip()}")
        assert done.returncode == 1
        (line,) = done.stderr.splitlines()
        assert f"could not connect to {address.removeprefix('herald://')}: the connection failed" in line
        assert f"connection refused: nothing listens there for {address}" in line


def test_produce_from_a_missing_file_fails_before_connecting(herald_env: dict[str, str], tmp_path: Path) -> None:
    done = herald("produce", "t", "-f", str(tmp_path / "absent.txt"), "--url", refused_url(), env=herald_env)
    assert done.returncode == 1
    absent = tmp_path / "absent.txt"
    assert done.stderr.strip() == f"herald produce: error: cannot read {absent}: No such file or directory"


def test_consume_into_a_pipe_closed_early_ends_quietly(shared_standalone: StandaloneProcess,
                                                       herald_env: dict[str, str]) -> None:
    """2,000 lines of 200 bytes: far more than a pipe holds, so the writes after `head` exits fail."""
    topic = "pc-pipe"
    assert herald("produce", topic, "-m", "p{i}" + "x" * 200, "-n", "2000", "-q", *url(shared_standalone),
                  env=herald_env).returncode == 0
    pipeline = subprocess.run(
        f"set -o pipefail; {VENV_BIN / 'herald'} consume {topic} --reader -n 2000 -o value "
        f"--url {shared_standalone.service_url} | head -n 1",
        shell=True, executable="/bin/bash", capture_output=True, text=True, env=herald_env, timeout=120)
    assert pipeline.returncode == 0, pipeline.stderr
    assert pipeline.stdout == "p0" + "x" * 200 + "\n"
    assert "Traceback" not in pipeline.stderr
