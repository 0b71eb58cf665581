"""The `herald` command's core, as a user's shell runs it: exit statuses (0 ok, 1 the operation failed,
2 usage), --version, shell completion through argcomplete's own protocol, and contexts (the service
URL and credentials saved by name) with their precedence: flag > HERALD_* variable > context > default."""

from __future__ import annotations

import importlib.metadata
import json
import re
import socket
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import VENV_BIN, StandaloneProcess, free_port, service_env

# Variables a developer's shell may carry that would change what these commands resolve.
_CLIENT_VARIABLES = ("HERALD_SERVICE_URL", "HERALD_CONTEXT", "HERALD_AUTH_TOKEN_FILE", "HERALD_TLS_TRUST_CERTS_FILE",
                     "HERALD_TLS_CERT_FILE", "HERALD_TLS_KEY_FILE", "XDG_CONFIG_HOME")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment of a user with an empty configuration directory of their own."""
    made = {name: value for name, value in service_env().items() if name not in _CLIENT_VARIABLES}
    made["HERALD_CONFIG_DIR"] = str(tmp_path / "config")
    return made


def herald(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_BIN / "herald"), *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def unreachable_url() -> tuple[str, int]:
    port = free_port()  # nothing listens there: a call is refused at once
    return f"herald://127.0.0.1:{port}", port


# ---- exit statuses ----

def test_a_usage_error_exits_2_with_the_usage(env: dict[str, str]) -> None:
    result = herald("admin", "topics", "stats", env=env)  # the topic is missing
    assert result.returncode == 2, result
    assert "usage: herald admin topics stats" in result.stderr and "required: topic" in result.stderr


def test_an_unreachable_service_exits_1_with_one_clear_line(env: dict[str, str]) -> None:
    port = free_port()
    result = herald("admin", "--url", f"127.0.0.1:{port}", "--timeout", "10", "tenants", "list", env=env)
    assert result.returncode == 1, result
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: UNAVAILABLE:") and f"127.0.0.1:{port}" in line and "refused" in line, line


@pytest.fixture
def held_port() -> Iterator[int]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def test_a_service_that_cannot_start_exits_1(tmp_path: Path, env: dict[str, str], held_port: int) -> None:
    # An operation failure (the port is another process's), not a usage error: status 1, where
    # every HeraldError used to give 2.
    result = herald("standalone", "--data-dir", str(tmp_path / "data"), "--port", str(held_port),
                    "--broker-port", "0", "--storage-port", "0", "--proxy-port", "-1", "--metrics-port", "-1",
                    "--web-port", "-1", "--pulsar-port", "-1", "--no-dlq-worker", env=env, timeout=60)
    assert result.returncode == 1, result
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: cannot serve gRPC on 127.0.0.1:{held_port}")


def test_a_successful_command_exits_0(shared_standalone: StandaloneProcess, env: dict[str, str]) -> None:
    result = herald("admin", "--url", shared_standalone.service_url, "tenants", "list", env=env)
    assert result.returncode == 0, result
    assert "public" in result.stdout


def test_version_prints_the_installed_version(env: dict[str, str]) -> None:
    result = herald("--version", env=env)
    assert result.returncode == 0, result
    assert result.stdout == f"herald {importlib.metadata.version('herald')}\n"


# ---- shell completion ----

def complete(line: str, env: dict[str, str], tmp_path: Path) -> list[str]:
    """What the shell would offer after `line`: argcomplete's protocol, as its bash script drives it."""
    answer = tmp_path / "completions"
    answer.unlink(missing_ok=True)
    result = subprocess.run(
        [str(VENV_BIN / "herald")], capture_output=True, text=True, timeout=60,
        env={**env, "_ARGCOMPLETE": "1", "_ARGCOMPLETE_SHELL": "bash", "COMP_LINE": line,
             "COMP_POINT": str(len(line)), "COMP_TYPE": "9", "_ARGCOMPLETE_IFS": "\n",
             "_ARGCOMPLETE_STDOUT_FILENAME": str(answer)})
    assert result.returncode == 0, result
    return [word.strip() for word in answer.read_text().split("\n") if word.strip()]


def test_completion_offers_commands_and_subcommands(env: dict[str, str], tmp_path: Path) -> None:
    assert complete("herald ad", env, tmp_path) == ["admin"]
    offered = complete("herald admin topics ", env, tmp_path)
    assert "stats" in offered and "create" in offered
    assert "--version" in complete("herald --ver", env, tmp_path)
    assert set(complete("herald context s", env, tmp_path)) == {"show", "select"}


