"""benchmarks/loop_record.py: #19's goals checked on a promoted solution's rows (pure functions, table-driven)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from loop_record import goal_class, goals, rows_of  # noqa: E402


@pytest.mark.parametrize("label, expected", [
    ("uniform_b1_kv512", "batch 1"), ("uniform_b16_kv8192", "mid-size"), ("uniform_b64_kv512", "large"),
    ("uniform_b256_kv8192", "large"), ("skewed_b64", "skewed"), ("one_long_32k_31x256", "skewed"),
])
def test_goal_class(label, expected):
    assert goal_class(label) == expected


def row(label, ms, speedup, floor):
    return {"label": label, "class": goal_class(label), "ms": ms, "speedup": speedup, "fraction_of_floor": floor}


MET = [row("uniform_b1_kv512", 0.0068, 1.77, 0.07), row("uniform_b16_kv2048", 0.045, 1.13, 0.85),
       row("uniform_b256_kv8192", 1.99, 1.02, 1.01), row("skewed_b64", 0.173, 1.74, 0.89)]


@pytest.mark.parametrize("change, failed", [
    ({}, set()),
    ({2: {"speedup": 0.99}}, {">= 1x FlashInfer on every workload"}),
    ({0: {"ms": 0.0081}}, {"batch 1 <= 8 us"}),
    ({1: {"fraction_of_floor": 0.79}}, {"mid-size >= 80% of the floor"}),
    ({2: {"fraction_of_floor": 0.94}}, {"large >= 95% of the floor"}),
    ({3: {"fraction_of_floor": 0.5}}, {"skewed >= 80% of the floor"}),
    ({0: {"speedup": 0.5}, 1: {"speedup": 0.5}}, {">= 1x FlashInfer on every workload", "score >= 1.15x"}),
    # a workload without a figure meets nothing it is counted in, and the score is not computed
    ({0: {"ms": None, "speedup": None, "fraction_of_floor": None}},
     {">= 1x FlashInfer on every workload", "score >= 1.15x", "batch 1 <= 8 us"}),
])
def test_goals(change, failed):
    rows = [{**r, **change.get(i, {})} for i, r in enumerate(MET)]
    verdicts = {name: met for name, met, _ in goals(rows)}
    assert len(verdicts) == 6
    assert {name for name, met in verdicts.items() if not met} == failed


def test_a_missing_class_is_not_met():
    verdicts = {name: (met, why) for name, met, why in goals(MET[:1])}
    assert verdicts["large >= 95% of the floor"] == (False, "no such workload")


def test_rows_put_each_flashinfer_mode_beside_the_kernel_and_use_the_faster():
    result = {"workloads": [{"workload": "u1", "label": "uniform_b1_kv512", "status": "PASSED",
                             "kernel_latency_ms": 0.008, "floor_ms": 0.0005, "fraction_of_floor": 0.0625,
                             "audits": [{"name": "precision", "passed": False}]}]}
    baselines = [{"solution_name": "fi_tc", "workload_uuid": "u1", "kernel_ms": 0.012},
                 {"solution_name": "fi_plain", "workload_uuid": "u1", "kernel_ms": 0.010},
                 {"solution_name": "fi_plain", "workload_uuid": "other", "kernel_ms": 1.0}]
    modes, rows = rows_of(result, baselines)
    assert modes == ["fi_plain", "fi_tc"]
    assert rows[0]["flashinfer_ms"] == {"fi_plain": 0.010, "fi_tc": 0.012}
    assert rows[0]["speedup"] == pytest.approx(1.25)
    assert rows[0]["failed_audits"] == ["precision"]


@pytest.mark.parametrize("speedups, expected", [
    ([1.77, 1.13, 1.02, 1.74], []),
    ([1.77, 0.998, 0.997, 1.74], ["uniform_b256_kv8192", "uniform_b16_kv2048"]),  # slowest first
    ([1.77, None, 0.5, 1.0], ["uniform_b256_kv8192"]),  # no figure is no miss to profile; 1.0x is met
])
def test_misses_are_the_workloads_under_one_x_slowest_first(speedups, expected):
    from loop_record import misses

    assert misses([{**r, "speedup": s} for r, s in zip(MET, speedups)]) == expected


RUN18_DIGEST = (Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "2026-12-04_h200_run18"
                / "loop_gqa_paged_decode_h32_kv8_d128_ps64" / "ncu_digest.json")


def test_limiters_read_each_profiled_workloads_kernels_from_a_real_digest():
    import json

    from loop_record import limiters

    found = limiters(json.loads(RUN18_DIGEST.read_text()))
    assert sorted(found) == ["skewed_b64", "uniform_b16_kv2048", "uniform_b1_kv8192", "uniform_b256_kv512"]
    b16 = found["uniform_b16_kv2048"]  # the evidence's own line for the kernel, not a second formatter
    assert b16.startswith("`_chunk_then_merge_kernel` 42.5 us; SOL mem 67% / compute 22.8% (DRAM 67%)")
    assert "(registers, 3 blocks/SM); 168 regs" in b16 and "waves 0.97" in b16
    assert b16.endswith("memory-bound, limiter register-occupancy")
    assert found["uniform_b1_kv8192"].endswith("latency-bound, limiter grid-too-small")


def test_a_workload_ncu_could_not_profile_says_why():
    from loop_record import limiters

    digest = {"profiles": [{"workload_label": "uniform_b64_kv8192", "status": "timeout", "reason": "ncu ran 600 s"},
                           {"workload_label": "skewed_b64", "status": "ok", "digests": []}]}
    assert limiters(digest) == {"uniform_b64_kv8192": "not profiled: ncu ran 600 s",
                                "skewed_b64": "no kernel profiled"}


@pytest.mark.parametrize("change, expected", [
    ({}, {}),
    # under 1.0x first, slowest first; then the other goals' misses in table order
    ({2: {"speedup": 0.997}, 1: {"speedup": 0.998}},
     {"uniform_b256_kv8192": [">= 1x FlashInfer: 0.997x"], "uniform_b16_kv2048": [">= 1x FlashInfer: 0.998x"]}),
    ({0: {"ms": 0.0101}, 3: {"fraction_of_floor": 0.703}},
     {"uniform_b1_kv512": ["<= 8 us: 10.1 us (+2.1 us)"],
      "skewed_b64": [">= 80% of floor: 70.3% (9.7 points short)"]}),
    # one workload, several goals; the one under 1.0x leads even when later in the table
    ({2: {"speedup": 0.999, "fraction_of_floor": 0.9}, 0: {"ms": 0.009}},
     {"uniform_b256_kv8192": [">= 1x FlashInfer: 0.999x", ">= 95% of floor: 90.0% (5.0 points short)"],
      "uniform_b1_kv512": ["<= 8 us: 9.0 us (+1.0 us)"]}),
    # exactly on a goal is met; a workload without a figure has nothing to profile
    ({0: {"ms": 0.008, "speedup": 1.0}, 1: {"fraction_of_floor": 0.80, "speedup": None}, 2: {"ms": None}}, {}),
])
def test_goal_misses_say_which_goal_and_by_how_much(change, expected):
    from loop_record import goal_misses

    found = goal_misses([{**r, **change.get(i, {})} for i, r in enumerate(MET)])
    assert found == expected and list(found) == list(expected)


def test_the_record_lists_each_goal_miss_with_its_limiter_only_when_profiled():
    from loop_record import markdown

    report = {"definition": "d", "run_id": "r", "provider": "offline", "status": "DONE",
              "totals": {"wall_s": 700.0, "evaluated": 3, "candidates": 4},
              "incumbent": {"name": "x", "promoted": True}}
    result = {"status": "PASSED", "promotable": True}
    rows = [{**r, "status": "PASSED", "flashinfer_ms": {}, "floor_ms": None, "failed_audits": []} for r in MET]
    rows[2]["speedup"], rows[1]["speedup"], rows[3]["fraction_of_floor"] = 0.997, 0.998, 0.5
    text = markdown(report, result, [], rows, {"uniform_b256_kv8192": "`k` (memory-bound, limiter none)"},
                    [("skewed", "skewed_b64", "`k2` (latency-bound, limiter grid-too-small)")])
    table = text.split("with its ncu limiter")[1].split("ncu digest per regime")[0].splitlines()
    assert [line.split(" | ")[0] for line in table if line.startswith(("| uniform", "| skewed"))] \
        == ["| uniform_b256_kv8192", "| uniform_b16_kv2048", "| skewed_b64"]
    assert "| uniform_b256_kv8192 | large | >= 1x FlashInfer: 0.997x | 0.997x | 101.0% | `k` (memory-bound, " \
        "limiter none) |" in text
    assert "| uniform_b16_kv2048 | mid-size | >= 1x FlashInfer: 0.998x | 0.998x | 85.0% | not profiled |" in text
    # a miss that is its regime's profiled workload takes that digest's line
    assert "| skewed_b64 | skewed | >= 80% of floor: 50.0% (30.0 points short) | 1.740x | 50.0% | `k2` " in text
    assert "ncu limiter" not in markdown(report, result, [], rows)  # --profile off: nothing claimed


def test_record_profiles_every_goal_miss_after_the_regimes_one_each(tmp_path, monkeypatch):
    """The GPU steps stood in for: `harness submit` prints a result, `controller profile` prints the run-18 digest
    for the regimes and one profile per asked workload; the record asks for the regimes' digest, then for each
    workload that misses a goal and is not a regime's workload already, one call each, and writes every limiter."""
    import json
    import subprocess
    from types import SimpleNamespace

    import loop_record

    exported = tmp_path / "promoted.json"
    exported.write_text("{}")
    submit = {"submission_id": 7, "status": "PASSED", "promotable": True, "workloads": [
        {"workload": "u1", "label": "uniform_b16_kv2048", "status": "PASSED", "kernel_latency_ms": 0.05,
         "floor_ms": 0.031, "fraction_of_floor": 0.62, "audits": []},  # under 1.0x and 62%: a regime's workload
        {"workload": "u2", "label": "skewed_b64", "status": "PASSED", "kernel_latency_ms": 0.17,
         "floor_ms": 0.15, "fraction_of_floor": 0.88, "audits": []},  # meets everything
        {"workload": "u3", "label": "uniform_b1_kv512", "status": "PASSED", "kernel_latency_ms": 0.0095,
         "floor_ms": 0.0005, "fraction_of_floor": 0.05, "audits": []},  # 9.5 us at batch 1
        {"workload": "u4", "label": "uniform_b64_kv512", "status": "PASSED", "kernel_latency_ms": 0.04,
         "floor_ms": 0.031, "fraction_of_floor": 0.78, "audits": []}]}  # 78% of the floor
    baselines = [{"solution_name": "fi", "workload_uuid": u, "kernel_ms": ms}
                 for u, ms in [("u1", 0.049), ("u2", 0.3), ("u3", 0.012), ("u4", 0.05)]]
    calls = []

    def fake_run(args, out):
        calls.append(args)
        if args[1] != "profile":
            out.write_text("")
        elif "-w" not in args:
            out.write_text(RUN18_DIGEST.read_text())
        else:
            label = args[-1]
            out.write_text(json.dumps({"profiles": [{"workload_label": label, "status": "timeout",
                                                     "reason": f"stand-in for {label}"}]}))
        return 0

    monkeypatch.setattr(loop_record, "_run", fake_run)
    monkeypatch.setattr(loop_record.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, json.dumps(submit), ""))
    monkeypatch.setattr(loop_record.Archive, "open_existing", lambda path: SimpleNamespace(db=None))
    monkeypatch.setattr(loop_record, "latest_baseline_figures", lambda db, definition: baselines)
    report = {"definition": "d", "run_id": "r", "provider": "offline", "status": "DONE",
              "totals": {"wall_s": 700.0, "evaluated": 3, "candidates": 4},
              "incumbent": {"name": "x", "promoted": True, "exported": str(exported)}}
    loop_record.record(report, tmp_path / "archive", tmp_path / "out", True, [])
    profiles = [c for c in calls if c[1] == "profile"]
    assert "-w" not in profiles[0]  # the regimes' representatives first
    assert [c[-2:] for c in profiles[1:]] == [["-w", "uniform_b1_kv512"], ["-w", "uniform_b64_kv512"]]
    text = (tmp_path / "out" / "record.md").read_text()
    assert ("| uniform_b16_kv2048 | mid-size | >= 1x FlashInfer: 0.980x; >= 80% of floor: 62.0% (18.0 points short) | "
            "0.980x | 62.0% | `_chunk_then_merge_kernel` 42.5 us; SOL mem 67%") in text
    assert "| uniform_b1_kv512 | batch 1 | <= 8 us: 9.5 us (+1.5 us) | 1.263x | 5.0% | not profiled: stand-in " \
        "for uniform_b1_kv512 |" in text
    assert "| uniform_b64_kv512 | large | >= 95% of floor: 78.0% (17.0 points short) |" in text
    assert "| skewed_b64 | skewed |" not in text.split("ncu digest per regime")[0].split("ncu limiter")[1]
    merged = json.loads((tmp_path / "out" / "ncu_misses.json").read_text())
    assert [p["workload_label"] for p in merged["profiles"]] == ["uniform_b1_kv512", "uniform_b64_kv512"]
    assert not (tmp_path / "out" / "ncu_miss.json").exists()
    per_regime = text.split("ncu digest per regime")[1]  # every regime's representative, with its regime
    assert "| small-batch latency-bound | uniform_b1_kv8192 | " in per_regime
    assert per_regime.count("\n| ") == 1 + 4  # the header and the four profiled regimes


