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
