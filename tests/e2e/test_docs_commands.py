"""The docs' commands run: every shell block (```bash, ```sh, ```shell, and the `$ ` lines of ```console)
of README.md and docs/*.md runs as written, as one `set -e` bash script, against a real `herald
standalone` started here. The blocks of one page share a temporary folder (a key made by one block is
used by the next; it holds links to the repository's files and `.venv` to the venv, as a checkout
after `make run` does), and run in order.

The documented addresses are replaced by the test's: herald://127.0.0.1:6660 (and localhost), the
proxy's 6662, the Pulsar port 6650, the web port 8080 and the metrics port 9180; HERALD_SERVICE_URL names the
standalone, for commands that rely on the default URL.

A fence may carry one tag:
- `{server}`: the block ends in a command that serves until stopped (`herald standalone`, `herald
  local-cluster`): it runs in the background (a standalone on free ports), the page's next blocks
  run against it once it printed "press Ctrl-C", and it gets SIGINT at the next `{server}` block or at
  the end of the page;
- `{interrupt}`: the block runs until Ctrl-C (`herald perf produce` without --duration): it gets
  SIGINT once it printed its first line, and must then exit 0;
- `{cluster}`: it needs what this machine does not have (Kubernetes, helm, docker, a registry, other
  hosts): not run, but counted and listed;
- `{setup}`: it sets this machine up (`make run`, `make test`: the test runs inside what they make):
  not run, counted and listed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT, VENV_BIN, StandaloneProcess, free_port, running_standalone, service_env

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A fence may be indented (inside a list item): its lines lose that indentation.
_FENCE = re.compile(r"^([ \t]*)```(bash|sh|shell|console)[ \t]*(\{[a-z]+\})?[ \t]*\n(.*?)^\1```",
                    re.DOTALL | re.MULTILINE)
NOT_RUN = {"{cluster}", "{setup}"}
TAGS = {"{server}", "{interrupt}", *NOT_RUN}
# The documented default ports, each replaced by the port of the server the block runs against.
PORTS = {"service": 6660, "proxy": 6662, "pulsar": 6650, "web": 8080, "metrics": 9180}
READY = "press Ctrl-C"


@dataclass
class Block:
    page: Path
    line: int
    tag: str
    script: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def commands(language: str, body: str) -> str:
    """The script of a block: a console block's `$ ` lines (and their `\\` continuations), others whole."""
    if language != "console":
        return body
    lines, continued = [], False
    for line in body.splitlines():
        if line.startswith("$ ") or continued:
            lines.append(line.removeprefix("$ "))
            continued = line.endswith("\\")
    return "\n".join(lines) + "\n"


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for match in _FENCE.finditer(text):
        indent = match.group(1)
        body = "".join(line.removeprefix(indent) for line in match.group(4).splitlines(keepends=True))
        found.append(Block(page, text.count("\n", 0, match.start()) + 1, match.group(3) or "",
                           commands(match.group(2), body)))
    return found


BLOCKS = {page: blocks(page) for page in PAGES}
RUN_PAGES = [page for page, found in BLOCKS.items() if any(block.tag not in NOT_RUN for block in found)]


def test_every_shell_block_is_run_or_tagged_as_not_runnable_here() -> None:
    every = [block for found in BLOCKS.values() for block in found]
    not_run = [f"{block.where} {block.tag}" for block in every if block.tag in NOT_RUN]
    print(f"{len(every)} shell blocks; {len(every) - len(not_run)} run; {len(not_run)} not run here:",
          *not_run, sep="\n  ")
    assert len(every) >= 30 and len(every) - len(not_run) >= 12
    # A block that needs Kubernetes, helm or docker cannot run here: it must say so in its fence.
    needs_cluster = re.compile(r"^\s*(kubectl|helm|docker|make (images|deploy))\b|--master k8s://", re.MULTILINE)
    untagged = [block.where for block in every if block.tag not in NOT_RUN and needs_cluster.search(block.script)]
    assert not untagged, f"blocks that need a cluster are not tagged {{cluster}}: {untagged}"
    # Only the tags this test knows: a typo would otherwise run (or skip) a block silently.
    fences = [(page, tag) for page in PAGES for tag in re.findall(r"^[ \t]*```(?:bash|sh|shell|console)(.*)$",
                                                                  page.read_text(), re.MULTILINE)]
    assert all(tag.strip() in {"", *TAGS} for _, tag in fences), fences


class Server:
    """The server a page's blocks run against: the test's standalone, or a `{server}` block's command."""

    def __init__(self, ports: dict[str, int], proc: subprocess.Popen[str] | None = None,
                 log: Path | None = None) -> None:
        self.ports, self.proc, self.log = ports, proc, log

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGINT)  # the whole group: bash and the command it runs
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