@pytest.mark.parametrize(("shell", "marker"), [
    ("bash", "complete -o nospace -o default -o bashdefault -F _python_argcomplete herald"),
    ("zsh", "#compdef herald"),
    ("fish", "complete --command herald"),
])
def test_completion_prints_each_shells_registration_script(env: dict[str, str], shell: str, marker: str) -> None:
    result = herald("completion", shell, env=env)
    assert result.returncode == 0, result
    assert marker in result.stdout


def test_completion_for_an_unknown_shell_is_a_usage_error(env: dict[str, str]) -> None:
    result = herald("completion", "tcsh", env=env)
    assert result.returncode == 2 and "invalid choice: 'tcsh'" in result.stderr


# ---- contexts ----

def test_contexts_are_added_listed_shown_selected_and_removed(tmp_path: Path, env: dict[str, str]) -> None:
    token = tmp_path / "dev.token"
    token.write_text("not-a-real-token\n")
    added = herald("context", "add", "dev", "--url", "herald://dev.example:6660", "--auth-token-file", str(token),
                   "--description", "the dev cluster", env=env)
    assert added.returncode == 0, added
    assert herald("context", "add", "prod", "--url", "herald+ssl://prod.example:6651", env=env).returncode == 0
    files = tmp_path / "config" / "context"
    for name in ("dev", "prod"):  # they may name credentials: the owner's only
        assert stat.S_IMODE((files / f"{name}.toml").stat().st_mode) == 0o600

    listed = herald("context", "list", env=env)
    assert listed.returncode == 0, listed
    assert [line.split()[0] for line in listed.stdout.splitlines()] == ["dev", "prod"]  # none selected yet
    assert herald("context", "select", "prod", env=env).returncode == 0
    assert (tmp_path / "config" / "context.txt").read_text().strip() == "prod"
    listed = herald("context", "list", env=env)
    assert re.search(r"^\* prod +herald\+ssl://prod.example:6651$", listed.stdout, re.M), listed.stdout
    assert re.search(r"^  dev +herald://dev.example:6660  the dev cluster$", listed.stdout, re.M), listed.stdout

    shown = herald("context", "show", "dev", env=env)
    assert shown.returncode == 0 and f"auth_token_file        {token}" in shown.stdout, shown
    shown = herald("context", "show", env=env)  # the selected one
    assert "url                    herald+ssl://prod.example:6651" in shown.stdout

    removed = herald("context", "remove", "prod", env=env)
    assert removed.returncode == 0, removed
    assert not (files / "prod.toml").exists() and not (tmp_path / "config" / "context.txt").exists()


def test_a_selected_context_is_used_without_flags(shared_standalone: StandaloneProcess, env: dict[str, str]) -> None:
    assert herald("context", "add", "local", "--url", shared_standalone.service_url, "--select",
                  env=env).returncode == 0
    listed = herald("admin", "tenants", "list", env=env)
    assert listed.returncode == 0, listed
    assert "public" in listed.stdout
    measured = herald("perf", "produce", "persistent://public/default/cli-core-context", "--count", "5",
                      "--report-interval", "1", env=env)
    assert measured.returncode == 0, measured


def test_the_url_comes_from_the_flag_then_the_variable_then_the_context(env: dict[str, str]) -> None:
    (context_url, context_port), (env_url, env_port), (flag_url, flag_port) = (unreachable_url() for _ in range(3))
    assert herald("context", "add", "c", "--url", context_url, "--select", env=env).returncode == 0

    def refused_port(*flags: str, **variables: str) -> int:
        result = herald("admin", *flags, "--timeout", "10", "tenants", "list", env={**env, **variables})
        assert result.returncode == 1, result
        found = re.search(r"127\.0\.0\.1:(\d+)", result.stderr)
        assert found is not None, result.stderr
        return int(found.group(1))

    assert refused_port("--url", flag_url, HERALD_SERVICE_URL=env_url) == flag_port
    assert refused_port(HERALD_SERVICE_URL=env_url) == env_port
    assert refused_port() == context_port


def test_credentials_come_from_the_flag_then_the_variable_then_the_context(
    tmp_path: Path, shared_standalone: StandaloneProcess, env: dict[str, str],
) -> None:
    # Missing token files: the error names the one the command chose.
    context_token, env_token, flag_token = (str(tmp_path / f"{where}.token") for where in ("context", "env", "flag"))
    assert herald("context", "add", "c", "--url", shared_standalone.service_url, "--auth-token-file", context_token,
                  "--select", env=env).returncode == 0

    def chosen(*flags: str, **variables: str) -> str:
        result = herald("admin", *flags, "tenants", "list", env={**env, **variables})
        assert result.returncode == 1, result
        found = re.search(r"token file '([^']+)' cannot be read", result.stderr)
        assert found is not None, result.stderr
        return found.group(1)

    assert chosen("--auth-token-file", flag_token, HERALD_AUTH_TOKEN_FILE=env_token) == flag_token
    assert chosen(HERALD_AUTH_TOKEN_FILE=env_token) == env_token
    assert chosen() == context_token


