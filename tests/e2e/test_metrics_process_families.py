"""What docs/metrics.md says a live process's /metrics serves besides Herald's own families: the
standard process_* and python_* figures, each family once (a standalone's services share one endpoint),
and the page says so without contradicting itself."""

from __future__ import annotations

import urllib.request

from tests.conftest import ROOT, StandaloneProcess

PROCESS_FAMILIES = ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
                    "process_open_fds", "process_start_time_seconds", "python_gc_objects_collected_total",
                    "python_info")


def test_a_live_standalone_serves_the_process_and_python_families_once_each(
    shared_standalone: StandaloneProcess,
) -> None:
    with urllib.request.urlopen(shared_standalone.metrics_url, timeout=10) as reply:
        text = reply.read().decode()
    types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert {family: types.count(family) for family in PROCESS_FAMILIES} == dict.fromkeys(PROCESS_FAMILIES, 1)
    assert any(family.startswith("herald_broker_") for family in types)  # beside Herald's own


def test_the_metrics_page_says_the_process_families_are_served_and_never_that_they_are_not() -> None:
    page = (ROOT / "docs" / "metrics.md").read_text()
    assert "`process_*` (CPU seconds" in page and "`python_gc_*`" in page
    assert "no `process_*`" not in page and "Herald's metrics only" not in page
