"""controller.evidence: kernel digests from ncu fixtures, classification and limiters, workload statistics,
regimes (table-driven), weights, the evidence record and its bounded Markdown."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from controller.evidence import (EvidenceRecord, KernelDigest, WorkloadStat, assign_regime, build_evidence, classify,
                                 digest_kernel, digest_summary, fmt_quantity, largest_gaps, load_regime_rules,
                                 load_workload_weights, metric_table, ncu_config, occupancy_limiter, regime_table,
                                 representatives, requested_metrics, short_kernel_name, sig, stall_metrics,
                                 table_arch, validate_weights, weight_for, workload_stats)
from harness.profiling import NO_PERMISSION, OK, KernelProfile, ProfileSummary, finish_summary, parse_ncu_csv

from support import DEFINITIONS, ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "ncu"


def summary_of(name: str, uuid: str = "w") -> ProfileSummary:
    s = ProfileSummary(backend="ncu", status=OK, raw_csv=(FIXTURES / name).read_text(), workload_uuid=uuid)
    return finish_summary(s, parse_ncu_csv)


# ---------------------------------------------------------------------------------------------
# The metric table comes from the skill


def test_metric_tables_per_architecture_come_from_the_skill():
    cfg = ncu_config()
    assert set(cfg["metrics"]) == {"sm_90", "sm_100"}
    t90, t100 = metric_table("sm_90"), metric_table("sm_100")
    assert t90["wgmma_inst"] == "sm__inst_executed_pipe_tensor_op_gmma.sum" and "wgmma_inst" not in t100
    assert t100["tcgen05_pipe_pct"] == "sm__pipe_tc_cycles_active.avg.pct_of_peak_sustained_active"
    assert "tcgen05_pipe_pct" not in t90
    assert "gmma" in stall_metrics("sm_90") and "gmma" not in stall_metrics("sm_100")
    assert stall_metrics("sm_100")["sleeping"] == "smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio"
    # every name the skill lists is requested, stall ratios included, each once
    names = requested_metrics("sm_90")
    assert len(names) == len(set(names))
    table = cfg["metrics"]["sm_90"]
    plain = {v for k, v in table.items() if k not in ("stall_ratio_pattern", "stall_reasons")}
    stalls = {table["stall_ratio_pattern"].format(reason=r) for r in table["stall_reasons"]}
    assert plain | stalls <= set(names)
    assert "launch__shared_mem_per_block_dynamic" in names  # the supplement (not yet in the skill)


@pytest.mark.parametrize("arch, table", [("sm_90", "sm_90"), ("sm_100", "sm_100"), ("sm_103", "sm_100"),
                                         ("sm_120", "sm_100"), ("sm_89", "sm_90"), (None, "sm_90")])
def test_table_arch_falls_back_to_the_nearest_older_table(arch, table):
    assert table_arch(arch) == table


# ---------------------------------------------------------------------------------------------
# Digests of the fixtures, against values read from the raw report


def test_digest_triton_example():
    [d] = digest_summary(summary_of("synthetic_triton_example_sm90.csv"))
    v = d.values
    assert d.kernel == "_gqa_decode_kernel" and d.arch == "sm_90" and d.launches == 1
    # raw: "689,344" nsecond, 44.92 %, 66.94 %, 66.71 %, "2,151,677,952" byte, "8,404,992" byte
    assert v["duration_ns"] == 689000.0 and v["sol_compute_pct"] == 44.9 and v["sol_memory_pct"] == 66.9
    assert v["dram_pct"] == 66.7 and v["dram_read_bytes"] == 2.15e9 and v["dram_write_bytes"] == 8.4e6
    # raw: 25.31 / 31.25 %, limits registers 5, shared_mem 8, warps 16, blocks 32
    assert v["occupancy_achieved_pct"] == 25.3 and v["occupancy_theoretical_pct"] == 31.2
    assert (d.occupancy_limiter, d.occupancy_limit_blocks_per_sm) == ("registers", 5.0)
    assert v["registers_per_thread"] == 91 and v["waves_per_sm"] == 3.88 and d.spills == 0
    assert d.shared_mem_bytes == 16400.0  # "16,384" dynamic + 0 static, three significant digits
    assert v["l1_hit_pct"] == 2.13 and v["l2_hit_pct"] == 3.41 and v["tensor_pipe_pct"] == 6.27
    assert v["mma_sync_inst"] == 1.68e7 and v["wgmma_inst"] == 0 and v["issue_active_pct"] == 21.5
    assert d.top_stalls == [("long_scoreboard", 2.34), ("wait", 0.52), ("short_scoreboard", 0.31)]
    assert d.classification == "memory-bound" and d.limiter == "register-occupancy" and d.missing == []
    assert d.units["duration_ns"] == "ns" and d.formatted("duration_ns") == "689 us"
    assert d.formatted("dram_read_bytes") == "2.15 GB" and d.formatted("sol_memory_pct") == "66.9%"


def test_digest_flashinfer_cuda_cores_two_kernels_automatic_units():
    digests = digest_summary(summary_of("synthetic_flashinfer_cuda_cores_sm90.csv"))
    assert [short_kernel_name(d.kernel) for d in digests] == ["flashinfer::BatchDecodeWithPagedKVCacheKernel",
                                                              "flashinfer::VariableLengthMergeStatesKernel"]
    decode, merge = digests
    # raw: 14.85 usecond, 4.23 Mbyte, 81.92 Kbyte, 33.28 Kbyte dynamic shared memory, L1 "n/a"
    assert decode.values["duration_ns"] == sig(14850.0) and decode.values["dram_read_bytes"] == 4.23e6
    assert decode.values["dram_write_bytes"] == 81900.0 and decode.shared_mem_bytes == 33300.0
    assert decode.values["l1_hit_pct"] is None and "l1tex__t_sector_hit_rate.pct" in decode.missing
    assert decode.values["waves_per_sm"] == 0.19 and decode.values["occupancy_theoretical_pct"] == 50
    assert decode.classification == "latency-bound" and decode.limiter == "grid-too-small"
    assert decode.top_stalls[0] == ("long_scoreboard", 5.12)
    assert merge.values["duration_ns"] == 3200.0 and merge.values["dram_read_bytes"] == 270000.0
    assert merge.occupancy_limiter == "registers"  # tie with warps (16): the fixed order decides
    assert "missing: l1tex__t_sector_hit_rate.pct" in decode.line()


def test_digest_flashinfer_tensor_cores_and_the_roofline():
    s = summary_of("synthetic_flashinfer_tensor_cores_sm90.csv")
    [d] = digest_summary(s)
    assert d.values["sol_memory_pct"] == 93.1 and d.values["sol_compute_pct"] == 38.5
    assert d.values["mma_sync_inst"] == 5.03e7 and d.values["tensor_pipe_pct"] == 12.4
    assert (d.occupancy_limiter, d.occupancy_limit_blocks_per_sm) == ("shared_mem", 2.0)
    assert d.classification == "memory-bound" and d.limiter == "shared-memory-occupancy"
    [at] = digest_summary(s, fraction_of_floor=0.95)
    assert at.classification == "at-roofline" and at.limiter is None
    [extra] = digest_summary(s, roofline_bytes=1.0e9)  # reads 2.15 GB for a 1 GB workload
    assert extra.limiter == "extra-dram-traffic"


def test_digest_b200_uses_the_sm100_table():
    [d] = digest_summary(summary_of("synthetic_b200_sm100.csv"))
    assert d.arch == "sm_100" and "wgmma_inst" not in d.values and d.missing == []
    assert d.values["tcgen05_pipe_pct"] == 62.8 and d.values["tcgen05_inst"] == 1.05e6 and d.values["tmem_pct"] == 30.2
    assert d.top_stalls[0] == ("sleeping", 1.7)
    assert d.classification == "compute-bound" and d.limiter == "tensor-pipe"


def test_missing_metrics_are_reported_never_invented():
    [d] = digest_summary(summary_of("synthetic_missing_metrics_sm90.csv"))
    for fld in ("l1_hit_pct", "l2_hit_pct", "wgmma_inst", "shared_mem_static_bytes", "shared_mem_dynamic_bytes"):
        assert d.values[fld] is None, fld
    assert d.shared_mem_bytes is None
    assert set(d.missing) == {"l1tex__t_sector_hit_rate.pct", "lts__t_sector_hit_rate.pct",
                              "sm__inst_executed_pipe_tensor_op_gmma.sum", "launch__shared_mem_per_block_static",
                              "launch__shared_mem_per_block_dynamic",
                              "smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio"}
    line = d.line()
    assert "smem" not in line and "L1 hit" not in line and "missing:" in line
    assert d.values["sol_memory_pct"] == 66.9  # what is there is still used


def test_details_page_digest():
    [d] = digest_summary(summary_of("synthetic_details_page_sm90.csv"))
    assert d.values["duration_ns"] == 689000.0 and d.values["dram_read_bytes"] == 2.15e9
    assert d.values["occupancy_achieved_pct"] is None and d.classification == "memory-bound"
    assert d.limiter == "dependent-loads"  # long_scoreboard 2.34 > 1; occupancy limits unknown


_TO_BASE = {"nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9, "byte": 1, "Kbyte": 1e3, "Mbyte": 1e6,
            "Gbyte": 1e9}


RAW_FIXTURES = sorted(p.name for p in FIXTURES.glob("*.csv") if '"Metric Name"' not in p.read_text().split("\n")[0])


@pytest.mark.parametrize("path", RAW_FIXTURES)
def test_every_raw_fixture_digest_matches_its_csv(path):
    """Generic cross-check, also for the real H200 recordings once they are added: each digest field equals
    the raw report's cell (thousands separators dropped, unit scaled) at three significant digits."""
    text = (FIXTURES / path).read_text()
    rows = list(csv.reader(line for line in text.splitlines() if line.startswith('"')))
    header, units, body = rows[0], rows[1], rows[2:]
    summary = summary_of(path)
    names = [r[header.index("Kernel Name")] for r in body]
    digests = {d.kernel: d for d in digest_summary(summary)}
    checked = 0
    for row in body:
        name = row[header.index("Kernel Name")]
        if names.count(name) > 1:
            continue  # merged launches: sums, checked in test_merged_launches
        d = digests[name]
        for fld, metric in metric_table(summary.arch).items():
            if metric not in header:
                assert d.values[fld] is None and metric in d.missing
                continue
            cell = row[header.index(metric)].replace(",", "")
            if cell in ("", "n/a"):
                assert d.values[fld] is None and metric in d.missing
                continue
            expected = float(cell) * _TO_BASE.get(units[header.index(metric)], 1)
            assert d.values[fld] == pytest.approx(sig(expected)), (path, fld)
            checked += 1
    assert checked >= 10


