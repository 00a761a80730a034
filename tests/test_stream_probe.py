"""benchmarks/stream_probe.py: the cut arithmetic, the workloads from the dataset, the tables, and (Triton interpreter,
fresh process) that every program of both read-only kernels reads exactly its (chunk, KV head) range through the page
table, on uniform, ragged and partly filled pages."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

stream_probe = pytest.importorskip("stream_probe")


@pytest.mark.parametrize("lengths, block_n, want", [
    ([2048], 64, [64, 128, 256, 512, 1024, 2048]),
    ([512] * 16, 128, [128, 256, 512]),
    ([65, 15794, 300], 64, [64 << i for i in range(9)]),  # up to the first size holding 15794 whole: 16384
    ([40], 64, [64]),
    ([], 64, [64]),
])
def test_chunks_double_from_a_tile_to_the_longest_request_whole(lengths, block_n, want):
    assert stream_probe.chunk_sizes(lengths, block_n) == want


@pytest.mark.parametrize("lengths, page, chunk, want", [
    ([192, 192], 64, 128, [(0, 0, 128), (0, 128, 192), (3, 0, 128), (3, 128, 192)]),
    ([100, 0, 30], 16, 64, [(0, 0, 64), (0, 64, 100), (7, 0, 30)]),   # 7 pages, none for the empty request
    ([5, 3], 1, 4, [(0, 0, 4), (0, 4, 5), (5, 0, 3)]),
    ([512], 64, 1024, [(0, 0, 512)]),
])
def test_work_items_cut_each_request_at_the_chunk_size_and_point_at_its_pages(lengths, page, chunk, want):
    assert stream_probe.work_items(lengths, page, chunk) == want


@pytest.mark.parametrize("page, block_n, want", [
    (64, 64, 64),   # one box per page
    (64, 128, 64),  # a 128-token tile is two boxes of a page
    (64, 32, 32),   # half a page per box
    (16, 64, 16),
    (1, 64, 0),     # a page of one token: no box of 16
    (8, 64, 0),
    (64, 48, 0),    # a box that does not divide the page
])
def test_the_tma_box_is_a_page_tile_of_sixteen_tokens_or_more(page, block_n, want):
    assert stream_probe.tma_tile(page, block_n) == want


def test_an_unknown_reader_a_page_without_boxes_or_a_ragged_chunk_is_refused():
    import torch

    k = torch.zeros(4, 1, 2, 128, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="no TMA box for page 1"):
        stream_probe.make_call(k, [4], 64, 64, 2, "tma")
    with pytest.raises(ValueError, match="unknown reader 'ldg'"):
        stream_probe.make_call(k, [4], 64, 64, 2, "ldg")
    with pytest.raises(ValueError, match="not whole 64-token tiles"):
        stream_probe.make_call(k, [4], 96, 64, 2, "pointer")


def test_the_dataset_gives_any_workload_its_lengths_and_the_harness_floor_bytes():
    axes, found = stream_probe.resolve("gqa_paged_decode_h32_kv4_d128_ps64",
                                       ["uniform_b16_kv512", "skewed_b64", "one_long_32k_31x256"])
    assert axes == {"kv_heads": 4, "page": 64, "head_dim": 128}
    by = {f["workload"]: f for f in found}
    assert by["uniform_b16_kv512"]["lengths"] == [512] * 16
    skewed = by["skewed_b64"]["lengths"]
    assert len(skewed) == 64 and max(skewed) > 20 * min(skewed)
    assert by["one_long_32k_31x256"]["lengths"] == [32768] + [256] * 31
    for f in found:  # the floor's bytes: K and V of every token, plus the query, output, lse and page table
        kv = sum(f["lengths"]) * 4 * 128 * 2 * 2
        assert kv < f["cost"].bytes_moved < kv * 1.02


CHECK = """
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import stream_probe as sp
found = []
for kv_heads, page, lengths, chunk, block_n, stages, reader in [
        (4, 64, [192, 192], 128, 32, 2, "pointer"), (2, 1, [40, 7, 33], 16, 16, 1, "pointer"),
        (4, 16, [96], 16, 16, 2, "pointer"), (2, 16, [100, 0, 37, 64], 32, 32, 2, "pointer"),
        (4, 64, [192, 192], 64, 32, 2, "tma"), (2, 16, [96, 96, 96], 32, 32, 2, "tma"),
        (4, 32, [128], 128, 64, 1, "tma"), (2, 16, [100, 0, 37, 64], 32, 32, 2, "tma"),
        (2, 16, [0, 0], 32, 32, 2, "tma"), (2, 1, [0], 16, 16, 1, "pointer")]:
    k, v, idx = sp.build_cache(lengths, kv_heads, page, torch.device("cpu"), seed=len(lengths))
    call, out, items, fig = sp.make_call(k, lengths, chunk, block_n, stages, reader)
    call(k, v, idx, out)
    want = sp.expected_sums(k, v, idx, lengths, items)
    # the same sums the slow way: token by token through the page table, request by request
    slow, slot = [], 0
    for n in lengths:
        for t0 in range(0, n, chunk):
            for h in range(kv_heads):
                total = 0.0
                for t in range(t0, min(n, t0 + chunk)):
                    p = int(idx[slot + t // page])
                    total += float(k[p, t % page, h].float().sum() + v[p, t % page, h].float().sum())
                slow.append(total)
        slot += -(-n // page)
    found.append({"programs": fig["programs"],
                  "kernel_vs_expected": float((out[:want.numel()] - want).abs().max()) if want.numel() else 0.0,
                  "expected_vs_slow": float((want - torch.tensor(slow)).abs().max()) if slow else 0.0})
print(json.dumps(found))
"""


def test_every_program_reads_its_own_range_through_the_page_table():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", CHECK, str(ROOT / "benchmarks")], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    # chunks x KV heads: 4 x 4; (3 + 1 + 3) x 2; 6 x 4; (4 + 0 + 2 + 2) x 2; then the TMA reader: 6 x 4 (partial
    # last pages and a chunk ending inside a box included), 9 x 2, 1 x 4, 8 x 2; batches of empty requests: none
    assert [f["programs"] for f in found] == [16, 14, 24, 16, 24, 18, 4, 16, 0, 0]
    for f in found:
        assert f["kernel_vs_expected"] < 1e-2, f
        assert f["expected_vs_slow"] < 1e-2, f


def test_the_summary_takes_the_best_paged_read_per_reader_beside_the_contiguous_one():
    meta = {"gpu": "H", "torch": "t", "triton": "r", "read_bytes_per_s": 4.0e12}
    rows = [
        {"definition": "d", "workload": "w", "reader": "pointer", "chunk_tokens": 128, "programs": 4, "us": 20.0,
         "pct_of_floor": 25.0, "floor_us": 5.0, "block_n": 64, "stages": 2},
        {"definition": "d", "workload": "w", "reader": "pointer", "chunk_tokens": 64, "programs": 8, "us": 10.0,
         "pct_of_floor": 50.0, "floor_us": 5.0, "block_n": 64, "stages": 2},
        {"definition": "d", "workload": "w", "reader": "tma", "chunk_tokens": 64, "programs": 8, "us": 12.5,
         "pct_of_floor": 40.0, "floor_us": 5.0, "block_n": 64, "stages": 3},
        {"definition": "d", "workload": "w", "reader": "tma", "chunk_tokens": 64, "programs": 8, "us": 8.0,
         "pct_of_floor": 62.5, "floor_us": 5.0, "block_n": 64, "stages": 2},
        {"definition": "d1", "workload": "w", "chunk_tokens": 128, "programs": 4, "us": 30.0,  # an old row: no reader
         "pct_of_floor": 20.0, "floor_us": 6.0, "block_n": 64, "stages": 2},
    ]
    contiguous = [{"definition": "d", "workload": "w", "us": 6.25, "pct_of_floor": 80.0, "floor_us": 5.0},
                  {"definition": "d1", "workload": "w", "us": 7.5, "pct_of_floor": 80.0, "floor_us": 6.0}]
    table = stream_probe.summary_markdown(meta, rows, contiguous).splitlines()
    assert "4.00 TB/s" in table[2]
    assert table[4].endswith("| contiguous | paged, pointer | paged, tma |")
    assert table[6] == "| d | w | 5.00 | 6.25 (80%) | 10.00 (50%, 8 programs) | 8.00 (62%, 8 programs) |"
    assert table[7] == "| d1 | w | 6.00 | 7.50 (80%) | 30.00 (20%, 4 programs) |  |"
    every = stream_probe.markdown(rows).splitlines()
    assert "| d | w | tma | 5.00 | 64 | 8 | 8.00 | 62.5% | 64, 2 |" in every
    assert "| d | w | pointer | 5.00 | 128 | 4 | 20.00 | 25.0% | 64, 2 |" in every
    assert len([line for line in every if line.startswith("| d |")]) == 3


def test_the_flush_table_shows_each_size_and_the_difference_of_the_two_flushes():
    rows = [{"mb": 64, "l2_bytes": 50 << 20, "zero_us": 51.78, "read_us": 51.17, "none_us": 43.04,
             "zero_minus_read_us": 0.61},
            {"mb": 256, "l2_bytes": 50 << 20, "zero_us": 115.84, "read_us": 106.59, "none_us": 103.52,
             "zero_minus_read_us": 9.25}]
    table = stream_probe.flush_markdown(rows).splitlines()
    assert "L2 50 MiB" in table[1]
    assert table[-2:] == ["| 64 | 51.78 | 51.17 | 43.04 | 0.61 |", "| 256 | 115.84 | 106.59 | 103.52 | 9.25 |"]
    assert stream_probe.flush_markdown([]) == ""


def _submit(label_us_floor):
    return {"definition": "d", "solution": "s", "workloads": [
        {"label": label, "kernel_latency_ms": us / 1e3, "latency_ms": 1.0, "floor_ms": floor}
        for label, us, floor in label_us_floor]}


PROBE = {"meta": {"gpu": "NVIDIA H200"},
         "rows": [{"definition": "d", "workload": "a", "reader": "pointer", "us": 10.0},
                  {"definition": "d", "workload": "a", "reader": "tma", "us": 8.0},
                  {"definition": "other", "workload": "b", "reader": "tma", "us": 1.0},
                  {"definition": "d", "workload": "b", "us": 20.0}],
         "contiguous": [{"definition": "d", "workload": "a", "us": 6.0},
                        {"definition": "other", "workload": "b", "us": 1.0}]}


def test_the_decode_is_set_beside_the_bare_reads_of_its_own_definition_and_workloads():
    text = stream_probe.compare_markdown(_submit([("a", 12.0, 0.004), ("b", 30.0, 0.015), ("c", 5.0, None)]), PROBE)
    lines = text.splitlines()
    assert lines[0] == "## d: `s` against reading its bytes only (NVIDIA H200)"
    assert "| a | 12.00 (33%) | 6.00 (67%) | 8.00 (50%, tma) | 1.50x |" in lines
    # b: no contiguous read of d's b (other's is not d's), its old row without a reader counts as pointer
    assert "| b | 30.00 (50%) |  | 20.00 (75%, pointer) | 1.50x |" in lines
    assert "| c | 5.00 |  |  |  |" in lines


def test_compare_runs_without_a_gpu_and_writes_its_table(tmp_path):
    submit = tmp_path / "submit.json"
    submit.write_text(json.dumps(_submit([("a", 12.0, 0.004)]), indent=1) + "\n"
                      + json.dumps({**_submit([("a", 16.0, 0.004)]), "solution": "t"}))
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps(PROBE))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "stream_probe.py"), "--out", str(tmp_path / "o"),
                           "--compare", str(submit), str(probe)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    written = (tmp_path / "o" / "decode_vs_read.md").read_text()
    assert "`s` against" in written and "`t` against" in written
    assert "| a | 16.00 (25%) | 6.00 (67%) | 8.00 (50%, tma) | 2.00x |" in written


FLOW = """
import json, sys, types, torch
sys.path.insert(0, sys.argv[1])
import stream_probe as sp
import harness.measure.timing as timing
from harness.measure.roofline import Ceilings
from harness.families.base import WorkloadCost

timed = []
def fake_trial(fn, args, *, warmup, iterations, device=None, backend="auto"):
    fn(*args)  # the call as the timer would make it: it must run
    timed.append(iterations)
    return types.SimpleNamespace(median_ms=0.001 * len(timed), backend="fake", aligned=False)
timing.time_trial = fake_trial

def small(definition, labels):  # two workloads of the real definitions' shapes, small enough for the interpreter
    axes = {"kv_heads": 2, "page": 16 if "ps64" in definition else 1, "head_dim": 128}
    cost = lambda n: WorkloadCost(bytes_moved=n, flops=1, formula="f")
    return axes, [{"workload": "ragged", "lengths": [40, 0, 96], "cost": cost(4_000_000)},
                  {"workload": "even", "lengths": [64, 64], "cost": cost(2_000_000)}]
ceilings = Ceilings(gpu_name="fake", copy_bytes_per_s=1e12, read_bytes_per_s=2e12, bf16_flops_per_s=1e15,
                    measured_at="now", method="test")
resolved = {d: small(d, ["ragged", "even"]) for d in ("x_ps64", "x_ps1")}
rows, contiguous = sp.probe_definitions(resolved, ["pointer", "tma"], [32], [2], 3, ceilings, torch.device("cpu"))
print(json.dumps({"rows": rows, "contiguous": contiguous, "timed": timed}))
"""


def test_the_whole_probe_runs_checks_and_times_every_cut_of_every_reader():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", FLOW, str(ROOT / "benchmarks")], env=env, capture_output=True,
                          text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    rows, contiguous = found["rows"], found["contiguous"]
    # page 16: both readers, chunks 32, 64, 128 (ragged: longest 96) and 32, 64 (even); page 1: the pointer reader only
    cuts = [(r["definition"], r["workload"], r["reader"], r["chunk_tokens"]) for r in rows]
    assert cuts == [("x_ps64", "ragged", "pointer", c) for c in (32, 64, 128)] \
        + [("x_ps64", "ragged", "tma", c) for c in (32, 64, 128)] \
        + [("x_ps64", "even", "pointer", c) for c in (32, 64)] + [("x_ps64", "even", "tma", c) for c in (32, 64)] \
        + [("x_ps1", "ragged", "pointer", c) for c in (32, 64, 128)] \
        + [("x_ps1", "even", "pointer", c) for c in (32, 64)]
    assert [(c["definition"], c["workload"]) for c in contiguous] == [
        ("x_ps64", "ragged"), ("x_ps64", "even"), ("x_ps1", "ragged"), ("x_ps1", "even")]
    assert len(found["timed"]) == len(rows) + len(contiguous) and set(found["timed"]) == {3}
    # the floor is the harness's: the workload's bytes over the read bandwidth (2 TB/s): 2 us and 1 us
    assert {c["workload"]: c["floor_us"] for c in contiguous} == {"ragged": 2.0, "even": 1.0}
    ragged_128 = next(r for r in rows if r["workload"] == "ragged" and r["chunk_tokens"] == 128)
    assert ragged_128["programs"] == 2 * 2  # two non-empty requests, one chunk each, two KV heads
    for r in rows + contiguous:
        assert abs(r["pct_of_floor"] - 100 * r["floor_us"] / r["us"]) < 1e-9


@pytest.mark.parametrize("flags, said", [
    (["--workloads", "uniform_b3_kv7"], "no workload 'uniform_b3_kv7' for gqa_paged_decode_h32_kv4_d128_ps64"),
    (["--definitions", "gqa_decode_nope"], "unknown definition 'gqa_decode_nope'"),
])
def test_a_wrong_name_is_one_line_and_exit_2_before_any_gpu_work(tmp_path, flags, said):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "stream_probe.py"), "--out", str(tmp_path),
                           *flags], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