def test_regime_digests_name_each_regime_with_its_workload_and_digest():
    import json

    from loop_record import regime_digests

    found = regime_digests(json.loads(RUN18_DIGEST.read_text()))
    assert sorted(label for _, label, _ in found) == \
        ["skewed_b64", "uniform_b16_kv2048", "uniform_b1_kv8192", "uniform_b256_kv512"]
    regimes = {label: regime for regime, label, _ in found}
    assert all(regimes.values()), regimes  # a real digest names each profile's regime
    assert regimes["skewed_b64"] == "skewed"
    line = {label: text for _, label, text in found}["uniform_b16_kv2048"]
    assert line.startswith("`_chunk_then_merge_kernel` 42.5 us")


def test_a_profile_cut_short_keeps_the_table_and_goals(tmp_path, monkeypatch):
    """ncu is the slow step: a caller's time limit that kills the record during it still leaves record.md with the
    submission's table and the goals (run 20 switched profiling off for want of this)."""
    import json
    import subprocess
    from types import SimpleNamespace

    import loop_record

    exported = tmp_path / "promoted.json"
    exported.write_text("{}")
    submit = {"submission_id": 7, "status": "PASSED", "promotable": True, "workloads": [
        {"workload": "u1", "label": "uniform_b16_kv2048", "status": "PASSED", "kernel_latency_ms": 0.05,
         "floor_ms": 0.031, "fraction_of_floor": 0.62, "audits": []}]}

    class Killed(BaseException):  # what the caller's timeout does to the record mid-profile
        pass

    monkeypatch.setattr(loop_record.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, json.dumps(submit), ""))
    monkeypatch.setattr(loop_record.Archive, "open_existing", lambda path: SimpleNamespace(db=None))
    monkeypatch.setattr(loop_record, "latest_baseline_figures",
                        lambda db, definition: [{"solution_name": "fi", "workload_uuid": "u1", "kernel_ms": 0.049}])
    report = {"definition": "d", "run_id": "r", "provider": "offline", "status": "DONE",
              "totals": {"wall_s": 170.0, "evaluated": 9, "candidates": 9},
              "incumbent": {"name": "x", "promoted": True, "exported": str(exported)}}
    # the trajectory step runs first through _run too: let it through, kill the first profile
    calls = []

    def trajectory_then_killed(args, out):
        calls.append(args[1])
        if args[1] == "profile":
            raise Killed
        out.write_text("")
        return 0

    monkeypatch.setattr(loop_record, "_run", trajectory_then_killed)
    with pytest.raises(Killed):
        loop_record.record(report, tmp_path / "archive", tmp_path / "out", True, [])
    assert calls == ["trajectory", "profile"]
    text = (tmp_path / "out" / "record.md").read_text()
    assert "| uniform_b16_kv2048 | mid-size | PASSED | 50 |" in text
    assert "| >= 1x FlashInfer on every workload | no | missed: uniform_b16_kv2048 0.980x |" in text
