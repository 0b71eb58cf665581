"""`herald produce` and `herald consume` against a standalone with TLS, token authentication and
authorization (issue 22, item 4): the security flags carry the credentials through stdin produce
and reader consume; a role without permission, or no token, is refused with one line and exit
status 1 (the operation failed), not a traceback."""

from __future__ import annotations

import json
import subprocess

from tests.conftest import VENV_BIN, StandaloneProcess, service_env
from tests.security.conftest import ADMIN, Keys, Pki


def herald(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_BIN / "herald"), *args], capture_output=True, text=True, env=service_env(),
                          timeout=120, input=stdin)


def secure(server: StandaloneProcess, pki: Pki, token_file: str | None) -> list[str]:
    return ["--url", server.service_url, "--tls-trust-certs-file", str(pki.ca_cert),
            *(["--auth-token-file", token_file] if token_file else [])]


def test_stdin_produce_and_reader_consume_over_tls_with_a_token(
        secure_standalone: StandaloneProcess, pki: Pki, keys: Keys) -> None:
    flags = secure(secure_standalone, pki, str(keys.token_file(ADMIN)))
    produced = herald("produce", "cli-secure", "-f", "-", "-k", "k", *flags, stdin="a\nb\n")
    assert produced.returncode == 0, produced.stderr
    consumed = herald("consume", "cli-secure", "--reader", "-n", "2", "-o", "json", *flags)
    assert consumed.returncode == 0, consumed.stderr
    assert [(r["key"], r["value"]) for r in map(json.loads, consumed.stdout.splitlines())] == [("k", "a"), ("k", "b")]


def test_a_role_without_permission_or_no_token_is_refused_with_one_line_and_status_1(
        secure_standalone: StandaloneProcess, pki: Pki, keys: Keys) -> None:
    stranger = str(keys.token_file("stranger"))
    for command, token in ((["produce", "cli-secure-refused", "-m", "x"], stranger),
                           (["consume", "cli-secure-refused", "--reader", "-n", "1"], stranger),
                           (["consume", "cli-secure-refused", "-s", "s", "-n", "1"], None)):
        done = herald(*command, *secure(secure_standalone, pki, token))
        print(done.stderr.strip())
        assert done.returncode == 1, (command, done.stderr)
        (line,) = done.stderr.splitlines()
        assert line.startswith(f"herald {command[0]}: error: ")
        assert ("role 'stranger' may not" if token else "token") in line, line
