"""`herald perf produce | consume | end-to-end` against a real standalone, through both protocols,
as a user (or a script reading --json) runs it: exact counts, rates, percentile order, a paced run,
partitions, usage errors, a refused connection and Ctrl-C. No timing assertions: figures are only
checked for consistency with each other."""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from herald.client import AsyncClient
from herald.client.admin import AdminClient
from herald.local_cluster import free_port

from tests.conftest import ROOT, VENV_BIN, StandaloneProcess, service_env
from tests.helpers import unique_topic

PERCENTILES = ("p50", "p95", "p99", "p99_9", "max")


def perf(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_BIN / "herald"), "perf", *args], capture_output=True, text=True,
                          env=service_env(), timeout=timeout)


def urls(server: StandaloneProcess) -> list[str]:
    return ["--url", server.service_url, "--pulsar-url", server.pulsar_url]


def json_lines(result: subprocess.CompletedProcess[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(interval lines, summary) of a --json run that succeeded."""
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    summaries = [line for line in lines if line["type"] == "summary"]
    assert len(summaries) == 1 and lines[-1] is summaries[0], result.stdout
    return [line for line in lines if line["type"] == "interval"], summaries[0]


def check_stream(stream: dict[str, Any], messages: int, size: int) -> None:
    assert stream["messages"] == messages
    assert stream["bytes"] == messages * size
    assert stream["msg_per_s"] > 0 and stream["mb_per_s"] > 0
    latency = [stream["latency_ms"][name] for name in PERCENTILES]
    assert latency == sorted(latency) and latency[0] >= 0, latency


@pytest.mark.parametrize("protocol", ["herald", "pulsar"])
def test_produce_then_consume_counts_every_message_and_orders_percentiles(
        protocol: str, shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("perf")
    produced = perf("produce", topic, *urls(shared_standalone), "--protocol", protocol, "--count", "3000",
                    "--size", "100", "--json")
    _, summary = json_lines(produced)
    assert summary["command"] == "produce" and summary["errors"] == 0 and summary["interrupted"] is False
    check_stream(summary["produce"], 3000, 100)

    consumed = perf("consume", topic, *urls(shared_standalone), "--protocol", protocol, "--count", "3000",
                    "--initial-position", "earliest", "--subscription", "perf-check", "--json")
    _, summary = json_lines(consumed)
    check_stream(summary["consume"], 3000, 100)


@pytest.mark.parametrize("protocol", ["herald", "pulsar"])
def test_consume_stops_at_exactly_its_count_when_more_are_waiting(
        protocol: str, shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("perf-more")
    json_lines(perf("produce", topic, *urls(shared_standalone), "--count", "1500", "--size", "10", "--json"))
    _, summary = json_lines(perf("consume", topic, *urls(shared_standalone), "--protocol", protocol, "--count", "700",
                                 "--initial-position", "earliest", "--subscription-type", "Shared",
                                 "--consumers-per-topic", "3", "--json"))
    check_stream(summary["consume"], 700, 10)


@pytest.mark.parametrize("protocol", ["herald", "pulsar"])
def test_end_to_end_measures_send_and_receive_of_every_message(
        protocol: str, shared_standalone: StandaloneProcess) -> None:
    _, summary = json_lines(perf("end-to-end", unique_topic("perf-e2e"), *urls(shared_standalone),
                                 "--protocol", protocol, "--count", "2000", "--size", "64", "--json"))
    assert summary["command"] == "end-to-end"
    check_stream(summary["send"], 2000, 64)
    check_stream(summary["end_to_end"], 2000, 64)


def test_a_paced_run_takes_as_long_as_its_rate_says_and_reports_each_interval(
        shared_standalone: StandaloneProcess) -> None:
    count, rate = 300, 500.0
    intervals, summary = json_lines(perf("produce", unique_topic("perf-rate"), *urls(shared_standalone),
                                         "--count", str(count), "--rate", str(rate), "--size", "10",
                                         "--report-interval", "0.2", "--json"))
    check_stream(summary["produce"], count, 10)
    # Message i is due at i / rate: the last one cannot go before (count - 1) / rate, so the rate
    # achieved is at most rate * count / (count - 1) (rounding aside). Only a lower bound on time.
    assert summary["duration_s"] >= (count - 1) / rate - 0.01
    assert summary["produce"]["msg_per_s"] <= rate * count / (count - 1) * 1.05
    assert intervals, "a 0.6 s run with 0.2 s intervals prints interval lines"
    assert sum(line["produce"]["messages"] for line in intervals) <= count
    assert all(line["warmup"] is False for line in intervals)


async def test_partitions_are_created_and_consumed_from_on_both_protocols(
        shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("perf-parts")
    _, summary = json_lines(perf("produce", topic, *urls(shared_standalone), "--partitions", "3", "--count", "900",
                                 "--keys", "7", "--size", "20", "--json"))
    check_stream(summary["produce"], 900, 20)
    async with AdminClient(shared_standalone.service_url) as admin:
        assert await admin.get_partitions(topic) == 3
    _, summary = json_lines(perf("produce", topic, *urls(shared_standalone), "--protocol", "pulsar",
                                 "--partitions", "3", "--count", "600", "--size", "20", "--json"))
    check_stream(summary["produce"], 600, 20)
    _, summary = json_lines(perf("consume", topic, *urls(shared_standalone), "--protocol", "pulsar", "--count",
                                 "1500", "--initial-position", "earliest", "--subscription-type", "Shared",
                                 "--consumers-per-topic", "2", "--json"))
    check_stream(summary["consume"], 1500, 20)
    _, summary = json_lines(perf("consume", topic, *urls(shared_standalone), "--count", "1500", "--subscription",
                                 "herald-side", "--initial-position", "earliest", "--json"))
    check_stream(summary["consume"], 1500, 20)


async def test_payload_file_lines_and_keys_are_sent_in_turn(shared_standalone: StandaloneProcess,
                                                           tmp_path: Path) -> None:
    topic = unique_topic("perf-file")
    payloads = tmp_path / "payloads.txt"
    payloads.write_text("alpha\nbeta\n\ngamma\n")
    async with AsyncClient(shared_standalone.service_url) as client:
        consumer = await client.subscribe(topic, "check")
        _, summary = json_lines(perf("produce", topic, *urls(shared_standalone), "--payload-file", str(payloads),
                                     "--keys", "2", "--count", "6", "--batching", "off", "--json"))
        assert summary["produce"]["messages"] == 6 and summary["produce"]["bytes"] == 2 * (5 + 4 + 5)
        received = [await consumer.receive(timeout=30) for _ in range(6)]
    assert [(m.data(), m.key) for m in received if m is not None] == [
        (b"alpha", "key-0"), (b"beta", "key-1"), (b"gamma", "key-0"),
        (b"alpha", "key-1"), (b"beta", "key-0"), (b"gamma", "key-1")]


def test_key_shared_is_accepted_with_pulsars_spelling_and_the_old_one_with_a_note(
        shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("perf-ks")
    json_lines(perf("produce", topic, *urls(shared_standalone), "--count", "50", "--keys", "5", "--json"))
    result = perf("consume", topic, *urls(shared_standalone), "--count", "50", "--initial-position", "earliest",
                  "--subscription-type", "KeyShared", "--json")
    _, summary = json_lines(result)
    assert summary["consume"]["messages"] == 50
    assert "KeyShared is deprecated: write Key_Shared" in result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["produce", "t", "--protocol", "kafka"], "invalid choice: 'kafka'"),
    (["produce", "t", "--compression", "snappy"], "--compression snappy is only available with --protocol pulsar"),
    (["produce", "t", "--rate", "-5"], "expected zero or a positive number"),
    (["produce", "t", "--max-pending", "0"], "--max-pending must be at least 1"),
    (["produce", "t", "--payload-file", "/nonexistent/payloads"], "cannot be read"),
    (["end-to-end", "t", "--size", "4"], "give --size 8 or more"),
    (["consume", "t", "--subscription-type", "Bogus"], "expected one of Exclusive, Shared, Failover, Key_Shared"),
    (["consume", "t", "--consumers-per-topic", "2"], "an Exclusive subscription takes one consumer per topic"),
    (["produce", "t", "--report-interval", "0"], "--report-interval must be a positive number of seconds"),
    (["produce", "t", "--size", "99999999999"], "--size must be between 0 and"),
    (["produce", "bad topic"], "'bad topic' is invalid"),
    (["produce"], "the following arguments are required: TOPIC"),
])
def test_bad_arguments_exit_2_with_the_reason(args: list[str], message: str) -> None:
    result = perf(*args, "--url", f"herald://127.0.0.1:{free_port()}")
    assert result.returncode == 2, result
    assert message in result.stderr


@pytest.mark.parametrize("protocol", ["herald", "pulsar"])
def test_a_refused_connection_fails_at_once_with_exit_1(protocol: str) -> None:
    port = free_port()  # nothing listens there
    result = perf("produce", "t", "--protocol", protocol, "--url", f"herald://127.0.0.1:{port}",
                  "--pulsar-url", f"pulsar://127.0.0.1:{port}", "--count", "10", timeout=60)
    assert result.returncode == 1, result
    # The probe's message, not the client's after its 30 s operation timeout.
    assert re.search(rf"cannot connect to (herald|pulsar)://127.0.0.1:{port}: .*refused", result.stderr), result.stderr


@pytest.mark.parametrize("protocol", ["herald", "pulsar"])
def test_ctrl_c_ends_an_open_ended_run_and_still_prints_the_summary(
        protocol: str, shared_standalone: StandaloneProcess) -> None:
    proc = subprocess.Popen(
        [str(VENV_BIN / "herald"), "perf", "produce", unique_topic("perf-int"), *urls(shared_standalone),
         "--protocol", protocol, "--rate", "2000", "--size", "10", "--report-interval", "0.2", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=service_env())
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # blocks until the first interval line: the run is under way
        assert json.loads(first)["type"] == "interval", first
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["type"] == "summary" and summary["interrupted"] is True and summary["errors"] == 0
    assert summary["produce"]["messages"] > 0


def test_warm_up_is_left_out_of_the_summary(shared_standalone: StandaloneProcess) -> None:
    intervals, summary = json_lines(perf("produce", unique_topic("perf-warm"), *urls(shared_standalone),
                                         "--rate", "1000", "--warmup", "1", "--duration", "0.5", "--size", "10",
                                         "--report-interval", "0.1", "--json"))
    produced = summary["produce"]["messages"]
    assert summary["warmup_messages"] > 0 and produced > 0
    assert summary["warmup_s"] == 1
    assert any(line["warmup"] for line in intervals)
    assert sum(line["produce"]["messages"] for line in intervals) <= produced + summary["warmup_messages"]


def docs_commands() -> list[str]:
    text = (ROOT / "docs" / "perf.md").read_text()
    blocks = re.findall(r"^```console\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
    return [line[2:] for block in blocks for line in block.splitlines()
            if line.startswith("$ herald perf") and ("--count" in line or "--duration" in line)]


def test_the_docs_have_runnable_examples() -> None:
    assert len(docs_commands()) >= 4


@pytest.mark.parametrize("command", docs_commands())
def test_docs_example_runs(command: str, shared_standalone: StandaloneProcess) -> None:
    args = shlex.split(command.replace("herald://localhost:6660", shared_standalone.service_url)
                       .replace("pulsar://localhost:6650", shared_standalone.pulsar_url))
    assert args[:2] == ["herald", "perf"]
    result = perf(*args[2:], *urls(shared_standalone))
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    assert "summary" in result.stdout


@pytest.mark.parametrize(("protocol", "reason"), [("herald", "is larger than the maximum message size"),
                                                  ("pulsar", "MessageTooBig")])
def test_failed_sends_end_the_run_with_exit_1_the_reason_and_the_summary(
        protocol: str, reason: str, shared_standalone: StandaloneProcess) -> None:
    result = perf("produce", unique_topic("perf-big"), *urls(shared_standalone), "--protocol", protocol,
                  "--size", str(6 * 1024 * 1024), "--json")  # no count: the failures alone end the run
    assert result.returncode == 1, result
    assert "error: send failed: " in result.stderr and reason in result.stderr, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["type"] == "summary" and summary["errors"] >= 1 and summary["produce"]["messages"] == 0
