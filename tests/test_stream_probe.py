"""benchmarks/stream_probe.py: the cut arithmetic, and (Triton interpreter, fresh process) that every program of
the read-only kernel reads exactly its (request, split, KV head) range through the page table."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

stream_probe = pytest.importorskip("stream_probe")


@pytest.mark.parametrize("tokens, splits, block_n, want", [
    (2048, 1, 64, (1, 2048)),
    (2048, 4, 64, (4, 512)),
    (2048, 3, 64, (3, 704)),     # whole tiles: 683 -> 704, the last split shorter
    (512, 16, 64, (8, 64)),      # never a split of less than a tile, never an empty one
    (100, 2, 64, (2, 64)),
    (8192, 128, 64, (128, 64)),
])
def test_a_request_is_cut_into_whole_tiles(tokens, splits, block_n, want):
    assert stream_probe.plan_cut(tokens, splits, block_n) == want


@pytest.mark.parametrize("tokens, block_n, most, want", [
    (2048, 64, 128, [1, 2, 4, 8, 16, 32]),
    (8192, 64, 16, [1, 2, 4, 8, 16]),
    (64, 64, 128, [1]),
])
def test_the_cuts_tried_keep_a_tile_per_split(tokens, block_n, most, want):
    assert stream_probe.cuts(tokens, block_n, most) == want


@pytest.mark.parametrize("name, want", [("uniform_b16_kv2048", (16, 2048)), ("uniform_b1_kv512", (1, 512))])
def test_workload_names(name, want):
    assert stream_probe.parse_workload(name) == want


def test_a_skewed_workload_is_refused_by_name():
    with pytest.raises(SystemExit, match="skewed_b64"):
        stream_probe.parse_workload("skewed_b64")


CHECK = """
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import stream_probe as sp
found = []
for kv_heads, page, batch, tokens, splits, block_n, stages, reader in [
        (4, 64, 2, 192, 2, 32, 2, "pointer"), (2, 1, 3, 40, 3, 16, 1, "pointer"), (4, 16, 1, 96, 8, 16, 2, "pointer"),
        (4, 64, 2, 192, 2, 32, 2, "tma"), (2, 16, 3, 96, 3, 32, 2, "tma"), (4, 32, 1, 128, 1, 64, 1, "tma")]:
    k, v, idx = sp.build_cache(batch, tokens, kv_heads, page, torch.device("cpu"), seed=batch)
    call, out, fig = sp.make_call(k, batch, tokens, splits, block_n, stages, reader)
    call(k, v, idx, out)
    want = sp.expected_sums(k, v, idx, batch, tokens, fig["split_tokens"])
    # the same sums computed the slow way: token by token through the page table
    slow = []
    for r in range(batch):
        for s in range(fig["splits"]):
            for h in range(kv_heads):
                total = 0.0
                for t in range(s * fig["split_tokens"], min((s + 1) * fig["split_tokens"], tokens)):
                    p = int(idx[(r * tokens + t) // page])
                    total += float(k[p, t % page, h].float().sum() + v[p, t % page, h].float().sum())
                slow.append(total)
    found.append({"programs": fig["programs"], "kernel_vs_expected": float((out - want).abs().max()),
                  "expected_vs_slow": float((want - torch.tensor(slow)).abs().max())})
print(json.dumps(found))
"""


@pytest.mark.parametrize("page, block_n, tokens, want", [
    (64, 64, 2048, 64),   # one box per page
    (64, 128, 2048, 64),  # a 128-token tile is two boxes of a page
    (64, 32, 2048, 32),   # half a page per box
    (16, 64, 512, 16),
    (1, 64, 2048, 0),     # a page of one token: no box of 16
    (8, 64, 512, 0),
    (64, 64, 100, 0),     # a request that is not whole boxes
])
def test_the_tma_box_is_a_page_tile_of_sixteen_tokens_or_more(page, block_n, tokens, want):
    assert stream_probe.tma_tile(page, block_n, tokens) == want


def test_an_unknown_reader_or_a_page_without_boxes_is_refused():
    import torch

    k = torch.zeros(4, 1, 2, 128, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="no TMA box for page 1"):
        stream_probe.make_call(k, 1, 4, 1, 64, 2, "tma")
    with pytest.raises(ValueError, match="unknown reader 'ldg'"):
        stream_probe.make_call(k, 1, 4, 1, 64, 2, "ldg")


def test_the_summary_takes_the_best_paged_read_per_reader_beside_the_contiguous_one():
    meta = {"gpu": "H", "torch": "t", "triton": "r", "read_bytes_per_s": 4.0e12}
    rows = [
        {"definition": "d", "workload": "w", "reader": "pointer", "splits": 1, "programs": 4, "us": 20.0,
         "pct_of_floor": 25.0, "floor_us": 5.0, "block_n": 64, "stages": 2},
        {"definition": "d", "workload": "w", "reader": "pointer", "splits": 2, "programs": 8, "us": 10.0,
         "pct_of_floor": 50.0, "floor_us": 5.0, "block_n": 64, "stages": 2},
        {"definition": "d", "workload": "w", "reader": "tma", "splits": 2, "programs": 8, "us": 12.5,
         "pct_of_floor": 40.0, "floor_us": 5.0, "block_n": 64, "stages": 3},
        {"definition": "d", "workload": "w", "reader": "tma", "splits": 2, "programs": 8, "us": 8.0,
         "pct_of_floor": 62.5, "floor_us": 5.0, "block_n": 64, "stages": 2},
        {"definition": "d1", "workload": "w", "splits": 1, "programs": 4, "us": 30.0,  # an old row: no reader
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
    assert "| d | w | tma | 5.00 | 2 | 8 | 8.00 | 62.5% | 64, 2 |" in every
    assert "| d | w | pointer | 5.00 | 1 | 4 | 20.00 | 25.0% | 64, 2 |" in every
    assert len([line for line in every if line.startswith("| d |")]) == 3


def test_every_program_reads_its_own_range_through_the_page_table():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", CHECK, str(ROOT / "benchmarks")], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    # tma: 2 x 2 x 4; 3 requests x 3 splits of 32 tokens x 2 heads; one request, one split, 4 heads
    assert [f["programs"] for f in found] == [16, 18, 24, 16, 18, 4]
    for f in found:
        assert f["kernel_vs_expected"] < 1e-2, f
        assert f["expected_vs_slow"] < 1e-2, f


def test_the_flush_table_shows_each_size_and_the_difference_of_the_two_flushes():
    rows = [{"mb": 64, "l2_bytes": 50 << 20, "zero_us": 51.78, "read_us": 51.17, "none_us": 43.04,
             "zero_minus_read_us": 0.61},
            {"mb": 256, "l2_bytes": 50 << 20, "zero_us": 115.84, "read_us": 106.59, "none_us": 103.52,
             "zero_minus_read_us": 9.25}]
    table = stream_probe.flush_markdown(rows).splitlines()
    assert "L2 50 MiB" in table[1]
    assert table[-2:] == ["| 64 | 51.78 | 51.17 | 43.04 | 0.61 |", "| 256 | 115.84 | 106.59 | 103.52 | 9.25 |"]
    assert stream_probe.flush_markdown([]) == ""