def test_the_context_flag_wins_over_the_variable_and_the_selection(env: dict[str, str]) -> None:
    urls = {name: unreachable_url() for name in ("selected", "variable", "flag")}
    for name, (url, _) in urls.items():
        assert herald("context", "add", name, "--url", url, env=env).returncode == 0
    assert herald("context", "select", "selected", env=env).returncode == 0

    def refused_port(*flags: str, **variables: str) -> int:
        result = herald(*flags, "admin", "--timeout", "10", "tenants", "list", env={**env, **variables})
        assert result.returncode == 1, result
        found = re.search(r"127\.0\.0\.1:(\d+)", result.stderr)
        assert found is not None, result.stderr
        return int(found.group(1))

    assert refused_port("--context", "flag", HERALD_CONTEXT="variable") == urls["flag"][1]
    assert refused_port(HERALD_CONTEXT="variable") == urls["variable"][1]
    assert refused_port() == urls["selected"][1]


def test_an_unknown_context_exits_1_naming_the_known_ones(env: dict[str, str]) -> None:
    for name in ("alpha", "beta"):
        assert herald("context", "add", name, "--url", "herald://127.0.0.1:1", env=env).returncode == 0
    for command in (["--context", "gamma", "admin", "tenants", "list"], ["context", "select", "gamma"],
                    ["context", "show", "gamma"], ["context", "remove", "gamma"]):
        result = herald(*command, env=env)
        assert result.returncode == 1, (command, result)
        (line,) = result.stderr.strip().splitlines()
        assert "context 'gamma' does not exist" in line and "known contexts: alpha, beta" in line, line
    result = herald("admin", "tenants", "list", env={**env, "HERALD_CONTEXT": "gamma"})
    assert result.returncode == 1 and "known contexts: alpha, beta" in result.stderr, result


@pytest.mark.parametrize(("text", "line", "reason"), [
    ('url = "herald://127.0.0.1:1"\n\nurl2 = "x"\n', 3, "unknown key 'url2'"),
    ('description = "d"\nurl = 6660\n', 2, "url must be a string, got int"),
    ('url = "herald://127.0.0.1:1"\nauth_token_file = \n', 2, "not valid TOML"),
])
def test_a_malformed_context_file_exits_1_naming_the_file_and_line(
    env: dict[str, str], text: str, line: int, reason: str,
) -> None:
    files = Path(env["HERALD_CONFIG_DIR"]) / "context"
    files.mkdir(parents=True)
    (files / "broken.toml").write_text(text)
    result = herald("--context", "broken", "admin", "tenants", "list", env=env)
    assert result.returncode == 1, result
    (shown,) = result.stderr.strip().splitlines()
    assert f"context file {files / 'broken.toml'}, line {line}: {reason}" in shown, shown
    listed = herald("context", "list", env=env)  # the others stay usable: list says which file is broken
    assert listed.returncode == 0 and "broken" in listed.stdout and "unreadable" in listed.stdout


def test_an_invalid_context_name_is_a_usage_error(env: dict[str, str]) -> None:
    result = herald("context", "add", "../escape", "--url", "herald://127.0.0.1:1", env=env)
    assert result.returncode == 2, result
    assert "context name '../escape' is invalid" in result.stderr
    assert not any(Path(env["HERALD_CONFIG_DIR"]).parent.glob("escape*"))


def test_contexts_default_to_the_xdg_config_directory(tmp_path: Path, env: dict[str, str]) -> None:
    env = {name: value for name, value in env.items() if name != "HERALD_CONFIG_DIR"}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    assert herald("context", "add", "x", "--url", "herald://127.0.0.1:1", env=env).returncode == 0
    assert (tmp_path / "xdg" / "herald" / "context" / "x.toml").exists()


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_deprecated_spelling_warns_in_the_chosen_log_format(env: dict[str, str], log_format: str) -> None:
    """With --log-format json every line a command logs is JSON, its deprecation warnings included
    (they are given while parsing, before the format is set, and held until it is)."""
    url, _ = unreachable_url()
    result = herald("--log-format", log_format, "produce", "t", "--service-url", url, "-m", "x", env=env)
    assert result.returncode == 1
    (warning,) = [line for line in result.stderr.splitlines() if "is deprecated" in line]
    if log_format == "text":
        assert warning == "herald: warning: --service-url is deprecated; use --url"
    else:
        record = json.loads(warning)
        assert record["level"] == "WARNING" and record["message"] == "--service-url is deprecated; use --url"
