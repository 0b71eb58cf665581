"""`herald produce` and `herald consume` against a running standalone, as a user types them."""

from __future__ import annotations

import subprocess

from tests.conftest import VENV_BIN, StandaloneProcess


def herald(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_BIN / "herald"), *args], capture_output=True, text=True, env=env, timeout=120)


def test_produce_then_consume_from_the_command_line(standalone: StandaloneProcess, herald_env: dict[str, str]) -> None:
    url = ["--url", standalone.service_url]
    produced = herald("produce", "cli-topic", "-m", "hello {i}", "-n", "5", *url, env=herald_env)
    assert produced.returncode == 0, produced.stderr
    assert "5 message(s) produced" in produced.stdout
    consumed = herald("consume", "cli-topic", "-s", "cli-sub", "-n", "5", *url, env=herald_env)
    assert consumed.returncode == 0, consumed.stderr
    assert [line.split(": ", 1)[1] for line in consumed.stdout.splitlines()[:5]] == [f"hello {i}" for i in range(5)]


def test_invalid_topic_name_is_a_clear_cli_error(standalone: StandaloneProcess, herald_env: dict[str, str]) -> None:
    result = herald("produce", "bad topic", "--url", standalone.service_url, env=herald_env)
    assert result.returncode == 2
    assert "invalid" in result.stderr and "bad topic" in result.stderr


def test_consume_gives_up_after_its_timeout(standalone: StandaloneProcess, herald_env: dict[str, str]) -> None:
    result = herald("consume", "empty-topic", "-s", "s", "-n", "1", "--timeout", "1",
                    "--url", standalone.service_url, env=herald_env)
    assert result.returncode == 1
    assert "no message within 1.0s" in result.stderr


def test_help_lists_every_command(herald_env: dict[str, str]) -> None:
    result = herald("--help", env=herald_env)
    for command in ("standalone", "lookup", "broker", "storage", "produce", "consume"):
        assert command in result.stdout
