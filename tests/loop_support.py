"""What the loop tests share: the tiny workload, a loop configuration on it, and ``FakeEvaluator``, which writes
harness-shaped rows without running anything (promotion and halving with timings chosen by the test)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Optional

from controller.loop import LoopConfig
from controller.promote import PairedMeasurement
from controller.skills import load_skills
from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.data.schema import Solution, dump_json

from support import KV8_PS1, ROOT

WORKLOAD = "tiny_b2_t40"
SKILLS_DIR = ROOT / "skills"


def config(root, **kw) -> LoopConfig:
    return LoopConfig(**{"definition": KV8_PS1, "dataset": str(root), "workloads": [WORKLOAD], "rounds": 1,
                         "candidates": 1, "timeout_s": 120, **kw})


def unseeded_skills(folder: Path):
    """The shipped skills with gqa-decode's `dispatch: seed` off, as a skill author who sets `seed: false` has them:
    round 1 from the naive kernel is its neighbours only (the tests of promotion build their timings on those)."""
    shutil.copytree(SKILLS_DIR, folder)
    skill = folder / "gqa-decode" / "SKILL.md"
    text = skill.read_text()
    assert "seed: true}" in text
    skill.write_text(text.replace("seed: true}", "seed: false}"))
    return load_skills(folder)


CLEAN_AUDITS = [{"name": "input_mutation", "passed": True}]


class FakeEvaluator:
    """Writes harness-shaped rows (a submission, one evaluation per workload) without running anything.
    ``judge(solution) -> (status, latency_ms or None)``; with latencies, paired measurements are made of them.
    ``full_judge(solution) -> (status, audits)``: what an evaluation at the full audit level finds (default: what
    ``judge`` says, audits clean)."""

    def __init__(self, archive: Archive, dataset: Dataset, workloads: list[str],
                 judge: Callable[[Solution], tuple[str, Optional[float]]],
                 full_judge: Optional[Callable[[Solution], tuple[str, list]]] = None, card: Optional[str] = None):
        self.archive, self.judge, self.full_judge = archive, judge, full_judge
        # the GPU every submission names in its environment (None: none, as on a CPU)
        self.environment = archive.put_environment({"uuid": card, "device_name": "NVIDIA H200"}) if card else None
        self.workloads = dataset.workloads_for(KV8_PS1, workloads)
        self.calls: list[str] = []
        self.full_calls: list[str] = []
        self.paired: list[tuple[str, str]] = []
        self.timing_runs = 0

    def _submit(self, solution: Solution, level: str, verdict, on_start=None) -> int:
        """Archive a submission around ``verdict() -> (status, latency, audits)``, judged while the submission is
        open, so its archived wall is the judging's (as a real evaluation's is)."""
        self.archive.put_solution(dump_json(solution), solution.content_hash)
        sid = self.archive.start_submission(solution.content_hash, solution.name, solution.definition,
                                            solution.author, {"audit_level": level}, self.environment)
        if on_start is not None:
            on_start(sid)
        status, latency, audits = verdict()
        for w in self.workloads:
            self.archive.add_evaluation({
                "submission_id": sid, "definition": solution.definition, "workload_uuid": w.uuid,
                "workload_label": WORKLOAD, "status": status, "latency_ms": latency,
                "message": "" if status == "PASSED" else "trial 0: wrong", "log_blob": None,
                "extra": {"audits": audits, "fraction_of_floor":
                          None if latency is None else 0.001 / latency, "speedup_vs_flashinfer_kernel":
                          None if latency is None else 0.02 / latency}})
        self.archive.finish_submission(sid, status)
        return sid

    def evaluate(self, solution: Solution, on_start) -> int:
        self.calls.append(solution.name)
        return self._submit(solution, "fast", lambda: (*self.judge(solution), CLEAN_AUDITS), on_start)

    def evaluate_full(self, solution: Solution) -> int:
        self.full_calls.append(solution.name)

        def verdict():
            status, latency = self.judge(solution)
            status, audits = self.full_judge(solution) if self.full_judge else (status, CLEAN_AUDITS)
            return status, latency, audits
        return self._submit(solution, "full", verdict)

    def why_no_timing(self) -> Optional[str]:
        return None if self.judge(None)[1] is not None else "fake evaluator: no timing"

    def measure_paired(self, incumbent, candidate, repeats, order="ABBA", figure="official", stop_below=None,
                       workloads=None) -> Optional[PairedMeasurement]:
        """The judge's latencies as every timing run's, on ``workloads`` (None: all), through the harness
        evaluator's own repeat loop (its futility stop included); ``timing_runs`` counts them."""
        from controller.evaluator import paired_runs

        self.paired.append((incumbent.name, candidate.name))
        a, b = self.judge(incumbent)[1], self.judge(candidate)[1]
        if a is None or b is None:
            return None

        def timing_run(role):
            self.timing_runs += 1
            return {w.uuid: a if role == "A" else b for w in self.workloads
                    if workloads is None or w.uuid in workloads}, None

        return paired_runs(timing_run, repeats, order, stop_below)

    def close(self) -> None:
        pass


def constant(solution: Optional[Solution], name: str, default: int) -> int:
    """A module constant of a rendered template (BLOCK_N = 16), or ``default``."""
    if solution is None or f"{name} = " not in solution.sources[0].content:
        return default
    return int(solution.sources[0].content.split(f"{name} = ")[1].split()[0])
