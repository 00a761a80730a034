"""The loop with a profiler: ncu evidence (and a diagnosis the offline provider acts on) when the fake profiler
replays an ncu CSV fixture; latency evidence, with the reason, when it is unavailable, lacks counter permission,
fails or raises; each promoted incumbent profiled once; archived profiles reused; the Markdown under 4 KB."""

from __future__ import annotations

import json
from typing import Optional

from click.testing import CliRunner

from controller.cli import main
from controller.loop import run_loop
from controller.providers.offline import OfflineProvider
from harness.data.generation_request import render_prompt
from controller.skills import load_skills
from controller.store import Store
from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.profiling import (NO_PERMISSION, OK, TIMEOUT, ProfileSummary, archived_profiles, finish_summary,
                               parse_ncu_csv)

from support import KV8_PS1, ROOT
from loop_support import SKILLS_DIR, WORKLOAD, FakeEvaluator, config

FIXTURES = ROOT / "tests" / "fixtures" / "ncu"
GRID_TOO_SMALL = "synthetic_flashinfer_cuda_cores_sm90.csv"  # latency-bound split-KV + merge, waves 0.19


class FakeProfiler:
    """The loop's IncumbentProfiler port: replays an ncu CSV for each workload, or fails as told."""

    arch = "sm_90"

    def __init__(self, fixture: str = GRID_TOO_SMALL, available=(True, "fake ncu 2025.3.1"), status: str = OK,
                 reason: str = "", raises: Optional[Exception] = None):
        self.fixture, self._available, self.status, self.reason = fixture, available, status, reason
        self.raises = raises
        self.calls: list[tuple[str, list[str]]] = []

    def available(self):
        return self._available

    def profile(self, solution, workload_uuids):
        self.calls.append((solution.name, list(workload_uuids)))
        if self.raises is not None:
            raise self.raises
        out = []
        for uuid in workload_uuids:
            s = ProfileSummary(backend="fake", status=self.status, reason=self.reason, workload_uuid=uuid,
                               solution_hash=solution.content_hash)
            if self.status == OK:
                s.raw_csv = (FIXTURES / self.fixture).read_text()
                s = finish_summary(s, parse_ncu_csv)
            out.append(s)
        return out


def timed(latency_of_naive: float = 0.1, latency_of_others: float = 0.1):
    return lambda s: ("PASSED", latency_of_naive if s is None or s.name.startswith("naive") else latency_of_others)


def run(root, tmp_path, profiler, judge=None, **kw):
    archive = Archive(tmp_path / "a")
    fake = FakeEvaluator(archive, Dataset(root), [WORKLOAD], judge or timed())
    report = run_loop(config(root, **{"candidates": 2, **kw}), tmp_path / "a",
                      provider=OfflineProvider(load_skills(SKILLS_DIR)), evaluator=fake, profiler=profiler)
    return report, Store(archive)


def test_ncu_evidence_reaches_the_request_and_steers_the_offline_provider(tiny_dataset_root, tmp_path):
    profiler = FakeProfiler()
    report, store = run(tiny_dataset_root, tmp_path, profiler)
    _, req = store.request(report["run_id"], "r1/explore")
    ev = req.evidence
    assert (ev.kind, ev.source) == ("profile", "ncu") and "on 1 workload(s)" in ev.note
    assert len(ev.markdown.encode()) < 4096
    for words in ("# Evidence: naive_per-kv-head", "## Kernels (ncu", "BatchDecodeWithPagedKVCacheKernel",
                  "latency-bound, limiter grid-too-small", "## Largest gaps"):
        assert words in ev.markdown, ev.markdown
    assert ev.markdown in render_prompt(req)
    # the plan: the regime's limiter, the skills' tactic, and the check that must follow
    assert req.regime == "latency-bound" and req.diagnosis.limiter == "grid-too-small"
    assert req.diagnosis.tactics == ["split-kv"] and "launch__waves_per_multiprocessor" in req.diagnosis.verify
    assert "split-KV" in req.hypothesis and "hopper-tactics: split-kv" in req.hypothesis
    plan = store.round(report["run_id"], 1)["plan"]
    assert json.loads(plan)["diagnosis"]["limiter"] == "grid-too-small"
    # the offline provider's first candidate is the tactic: switch to split-KV (the fused plan)
    first = store.candidates(report["run_id"], 1)[0]
    assert first["origin"]["template"] == "triton-split-kv-fused"  # split-KV, chunks sized to fill the SMs
    assert "ncu limiter grid-too-small" in first["origin"]["notes"]
    # profiled once (one workload, one regime) and archived as `harness profile` archives it
    uuid = Dataset(tiny_dataset_root).workloads_for(KV8_PS1, [WORKLOAD])[0].uuid
    assert profiler.calls == [(req.incumbent.name, [uuid])]
    rows = archived_profiles(store.archive, solution_hash=store.candidates(report["run_id"], 0)[0]["solution_hash"])
    assert len(rows) == 1 and rows[0]["status"] == OK and rows[0]["digest"]["digests"][0]["limiter"] == "grid-too-small"
    assert rows[0]["submission_id"] == store.candidates(report["run_id"], 0)[0]["submission_id"]