def substitute(script: str, ports: dict[str, int]) -> str:
    """The block's documented ports replaced by those of the server it runs against."""
    for name, documented in PORTS.items():
        script = re.sub(rf"(127\.0\.0\.1|localhost):{documented}\b", rf"127.0.0.1:{ports[name]}", script)
    return script


def serving(script: str) -> tuple[str, dict[str, int]]:
    """A `{server}` block's script with its standalone on free ports (never the defaults: others may
    hold them), and those ports."""
    ports = {name: free_port() for name in PORTS}
    flags = (f"--port {ports['service']} --pulsar-port {ports['pulsar']} --web-port {ports['web']} "
             f"--metrics-port {ports['metrics']} --broker-port {free_port()} --storage-port {free_port()} "
             f"--proxy-port {ports['proxy']}")
    return script.replace("herald standalone", f"herald standalone {flags}"), ports


def run_page(page: Path, standalone: StandaloneProcess, folder: Path) -> list[str]:
    """Run the page's blocks in order; the failures, each with its output."""
    # As in a checkout after `make run`: the repository's files (spark-jobs/, charts/...) and its .venv.
    for entry in ROOT.iterdir():
        if entry.name not in (".venv", ".git"):
            (folder / entry.name).symlink_to(entry)
    (folder / ".venv").symlink_to(VENV_BIN.parent)
    env = service_env()
    env["HERALD_SERVICE_URL"] = standalone.service_url
    # A home of its own: blocks save contexts and completion scripts there, never in the user's.
    home = folder / "home"
    (home / ".config").mkdir(parents=True)
    env["HOME"], env["XDG_CONFIG_HOME"] = str(home), str(home / ".config")
    for inherited in ("HERALD_CONFIG_DIR", "HERALD_CONTEXT"):
        env.pop(inherited, None)
    default = Server({"service": standalone.port, "proxy": standalone.proxy_port, "pulsar": standalone.pulsar_port,
                      "web": standalone.web_port, "metrics": standalone.metrics_port})
    server, failures = default, []
    try:
        for number, block in enumerate(BLOCKS[page]):
            if block.tag in NOT_RUN:
                continue
            if block.tag == "{server}":
                server.stop()
                script, ports = serving(block.script)
                log = folder / f"server-{number}.log"
                with open(log, "w") as out:
                    proc = subprocess.Popen(["bash", "-c", "set -e\n" + substitute(script, ports)], cwd=folder,
                                            env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
                                            start_new_session=True)
                server = Server(ports, proc, log)
                deadline = time.monotonic() + 120
                while READY not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.1)
                if READY not in log.read_text():
                    failures.append(f"{block.where} {{server}} did not start:\n{log.read_text()[-3000:]}")
                    break
                continue
            if block.tag == "{interrupt}":
                failures += interrupted(block, substitute(block.script, server.ports), folder, env)
                continue
            result = subprocess.run(["bash", "-c", "set -e\n" + substitute(block.script, server.ports)],
                                    cwd=folder, env=env, capture_output=True, text=True, timeout=300)
            if result.returncode != 0:
                failures.append(f"{block.where} exited {result.returncode}:\n{block.script}\n--- stdout\n"
                                f"{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}")
    finally:
        server.stop()
    return failures


def interrupted(block: Block, script: str, folder: Path, env: dict[str, str]) -> list[str]:
    """Run an `{interrupt}` block, press Ctrl-C once it printed a line; its failure, if it fails."""
    log = folder / f"interrupt-{block.line}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(["bash", "-c", "set -e\n" + script], cwd=folder, env=env, stdout=out,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while not log.read_text().strip() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    try:
        status = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        status = proc.wait(timeout=30)
    if status == 0:
        return []
    return [f"{block.where} {{interrupt}} exited {status}:\n{block.script}\n{log.read_text()[-3000:]}"]


@pytest.fixture(scope="module")
def docs_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """A standalone of this module's own: the pages create tenants and topics of documented names."""
    with running_standalone(tmp_path_factory.mktemp("docs-standalone") / "data") as server:
        yield server


@pytest.mark.timeout(900)  # a page's blocks run one after the other (spark.md starts Spark twice)
@pytest.mark.parametrize("page", RUN_PAGES, ids=[page.name for page in RUN_PAGES])
def test_the_shell_blocks_of_the_page_run_as_written(page: Path, docs_standalone: StandaloneProcess,
                                                      tmp_path: Path) -> None:
    failures = run_page(page, docs_standalone, tmp_path)
    assert not failures, "\n\n".join(failures)
