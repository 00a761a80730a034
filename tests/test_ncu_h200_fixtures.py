"""Real Nsight Compute recordings from the H200 (ncu 2025.3.1, 2026-11-30), digested and checked by hand.

Each expected value below was read off ncu's own human-readable report of the same recording
(`tests/fixtures/ncu/h200_details/*.details.txt`, `ncu --import X.ncu-rep --page details`), then rounded
to the digest's three significant digits. The recordings are those of `benchmarks/gpu_check.sh` stage
`fixtures` (commands in tests/fixtures/ncu/README.md).
"""

from __future__ import annotations

import pytest

from controller.evidence import digest_summary, short_kernel_name
from harness.profiling import OK, ProfileSummary, finish_summary, parse_ncu_csv

from support import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "ncu"


def digests(name: str):
    s = ProfileSummary(backend="ncu", status=OK, raw_csv=(FIXTURES / f"{name}.csv").read_text(), workload_uuid="w")
    return digest_summary(finish_summary(s, parse_ncu_csv))


def test_triton_example_large_batch_is_memory_bound_and_register_limited():
    [d] = digests("h200_triton_example_b256_kv2048")
    v = d.values
    assert short_kernel_name(d.kernel) == "_gqa_decode_kernel" and d.arch == "sm_90" and d.missing == []
    # report: gpu__time_duration 541,376 ns; dram read 2,156,905,984 B, write 4,546,816 B; dram 82.97 %
    assert v["duration_ns"] == 541000 and v["dram_read_bytes"] == 2.16e9 and v["dram_write_bytes"] == 4.55e6
    assert v["dram_pct"] == 83.0 and v["sol_compute_pct"] == 20.1  # sm__throughput 20.10 %
    # report: 96 registers/thread, 38,912 B dynamic shared memory, 3.10 waves, warps active 29.89 of 31.25 %
    assert v["registers_per_thread"] == 96 and d.shared_mem_bytes == 38900 and v["waves_per_sm"] == 3.1
    assert v["occupancy_achieved_pct"] == 29.9 and v["occupancy_theoretical_pct"] == 31.2
    # report: occupancy limits registers 5, shared_mem 5 (a tie: the fixed order names registers first)
    assert (d.occupancy_limiter, d.occupancy_limit_blocks_per_sm) == ("registers", 5.0)
    # report: hmma 8,388,608 inst, gmma 0: Triton's tl.dot here is mma.sync, not wgmma
    assert v["mma_sync_inst"] == 8.39e6 and v["wgmma_inst"] == 0 and v["l1_hit_pct"] == 2.33
    assert d.top_stalls == [("long_scoreboard", 12.8), ("barrier", 3.23), ("short_scoreboard", 2.12)]
    assert d.classification == "memory-bound" and d.limiter == "register-occupancy" and d.spills == 0


def test_triton_example_batch_one_leaves_the_gpu_idle():
    [d] = digests("h200_triton_example_b1_kv8192")
    # report: grid (1, 8, 1) x 128 threads: 8 CTAs on 132 SMs, 0.01 waves, 299,616 ns, dram 2.42 %
    assert d.values["waves_per_sm"] == 0.01 and d.values["dram_pct"] == 2.42
    assert d.classification == "latency-bound" and d.limiter == "grid-too-small"


def test_flashinfer_cuda_cores_batch_one_is_split_kv_plus_merge():
    decode, merge = digests("h200_flashinfer_cuda_cores_b1_kv8192")
    assert short_kernel_name(decode.kernel) == "BatchDecodeWithPagedKVCacheKernel"
    assert short_kernel_name(merge.kernel) == "PersistentVariableLengthMergeStatesKernel"
    # report: 18,656 ns; 33,619,968 B read; 634,368 B written; dram 38.25 %; sm 51.42 %; 59 registers;
    # 9,216 B dynamic shared memory; 0.48 waves; hmma 4,096
    v = decode.values
    assert v["duration_ns"] == 18700 and v["dram_read_bytes"] == 3.36e7 and v["dram_write_bytes"] == 634000
    assert v["dram_pct"] == 38.2 and v["sol_compute_pct"] == 51.4 and v["registers_per_thread"] == 59
    assert decode.shared_mem_bytes == 9220 and v["waves_per_sm"] == 0.48 and v["mma_sync_inst"] == 4100
    assert decode.top_stalls[0] == ("not_selected", 1.11)
    # report (merge): 5,664 ns; 552,192 B read; 40 registers; occupancy limit registers 12 blocks
    assert merge.values["duration_ns"] == 5660 and merge.values["dram_read_bytes"] == 552000
    assert (merge.occupancy_limiter, merge.occupancy_limit_blocks_per_sm) == ("registers", 12.0)
    assert decode.classification == merge.classification == "latency-bound"


def test_flashinfer_tensor_cores_large_batch_near_the_bandwidth_limit():
    [d] = digests("h200_flashinfer_tensor_cores_b256_kv2048")
    assert short_kernel_name(d.kernel) == "BatchPrefillWithPagedKVCacheKernel"  # decode through the FA2 prefill kernel
    # report: 516,192 ns; 2,166,216,704 B read; dram 87.39 %; 178 registers; 69,632 B dynamic shared memory;
    # 7.76 waves; warps active 12.18 of 12.50 %; hmma 8,650,752; long_scoreboard 4.33
    v = d.values
    assert v["duration_ns"] == 516000 and v["dram_read_bytes"] == 2.17e9 and v["dram_pct"] == 87.4
    assert v["registers_per_thread"] == 178 and d.shared_mem_bytes == 69600 and v["waves_per_sm"] == 7.76
    assert v["occupancy_achieved_pct"] == 12.2 and v["occupancy_theoretical_pct"] == 12.5
    assert v["mma_sync_inst"] == 8.65e6 and d.top_stalls[0] == ("long_scoreboard", 4.33)
    assert d.classification == "memory-bound"


@pytest.mark.parametrize("name", sorted(p.stem for p in FIXTURES.glob("h200_*.csv")))
def test_every_h200_recording_has_all_requested_metrics_and_the_shared_memory_supplement(name):
    for d in digests(name):
        assert d.arch == "sm_90" and d.missing == [], (name, d.missing)
        assert d.values["shared_mem_dynamic_bytes"] is not None and d.values["shared_mem_static_bytes"] == 0