def test_merged_launches_sum_counts_and_weigh_the_rest():
    k1 = KernelProfile(0, "k", {"gpu__time_duration.sum": (3000.0, "ns"), "dram__bytes_read.sum": (100.0, "byte"),
                                "sm__throughput.avg.pct_of_peak_sustained_elapsed": (10.0, "%")}, cc="9.0")
    k2 = KernelProfile(1, "k", {"gpu__time_duration.sum": (1000.0, "ns"), "dram__bytes_read.sum": (50.0, "byte"),
                                "sm__throughput.avg.pct_of_peak_sustained_elapsed": (50.0, "%")}, cc="9.0")
    s = ProfileSummary(backend="ncu", status=OK, kernels=[k1, k2], arch="sm_90")
    [d] = digest_summary(s)
    assert d.launches == 2 and d.values["duration_ns"] == 4000.0 and d.values["dram_read_bytes"] == 150.0
    assert d.values["sol_compute_pct"] == 20.0  # (10 x 3000 + 50 x 1000) / 4000
    assert d.line().startswith("- `k` x2 4 us")


# ---------------------------------------------------------------------------------------------
# Classification and limiters

T = ncu_config()["classification"]


@pytest.mark.parametrize("compute, memory, fraction, expected", [
    (44.9, 66.9, None, "memory-bound"), (71.5, 42.3, None, "compute-bound"), (13.8, 19.4, None, "latency-bound"),
    (59.9, 59.9, None, "latency-bound"), (60.0, 10.0, None, "compute-bound"), (60.0, 60.0, None, "memory-bound"),
    (13.8, 19.4, 0.9, "at-roofline"), (80.0, 90.0, 0.95, "at-roofline"), (80.0, 90.0, 0.89, "memory-bound"),
    (None, 50.0, None, "unknown"), (None, None, 0.99, "at-roofline"),
])
def test_classify(compute, memory, fraction, expected):
    assert classify(compute, memory, fraction, T) == expected