def _latency_request(tiny_dataset_root, tmp_path, profiler, **kw):
    report, store = run(tiny_dataset_root, tmp_path, profiler, **kw)
    assert report["status"] == "DONE"  # a profile failure never stops the loop
    _, req = store.request(report["run_id"], "r1/explore")
    assert (req.evidence.kind, req.evidence.source, req.diagnosis) == ("latency-only", "latency", None)
    assert "No ncu profile: " + req.evidence.note in req.evidence.markdown
    assert len(req.evidence.markdown.encode()) < 4096
    return req, store, report


def test_unavailable_profiler_gives_latency_evidence_and_says_why(tiny_dataset_root, tmp_path):
    profiler = FakeProfiler(available=(False, "ncu not found on PATH"))
    req, _, _ = _latency_request(tiny_dataset_root, tmp_path, profiler)
    assert req.evidence.note == "no profiler here: ncu not found on PATH" and profiler.calls == []


def test_counter_permission_error_falls_back_and_is_not_asked_again(tiny_dataset_root, tmp_path):
    profiler = FakeProfiler(status=NO_PERMISSION, reason="==ERROR== ERR_NVGPUCTRPERM - no access to counters")
    # candidates faster than the naive incumbent: round 1 promotes, round 2 has a new incumbent
    req, store, report = _latency_request(tiny_dataset_root, tmp_path, profiler, judge=timed(0.1, 0.05), rounds=2)
    assert "ncu profile failed: tiny_b2_t40: no_permission (==ERROR== ERR_NVGPUCTRPERM" in req.evidence.note
    assert report["incumbent"]["promoted"]
    _, req2 = store.request(report["run_id"], "r2/explore")
    assert req2.evidence.source == "latency" and "ERR_NVGPUCTRPERM" in req2.evidence.note
    assert len(profiler.calls) == 1  # the new incumbent is not profiled: counters stay restricted
    assert archived_profiles(store.archive)[0]["status"] == NO_PERMISSION  # the failure is archived too


def test_a_failed_or_raising_profile_costs_the_digest_not_the_run(tiny_dataset_root, tmp_path):
    req, _, _ = _latency_request(tiny_dataset_root, tmp_path / "t", FakeProfiler(status=TIMEOUT, reason="no result"))
    assert req.evidence.note == "ncu profile failed: tiny_b2_t40: timeout (no result)"
    req, _, _ = _latency_request(tiny_dataset_root, tmp_path / "r", FakeProfiler(raises=RuntimeError("boom")))
    assert req.evidence.note == "profiling failed: RuntimeError: boom"


def test_profiling_switched_off(tiny_dataset_root, tmp_path):
    profiler = FakeProfiler()
    req, _, _ = _latency_request(tiny_dataset_root, tmp_path, profiler, profile=False)
    assert req.evidence.note == "profiling switched off (--no-profile)" and profiler.calls == []


def test_each_new_incumbent_is_profiled_once_and_archived_profiles_are_reused(tiny_dataset_root, tmp_path):
    profiler = FakeProfiler()
    report, store = run(tiny_dataset_root, tmp_path, profiler, judge=timed(0.1, 0.05), rounds=2)
    promoted = report["incumbent"]["name"]
    assert report["incumbent"]["promoted"] and [c[0] for c in profiler.calls] == [
        store.candidates(report["run_id"], 0)[0]["solution_name"], promoted]
    _, req2 = store.request(report["run_id"], "r2/explore")
    assert req2.evidence.source == "ncu" and req2.incumbent.name == promoted and promoted in req2.evidence.markdown
    # a second run from the same naive incumbent reads its profile back from the archive
    again = FakeProfiler()
    report2, store2 = run(tiny_dataset_root, tmp_path, again, rounds=1)
    _, req = store2.request(report2["run_id"], "r1/explore")
    assert again.calls == [] and req.evidence.source == "ncu" and "1 reused from the archive" in req.evidence.note
    assert req.diagnosis.limiter == "grid-too-small"


def test_cli_no_profile_is_stored_with_the_run(tiny_dataset_root, tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    archive = tmp_path / "archive"
    archive.mkdir()
    result = CliRunner().invoke(main, ["loop", "--definition", KV8_PS1, "--rounds", "0", "--archive", str(archive),
                                       "--dataset", str(tiny_dataset_root), "--workloads", WORKLOAD, "--no-profile",
                                       "--profile-timeout-s", "30", "--json"])
    assert result.exit_code == 0, result.output
    run_id = json.loads(result.output[result.output.index("{"):])["run_id"]
    stored = Store(Archive(archive)).run(run_id)["config"]
    assert stored["profile"] is False and stored["profile_timeout_s"] == 30
