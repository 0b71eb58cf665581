"""The fault history of one nemesis run: every fault injected, when, on what, and how it went.
A failing run prints it with its seed, so that the run can be replayed and read."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Outcomes of one fault step.
DONE = "done"
UNSUPPORTED = "unsupported"  # the cluster lacks what the fault needs: recorded, never pretended
FAILED = "failed"


@dataclass(frozen=True)
class FaultRecord:
    at: float  # seconds since the run began
    kind: str
    target: str
    phase: str  # "begin" (the fault), "end" (its heal, restart or resume), "final-heal"
    outcome: str
    detail: str = ""


@dataclass
class FaultHistory:
    seed: int
    started: float = field(default_factory=time.monotonic)
    records: list[FaultRecord] = field(default_factory=list)

    def record(self, kind: str, target: str, phase: str, outcome: str, detail: str = "") -> None:
        self.records.append(FaultRecord(round(time.monotonic() - self.started, 3), kind, target, phase, outcome,
                                        detail))

    def injected_by_kind(self) -> Counter[str]:
        """Faults that really began, per kind (unsupported and failed ones are not counted)."""
        return Counter(r.kind for r in self.records if r.phase == "begin" and r.outcome == DONE)

    def unsupported_by_kind(self) -> Counter[str]:
        return Counter(r.kind for r in self.records if r.phase == "begin" and r.outcome == UNSUPPORTED)

    def render(self) -> str:
        lines = [f"fault history of seed {self.seed}:"]
        lines += [f"  {r.at:8.2f}s {r.phase:10} {r.kind:11} {r.target:22} {r.outcome}"
                  + (f" ({r.detail})" if r.detail else "") for r in self.records]
        return "\n".join(lines)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"seed": self.seed, "records": [asdict(r) for r in self.records]}, indent=1))
