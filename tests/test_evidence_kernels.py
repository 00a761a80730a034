"""controller.evidence, per kernel: the metric table from the skill, kernel digests from ncu fixtures,
classification and limiters, formatting of quantities and kernel names."""

from __future__ import annotations

import csv

import pytest

from controller.evidence import (classify, digest_kernel, digest_summary, fmt_quantity, metric_table, ncu_config,
                                 occupancy_limiter, requested_metrics, short_kernel_name, sig, stall_metrics,
                                 table_arch)
from harness.profiling import OK, KernelProfile, ProfileSummary

from evidence_support import FIXTURES, summary_of


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