@pytest.mark.parametrize("limits, expected", [
    ({"registers": 5, "shared_mem": 8, "warps": 16, "blocks": 32}, ("registers", 5)),
    ({"registers": 4, "shared_mem": 2, "warps": 8, "blocks": 32}, ("shared_mem", 2)),
    ({"registers": 16, "shared_mem": 32, "warps": 16, "blocks": 32}, ("registers", 16)),
    ({"warps": 8}, ("warps", 8)), ({}, (None, None)),
])
def test_occupancy_limiter(limits, expected):
    assert occupancy_limiter({f"occupancy_limit_{k}": v for k, v in limits.items()}) == expected


def _kernel(**metrics) -> KernelProfile:
    names = {**metric_table("sm_90"), **{f"stall_{r}": m for r, m in stall_metrics("sm_90").items()}}
    return KernelProfile(0, "k", {names[k]: (float(v), "") for k, v in metrics.items()}, cc="9.0")


BASE = dict(duration_ns=1000, sol_compute_pct=30, sol_memory_pct=75, waves_per_sm=4, local_loads=0, local_stores=0,
            occupancy_achieved_pct=40, occupancy_theoretical_pct=50, occupancy_limit_registers=8,
            occupancy_limit_shared_mem=8, occupancy_limit_warps=4, occupancy_limit_blocks=32, tensor_pipe_pct=0)


