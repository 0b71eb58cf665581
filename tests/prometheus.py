"""A real Prometheus (Debian's `prometheus` package, which `make setup` installs) for the tests of the
dashboards and alerts: started on a free loopback port with a configuration in a temporary directory,
scraping given targets every second, queried through its HTTP API, stopped at the end."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from herald.local_cluster import free_port

PROMETHEUS = Path("/usr/bin/prometheus")
PROMTOOL = Path("/usr/bin/promtool")
START_DEADLINE = 30.0


def binary(path: Path) -> Path:
    """A missing binary fails the test (never skips it)."""
    if not path.is_file():
        pytest.fail(f"{path} is missing: install Debian's prometheus package (make setup does)", pytrace=False)
    return path


class QueryError(AssertionError):
    """Prometheus refused a query (bad PromQL) or answered something else than success."""


@dataclass(frozen=True)
class Prometheus:
    url: str

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as reply:
                answer = json.loads(reply.read())
        except urllib.error.HTTPError as error:  # 400 / 422: the query is wrong; the body says why
            answer = json.loads(error.read() or b"{}")
        if answer.get("status") != "success":
            raise QueryError(f"{path} {params}: {answer.get('errorType')}: {answer.get('error')}")
        return answer["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result (a vector's samples; a scalar as one sample)."""
        data = self.api("query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def series(self, match: str) -> list[dict[str, str]]:
        found: list[dict[str, str]] = self.api("series", **{"match[]": match})
        return found

    def wait_for(self, expr: str, what: str, deadline: float = START_DEADLINE) -> list[dict[str, Any]]:
        """Polls `expr` until it has a sample (a deadline, never a sleep-then-check)."""
        end = time.monotonic() + deadline
        while True:
            result = self.query(expr)
            if result:
                return result
            if time.monotonic() > end:
                raise AssertionError(f"Prometheus at {self.url} never had {what} ({expr})")
            time.sleep(0.2)


@contextmanager
def running_prometheus(directory: Path, targets: list[str], rule_files: tuple[Path, ...] = ()) -> Iterator[Prometheus]:
    """Prometheus scraping `targets` (host:port, /metrics) every second, evaluating `rule_files` every
    second, its data in `directory`; stopped (and waited for) on exit."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [{"job_name": "herald", "static_configs": [{"targets": targets}]}],
    }
    config_file = directory / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config))
    port = free_port()
    log = (directory / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [str(binary(PROMETHEUS)), f"--config.file={config_file}", f"--storage.tsdb.path={directory / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--web.enable-lifecycle"],
        stdout=log, stderr=subprocess.STDOUT)
    server = Prometheus(f"http://127.0.0.1:{port}")
    try:
        end = time.monotonic() + START_DEADLINE
        while True:
            if process.poll() is not None:
                raise AssertionError(f"prometheus exited ({process.returncode}): "
                                     f"{(directory / 'prometheus.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > end:
                raise AssertionError(f"prometheus never became ready on {server.url}")
            time.sleep(0.1)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
