"""The trajectory: the incumbent after each round, overall and per regime, archived and written out."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from controller.cli import main
from controller.loop import run_loop
from controller.promote import EvalRecord
from controller.providers.offline import OfflineProvider
from controller.skills import load_skills
from controller.trajectory import standing, trajectory_markdown
from harness.archive.database import Archive
from harness.data.dataset import Dataset

from support import ROOT
from loop_support import WORKLOAD, FakeEvaluator, config, constant, unseeded_skills


def rec(w, regime, latency, fi=None, floor=None, status="PASSED"):
    return EvalRecord(workload=w, status=status, latency_ms=latency, regime=regime, speedup_vs_fi=fi,
                      fraction_of_floor=floor, label=w)


@pytest.mark.parametrize("records, overall, regimes", [
    ([rec("a", "small", 1.0, 0.5, 0.1), rec("b", "small", 3.0, 1.5, 0.3), rec("c", "large", 2.0, 1.0, 0.9)],
     {"latency_ms": 2.0, "speedup_vs_fi": 1.0, "fraction_of_floor": pytest.approx(1.3 / 3)},
     {"small": {"latency_ms": 2.0, "speedup_vs_fi": 1.0, "fraction_of_floor": pytest.approx(0.2), "workloads": 2},
      "large": {"latency_ms": 2.0, "speedup_vs_fi": 1.0, "fraction_of_floor": 0.9, "workloads": 1}}),
    # a failed workload: no figure at all, never a mean over the survivors
    ([rec("a", "small", 1.0, 0.5, 0.1), rec("b", "large", None, status="INCORRECT_NUMERICAL")],
     {"latency_ms": None, "speedup_vs_fi": None, "fraction_of_floor": None},
     {"small": {"latency_ms": None, "speedup_vs_fi": None, "fraction_of_floor": None, "workloads": 1},
      "large": {"latency_ms": None, "speedup_vs_fi": None, "fraction_of_floor": None, "workloads": 1}}),
    # timed, but no FlashInfer baseline on one workload: latency known, speedup not
    ([rec("a", "", 1.0, None, 0.5), rec("b", "", 2.0, 1.0, 0.5)],
     {"latency_ms": 1.5, "speedup_vs_fi": None, "fraction_of_floor": 0.5},
     {"all": {"latency_ms": 1.5, "speedup_vs_fi": None, "fraction_of_floor": 0.5, "workloads": 2}}),
])
def test_standing(records, overall, regimes):
    s = standing(records)
    assert {k: s[k] for k in overall} == overall and s["workloads"] == len(records)
    assert {name: {k: g[k] for k in regimes.get(name, {})} for name, g in s["regimes"].items()} == regimes
    assert all(g["speedup_vs_reference"] is None for g in s["regimes"].values())  # none given: none made up


def test_markdown_has_a_row_per_round_and_a_column_per_regime():
    report = {"definition": "d", "provider": "offline", "run_id": "r", "rounds": [
        {"round": 0, "candidates": 1, "decision": "starting incumbent",
         "incumbent": {"name": "naive", "latency_ms": 1.0, "speedup_vs_fi": 0.5, "fraction_of_floor": 0.25,
                       "regimes": {"small": {"latency_ms": 1.0, "fraction_of_floor": 0.25}}}},
        {"round": 1, "candidates": 3, "decision": "promoted fast | x",
         "search": "small: population a, b; stalled: design switch",
         "incumbent": {"name": "fast", "latency_ms": 0.5, "speedup_vs_fi": 1.0, "fraction_of_floor": 0.5,
                       "regimes": {"small": {"latency_ms": 0.5, "fraction_of_floor": 0.5},
                                   "large": {"latency_ms": None, "fraction_of_floor": None}}}}]}
    lines = trajectory_markdown(report).splitlines()
    assert lines[2].startswith("Timing: official timer.")
    untimed = {**report,
               "rounds": [{**r, "incumbent": {**r["incumbent"], "latency_ms": None}} for r in report["rounds"]]}
    assert "timing unavailable" in trajectory_markdown(untimed).splitlines()[2]
    assert ("| round | incumbent | mean ms | vs FlashInfer | % of floor | small ms (% floor) | large ms (% floor) |"
            in lines[4])
    assert lines[6] == "| 0 | `naive` | 1 | 0.5x | 25% | 1 (25%) | - (-) | 1 | starting incumbent | - |"
    assert lines[7] == ("| 1 | `fast` | 0.5 | 1x | 50% | 0.5 (50%) | - (-) | 3 | promoted fast / x | "
                        "small: population a, b; stalled: design switch |")
    # A long decision (the H200 run's "its evaluation averaged ... more than the noise floor") is kept whole.
    reason = "its evaluation averaged 0.651 ms vs the incumbent's 0.6333 ms (+2.8%, more than the noise floor 1%)"
    long = {**report, "rounds": [*report["rounds"], {**report["rounds"][1], "round": 2, "decision": reason}]}
    assert f"| {reason} |" in trajectory_markdown(long).splitlines()[8]


def test_without_a_library_baseline_the_speedup_column_is_against_the_reference():
    """DSA on sm_90 has no FlashInfer figure: the column says what the speedup is against, never a row of dashes;
    one round with a FlashInfer figure keeps the FlashInfer column (the two are never mixed in one column)."""
    records = [EvalRecord(workload=w, status="PASSED", latency_ms=ms, label=w, speedup_vs_reference=x)
               for w, ms, x in (("a", 0.1, 30.0), ("b", 0.3, 10.0))]
    inc = {"name": "k", **standing(records)}
    assert inc["speedup_vs_reference"] == 20.0 and inc["speedup_vs_fi"] is None
    report = {"definition": "d", "rounds": [{"round": 0, "candidates": 1, "decision": "start", "incumbent": inc}]}
    lines = trajectory_markdown(report).splitlines()
    assert "| vs reference (no library baseline) |" in lines[4] and lines[6].startswith("| 0 | `k` | 0.2 | 20x |")
    with_fi = {"rounds": [*report["rounds"], {"round": 1, "incumbent": {**inc, "speedup_vs_fi": 0.9}}]}
    lines = trajectory_markdown(with_fi).splitlines()
    assert "| vs FlashInfer |" in lines[4] and lines[6].startswith("| 0 | `k` | 0.2 | - |")


def test_a_run_records_its_trajectory_and_the_cli_writes_it(tiny_dataset_root, tmp_path):
    archive = Archive(tmp_path / "a")
    # as in the loop tests: BLOCK_N >= 32 and 2 warps each take 20% off (1.0 -> 0.8 -> 0.64 ms)
    judge = lambda s: ("PASSED", 1.0 * (0.8 if constant(s, "BLOCK_N", 16) >= 32 else 1.0)  # noqa: E731
                       * (0.8 if constant(s, "NUM_WARPS", 1) == 2 else 1.0))
    fake = FakeEvaluator(archive, Dataset(tiny_dataset_root), [WORKLOAD], judge)
    report = run_loop(config(tiny_dataset_root, rounds=2, candidates=2), tmp_path / "a",
                      provider=OfflineProvider(unseeded_skills(tmp_path / "skills")), evaluator=fake)
    latencies = [r["incumbent"]["latency_ms"] for r in report["rounds"]]
    assert latencies == pytest.approx([1.0, 0.8, 0.64])
    assert [r["incumbent"]["fraction_of_floor"] for r in report["rounds"]] == pytest.approx([0.001, 0.00125, 0.0015625])
    assert all(set(r["incumbent"]["regimes"]) == {"latency-bound"} for r in report["rounds"])
    # the search's decisions are on record per round: round 2 explores the incumbent and the runner-up
    assert report["rounds"][0]["search"] == ""
    assert report["rounds"][2]["search"].startswith(
        "latency-bound: population per-kv-head_bn32_kv_load0_klmpps0_s1_w1_dot0, "
        "per-kv-head_bn16_kv_load0_klmpps0_s1_w2_dot0")

    out_dir = tmp_path / "traj"
    result = CliRunner().invoke(main, ["trajectory", "--archive", str(tmp_path / "a"), "--out", str(out_dir)])
    assert result.exit_code == 0, result.output
    assert "| 2 | `r2_per-kv-head_bn32_w2_s1_dot0_kv_load0_klmpps0` | 0.64 | 0.0312x | 0% |" in result.output
    data = json.loads((out_dir / "trajectory.json").read_text())
    assert data["run_id"] == report["run_id"] and len(data["rounds"]) == 3
    assert (out_dir / "trajectory.md").read_text() == result.output.split("wrote ")[0].rstrip("\n") + "\n"
    assert (out_dir / "trajectory.png").read_bytes()[:4] == b"\x89PNG"


def test_cli_trajectory_of_an_unknown_run_says_so(tmp_path):
    Archive(tmp_path / "a")
    result = CliRunner().invoke(main, ["trajectory", "nope", "--archive", str(tmp_path / "a")])
    assert result.exit_code == 2 and "no run 'nope'" in result.output


def test_cli_trajectory_all_runs_one_file_set_each(tiny_dataset_root, tmp_path):
    archive = Archive(tmp_path / "a")
    fake = FakeEvaluator(archive, Dataset(tiny_dataset_root), [WORKLOAD], lambda s: ("PASSED", 1.0))
    ids = [run_loop(config(tiny_dataset_root, rounds=1), tmp_path / "a",
                    provider=OfflineProvider(load_skills(ROOT / "skills")), evaluator=fake)["run_id"] for _ in range(2)]
    out_dir = tmp_path / "traj"
    result = CliRunner().invoke(main, ["trajectory", "--all", "--archive", str(tmp_path / "a"), "--out", str(out_dir)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out_dir.glob("*.md")) == sorted(
        f"trajectory-gqa_paged_decode_h32_kv8_d128_ps1-{i}.md" for i in ids)
    assert result.output.count("# Trajectory:") == 2


def test_a_round_cut_short_in_its_decision_still_shows_what_it_measured(tiny_dataset_root, tmp_path):
    """Killed during the promotion step (the paired measurement, minutes on a GPU): the round's screening and
    evaluations are on record, and the trajectory shows the round as cut short instead of leaving it out."""

    class KilledWhilePairing(FakeEvaluator):
        def measure_paired(self, *args, **kwargs):
            raise SystemExit(143)  # SIGTERM from an outer timeout (harness.sandbox.runner.exit_on_sigterm)

    archive = Archive(tmp_path / "a")
    fake = KilledWhilePairing(archive, Dataset(tiny_dataset_root), [WORKLOAD],
                              lambda s: ("PASSED", 0.9 if constant(s, "BLOCK_N", 16) >= 32 else 1.0))
    with pytest.raises(SystemExit):
        run_loop(config(tiny_dataset_root, rounds=1, candidates=2), tmp_path / "a",
                 provider=OfflineProvider(load_skills(ROOT / "skills")), evaluator=fake)
    result = CliRunner().invoke(main, ["trajectory", "--archive", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.startswith("| 1 |")]
    assert len(rows) == 1 and "cut short before its decision" in rows[0], result.output
    assert "| 2 | cut short" in rows[0]  # its two candidates, evaluated before the kill