@pytest.mark.parametrize("changes, expected", [
    (dict(local_loads=12), "spills"),
    (dict(sol_compute_pct=10, sol_memory_pct=20, waves_per_sm=0.2), "grid-too-small"),
    (dict(occupancy_limit_registers=2, stall_long_scoreboard=2.0), "register-occupancy"),
    (dict(occupancy_limit_shared_mem=2, stall_long_scoreboard=2.0), "shared-memory-occupancy"),
    (dict(occupancy_achieved_pct=20, occupancy_theoretical_pct=75), "tail-imbalance"),
    (dict(stall_long_scoreboard=2.0), "dependent-loads"),
    (dict(sol_compute_pct=90, sol_memory_pct=30, stall_math_pipe_throttle=1.5), "cuda-core-compute"),
    (dict(sol_compute_pct=90, sol_memory_pct=30, tensor_pipe_pct=70), "tensor-pipe"),
    (dict(stall_short_scoreboard=1.2, stall_wait=0.5), "shared-memory-stalls"),
    (dict(stall_wait=0.5), "memory-bandwidth"),
    (dict(sol_compute_pct=90, sol_memory_pct=30), None),
])
def test_limiter_rules_in_skill_order(changes, expected):
    d = digest_kernel(_kernel(**{**BASE, **changes}), "sm_90")
    assert d.limiter == expected, d.to_json()


def test_launch_gaps_need_a_span():
    d = digest_kernel(_kernel(**{**BASE, "stall_wait": 0.5}), "sm_90", span_ns=5000)
    assert d.limiter == "launch-gaps"


# ---------------------------------------------------------------------------------------------
# Formatting


@pytest.mark.parametrize("value, unit, text", [
    (689344, "ns", "689 us"), (850, "ns", "850 ns"), (2.5e6, "ns", "2.5 ms"), (2151677952, "B", "2.15 GB"),
    (16384, "B", "16.4 KB"), (512, "B", "512 B"), (66.94, "%", "66.9%"), (16777216, "inst", "16.8 Minst"),
    (91, "regs/thread", "91 regs/thread"), (None, "%", "n/a"), (3.88, "waves", "3.88 waves"),
])
def test_fmt_quantity(value, unit, text):
    assert fmt_quantity(value, unit) == text


@pytest.mark.parametrize("x, y", [(689344, 689000), (0.012345, 0.0123), (31.25, 31.2), (0, 0), (None, None),
                                  (1e-9, 1e-9), (123456789, 123000000)])
def test_sig(x, y):
    assert sig(x) == y


@pytest.mark.parametrize("name, short", [
    ("_gqa_decode_kernel", "_gqa_decode_kernel"),
    ("void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u>(T10)",
     "flashinfer::BatchDecodeWithPagedKVCacheKernel"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(Params)",
     "cutlass::Kernel2"),
])
def test_short_kernel_name(name, short):
    assert short_kernel_name(name) == short
    assert len(short_kernel_name("x" * 100, 20)) == 20


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
    from harness.evaluate import WorkloadResult

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
