"""controller.evidence, per workload: weights, regimes (table-driven), workload statistics, the evidence record
and its bounded Markdown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.evidence import (EvidenceRecord, KernelDigest, WorkloadStat, assign_regime, build_evidence,
                                 largest_gaps, load_regime_rules, load_workload_weights, regime_table, representatives,
                                 sig, validate_weights, weight_for, workload_stats)
from harness.profiling import NO_PERMISSION, KernelProfile, ProfileSummary

from evidence_support import summary_of
from support import DEFINITIONS


# ---------------------------------------------------------------------------------------------
# Weights


def test_shipped_weights_file_is_neutral():
    w = load_workload_weights(DEFINITIONS)
    assert w == {"default": 1.0, "by_label": {}, "by_definition": {}}
    assert load_workload_weights(Path("/nonexistent")) == w and load_workload_weights(None) == w


def test_weight_lookup_order():
    w = validate_weights({"default": 0.5, "by_label": {"uniform_b1_kv512": 2, "u-2": 7},
                          "by_definition": {"d1": {"uniform_b1_kv512": 3, "u-9": 4}}})
    assert weight_for(w, "d1", "u-1", "uniform_b1_kv512") == 3.0
    assert weight_for(w, "d2", "u-1", "uniform_b1_kv512") == 2.0
    assert weight_for(w, "d1", "u-9", "other") == 4.0
    assert weight_for(w, "d2", "u-2", "other") == 7.0
    assert weight_for(w, "d2", "u-3", "other") == 0.5
    assert weight_for(None, "d", "u", "l") == 1.0


@pytest.mark.parametrize("data, words", [
    ({"default": -1}, "default must be a number >= 0"), ({"weights": {}}, "unknown keys"),
    ({"by_label": {"x": "heavy"}}, "by_label.x"), ({"by_definition": {"d": [1]}}, "by_definition.d"),
    ([1, 2], "expected a mapping"), ({"by_label": {"x": True}}, "by_label.x"),
])
def test_bad_weights_are_rejected(data, words):
    with pytest.raises(ValueError, match=words):
        validate_weights(data)


# ---------------------------------------------------------------------------------------------
# Regimes (table-driven)


@pytest.mark.parametrize("label, batch, fraction, ratio, regime", [
    ("uniform_b1_kv512", 1, 0.2, 1.0, "small-batch latency-bound"),
    ("uniform_b16_kv8192", 16, 0.59, 1.0, "small-batch latency-bound"),
    ("uniform_b16_kv8192", 16, 0.6, 1.0, "small-batch"),
    ("uniform_b1_kv512", 1, None, None, "small-batch"),
    ("uniform_b64_kv512", 64, 0.3, 1.0, "large-batch bandwidth-bound"),
    ("uniform_b256_kv8192", 256, 0.97, 1.0, "large-batch bandwidth-bound"),
    ("skewed_b64", 64, 0.5, None, "skewed"),
    ("one_long_32k_31x256", 32, 0.15, None, "skewed"),
    ("mystery", 64, 0.5, 4.5, "skewed"),
    ("mystery", 64, 0.5, 4.0, "large-batch bandwidth-bound"),
    ("mystery", None, 0.5, None, "other"),
])
def test_default_regime_rules(label, batch, fraction, ratio, regime):
    w = WorkloadStat(uuid="u", label=label, axes={} if batch is None else {"batch_size": batch},
                     fraction_of_floor=fraction, length_ratio=ratio)
    assert assign_regime(w, load_regime_rules()) == regime


def test_regime_rules_are_data():
    rules = load_regime_rules("- name: huge\n  all: {axis_above: {num_kv_indices: 1000000}}\n- name: rest\n")
    big = WorkloadStat(uuid="a", label="x", axes={"num_kv_indices": 2097152})
    assert assign_regime(big, rules) == "huge"
    assert assign_regime(WorkloadStat(uuid="b", label="y", axes={"num_kv_indices": 10}), rules) == "rest"
    assert assign_regime(big, [dict(r) for r in rules]) == "huge"


@pytest.mark.parametrize("text, words", [
    ("- all: {}\n", "needs a `name`"),
    ("- name: a\n  all: {}\n  any: {}\n", "one of `all` / `any`"),
    ("- name: a\n  all: {batch_above: 3}\n", "unknown conditions"),
    ("- name: a\n  all: [1]\n", "must be a mapping"),
    ("[]", "non-empty list"),
])
def test_bad_regime_rules(text, words):
    with pytest.raises(ValueError, match=words):
        load_regime_rules(text)


# ---------------------------------------------------------------------------------------------
# Workload statistics

# The 14 shipped workload shapes (labels as in definitions/workloads/gqa_paged/labels.json).
SHAPES = [("uniform_b1_kv512", 1, 512), ("uniform_b1_kv2048", 1, 2048), ("uniform_b1_kv8192", 1, 8192),
          ("uniform_b16_kv512", 16, 8192), ("uniform_b16_kv2048", 16, 32768), ("uniform_b16_kv8192", 16, 131072),
          ("uniform_b64_kv512", 64, 32768), ("uniform_b64_kv2048", 64, 131072), ("uniform_b64_kv8192", 64, 524288),
          ("uniform_b256_kv512", 256, 131072), ("uniform_b256_kv2048", 256, 524288),
          ("uniform_b256_kv8192", 256, 2097152), ("skewed_b64", 64, 159346), ("one_long_32k_31x256", 32, 40704)]
FLOOR_PER_TOKEN_MS = 4096 / 4.4e12 * 1e3  # kv8, d128, bf16: 4 KiB of K and V per token at 4.4 TB/s


def fourteen_results(timed: bool = True) -> tuple[list[dict], dict]:
    results, axes = [], {}
    for i, (label, batch, tokens) in enumerate(SHAPES):
        uuid = f"00000000-0000-4000-8000-{i:012d}"
        axes[uuid] = {"batch_size": batch, "num_kv_indices": tokens, "page_size": 1}
        floor = 0.002 + tokens * FLOOR_PER_TOKEN_MS
        fraction = {1: 0.15, 16: 0.5}.get(batch, 0.45 if "skewed" in label or "one_long" in label else 0.8)
        latency = floor / fraction
        results.append({"workload_uuid": uuid, "workload_label": label, "status": "PASSED",
                        "latency_ms": latency if timed else None,
                        "extra": {"floor_ms": floor if timed else None,
                                  "fraction_of_floor": fraction if timed else None,
                                  "kernel_latency_ms": latency if timed else None,
                                  "speedup_vs_flashinfer_kernel": (1.1 if batch > 16 else 0.7) if timed else None}})
    return results, axes


def test_workload_stats_shares_fractions_gaps_and_regimes():
    results, axes = fourteen_results()
    stats = workload_stats(results, axes, definition="d")
    assert len(stats) == 14 and sum(w.share for w in stats) == pytest.approx(1.0)
    by = {w.label: w for w in stats}
    assert by["uniform_b1_kv512"].regime == "small-batch latency-bound"
    assert by["uniform_b256_kv8192"].regime == "large-batch bandwidth-bound"
    assert by["skewed_b64"].regime == "skewed" and by["one_long_32k_31x256"].regime == "skewed"
    big = by["uniform_b256_kv8192"]
    assert big.gap_ms == pytest.approx(big.latency_ms - big.floor_ms) and big.speedup_vs_fi == 1.1
    assert big.share == max(w.share for w in stats)
    assert big.axes == {"batch_size": 256, "num_kv_indices": 2097152, "page_size": 1}


def test_weights_change_the_shares():
    results, axes = fourteen_results()
    plain = {w.label: w.share for w in workload_stats(results, axes, definition="d")}
    weights = validate_weights({"by_label": {"uniform_b1_kv512": 1000}})
    weighted = {w.label: w for w in workload_stats(results, axes, definition="d", weights=weights)}
    assert weighted["uniform_b1_kv512"].weight == 1000
    assert weighted["uniform_b1_kv512"].share > 10 * plain["uniform_b1_kv512"]
    assert sum(w.share for w in weighted.values()) == pytest.approx(1.0)
    table = {r.name: r for r in regime_table(list(weighted.values()))}
    plain_table = {r.name: r for r in regime_table(workload_stats(results, axes, definition="d"))}
    assert table["small-batch latency-bound"].share > plain_table["small-batch latency-bound"].share


def test_stats_accept_workload_results_and_derive_the_fraction():
    from harness.pipeline.evaluate import WorkloadResult

    r = WorkloadResult("u1", "uniform_b1_kv512", "PASSED", latency_ms=0.02, kernel_latency_ms=0.01, floor_ms=0.004,
                       speedup_vs_fi_kernel=1.3)
    [w] = workload_stats([r], {"u1": {"batch_size": 1}})
    assert w.latency_ms == 0.01 and w.fraction_of_floor == pytest.approx(0.4) and w.speedup_vs_fi == 1.3
    assert w.gap_ms == pytest.approx(0.006) and w.regime == "small-batch latency-bound" and w.share == 1.0


def test_lengths_make_a_batch_skewed():
    stats = workload_stats([{"workload_uuid": "u", "workload_label": "mystery"}], {"u": {"batch_size": 32}},
                           lengths={"u": [32768] + [256] * 31})
    assert stats[0].length_ratio == pytest.approx(32768 / ((32768 + 31 * 256) / 32)) and stats[0].regime == "skewed"


def test_regime_table_and_representatives():
    results, axes = fourteen_results()
    stats = workload_stats(results, axes, definition="d")
    rows = regime_table(stats)
    assert [r.name for r in rows][0] == "large-batch bandwidth-bound"  # largest share first
    assert sum(r.share for r in rows) == pytest.approx(1.0)
    small = next(r for r in rows if r.name == "small-batch latency-bound")
    assert len(small.workloads) == 6 and small.mean_fraction_of_floor == pytest.approx((3 * 0.15 + 3 * 0.5) / 6)
    assert small.mean_speedup_vs_fi == pytest.approx(0.7)
    reps = representatives(stats)
    by_uuid = {w.uuid: w for w in stats}
    assert by_uuid[reps["large-batch bandwidth-bound"]].label == "uniform_b256_kv8192"  # most time above floor
    assert by_uuid[reps["small-batch latency-bound"]].label == "uniform_b16_kv8192"
    # without timing: the middle workload by size, one per regime
    untimed = workload_stats(*fourteen_results(timed=False), definition="d")
    reps = {k: next(w.label for w in untimed if w.uuid == v) for k, v in representatives(untimed).items()}
    assert reps == {"small-batch": "uniform_b1_kv8192", "large-batch bandwidth-bound": "uniform_b256_kv512",
                    "skewed": "one_long_32k_31x256"}


def test_largest_gaps():
    results, axes = fourteen_results()
    stats = workload_stats(results, axes, definition="d")
    gaps = largest_gaps(stats)
    assert [g.label for g in gaps] == ["uniform_b256_kv8192", "skewed_b64", "uniform_b16_kv8192"]
    total = sum(w.gap_ms for w in stats)
    top = next(w for w in stats if w.label == "uniform_b256_kv8192")
    assert gaps[0].share == pytest.approx(top.gap_ms / total)
    assert gaps[0].gap_us == sig(top.gap_ms * 1e3)
    assert largest_gaps(workload_stats(*fourteen_results(timed=False))) == []


# ---------------------------------------------------------------------------------------------
# The evidence record


def _profiles_for(stats) -> list[ProfileSummary]:
    reps = representatives(stats)
    files = {"large-batch bandwidth-bound": "synthetic_flashinfer_tensor_cores_sm90.csv",
             "small-batch latency-bound": "synthetic_flashinfer_cuda_cores_sm90.csv",
             "skewed": "synthetic_triton_example_sm90.csv"}
    return [summary_of(files[regime], uuid) for regime, uuid in reps.items()]


def test_evidence_markdown_under_4kb_for_14_workloads_and_several_kernels():
    results, axes = fourteen_results()
    stats = workload_stats(results, axes, definition="gqa_paged_decode_h32_kv8_d128_ps1")
    summaries = _profiles_for(stats)
    # make one regime hold several kernels with long templated names
    extra = summary_of("synthetic_flashinfer_cuda_cores_sm90.csv", summaries[0].workload_uuid)
    for i, k in enumerate(extra.kernels * 3):
        summaries[0].kernels.append(KernelProfile(100 + i, k.name.replace("Kernel<", f"Kernel{i}<"), dict(k.metrics),
                                                  cc="9.0"))
    e = build_evidence("gqa_paged_decode_h32_kv8_d128_ps1", "triton_gqa_decode", stats, summaries,
                       hardware="NVIDIA H200", notes=["profiled with ncu 2025.3.1"])
    md = e.to_markdown()
    assert len(md.encode()) <= 4096, len(md.encode())
    assert "| regime | workloads | share of time | mean % of floor | mean speedup vs FlashInfer |" in md
    for name in ("large-batch bandwidth-bound", "small-batch latency-bound", "skewed"):
        assert f"| {name} |" in md and f"**{name}** on " in md
    assert "## Largest gaps (latency - floor)" in md
    assert "1. uniform_b256_kv8192 (large-batch bandwidth-bound):" in md and "\n3. " in md
    assert "SOL mem 93.1% / compute 38.5%" in md and "limiter shared-memory-occupancy" in md
    assert "latency-bound, limiter grid-too-small" in md and "stalls long_scoreboard 2.34" in md
    assert "occ 25.3%/31.2% (registers, 5 blocks/SM)" in md and "91 regs" in md and "no spills" in md
    assert e.kind == "profile" and "(5 shorter kernels not shown)" in md


def test_markdown_sheds_detail_before_structure():
    results, axes = fourteen_results()
    stats = workload_stats(results, axes, definition="d")
    for i, w in enumerate(stats):
        w.regime = f"regime {i % 5}"
    summaries = []
    for w in stats[:5]:
        s = summary_of("synthetic_flashinfer_cuda_cores_sm90.csv", w.uuid)
        s.kernels = [KernelProfile(i, k.name.replace("Kernel<", f"Kernel{i}<"), dict(k.metrics), cc="9.0")
                     for i, k in enumerate(s.kernels * 4)]
        summaries.append(s)
    e = build_evidence("d", "s", stats, summaries)
    full = e._render(kernels=3, labels=4, name=60, detail=0, reason=160)
    md = e.to_markdown()
    assert len(full.encode()) > 4096 >= len(md.encode())
    assert "[evidence truncated]" not in md and md.count("\n- `") == 5  # one kernel per regime kept
    assert all(f"**regime {i}** on " in md for i in range(5)) and "## Largest gaps" in md


def test_evidence_json_round_trip():
    results, axes = fourteen_results()
    stats = workload_stats(results, axes, definition="d")
    e = build_evidence("d", "s", stats, _profiles_for(stats), hardware="NVIDIA H200")
    data = json.loads(json.dumps(e.to_json()))
    back = EvidenceRecord.from_json(data)
    assert back.to_json() == e.to_json() and back.to_markdown() == e.to_markdown()
    assert isinstance(back.profiles[0].digests[0], KernelDigest)
    assert data["profiles"][0]["digests"][0]["units"]["duration_ns"] == "ns"


def test_latency_only_and_correctness_only_variants():
    results, axes = fourteen_results()
    stats = workload_stats(results, axes, definition="d")
    e = build_evidence("d", "s", stats, [])
    md = e.to_markdown()
    assert e.kind == "latency-only" and len(md.encode()) <= 4096
    assert "Not profiled: no ncu profile available" in md and "1. uniform_b256_kv8192" in md
    untimed = workload_stats(*fourteen_results(timed=False), definition="d")
    e2 = build_evidence("d", "s", untimed, [])
    md2 = e2.to_markdown()
    assert e2.kind == "correctness-only" and "gaps unknown" in md2 and "| small-batch | 6: " in md2
    assert "| n/a | n/a | n/a |" in md2


def test_unavailable_profiles_say_why():
    results, axes = fourteen_results()
    stats = workload_stats(results, axes, definition="d")
    denied = ProfileSummary(backend="ncu", status=NO_PERMISSION, workload_uuid=stats[0].uuid,
                            reason="ERR_NVGPUCTRPERM: the driver restricts GPU performance counters to administrators")
    md = build_evidence("d", "s", stats, [denied]).to_markdown()
    assert "not profiled (no_permission: ERR_NVGPUCTRPERM" in md


def test_markdown_is_bounded_even_when_nothing_can_be_shed():
    results, axes = fourteen_results()
    stats = workload_stats(results, axes, definition="d")
    for i, w in enumerate(stats):
        w.regime = f"regime number {i} with a long descriptive name " * 3
    e = build_evidence("d", "s", stats, [], notes=["x" * 5000] * 20)
    md = e.to_markdown(max_bytes=1024)
    assert len(md.encode()) <= 1024 and md.endswith("[evidence truncated]\n")
