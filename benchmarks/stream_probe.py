"""How fast can a kernel only *read* a gqa_decode workload's paged KV cache? (GPU host.)

The % of floor that issue #19 asks for (80% on mid-size batches, 95% on large ones) divides the harness's floor (the
workload's bytes over the GPU's measured read bandwidth) by the kernel's time. This probe measures, per workload
(any of the dataset's, skewed ones too: the request lengths come from its page table), what is left of that floor
once the work is cut the way a split-KV kernel cuts it: every program reads one chunk of one request for one KV head
through the page table, exactly the loads a decode kernel makes, and does nothing else (a sum, checked against torch
before timing, so nothing is dead code). Chunks of one tile, doubling, up to the whole longest request. No query, no
softmax, no merge. Its best time per workload is an attainable floor for that cut; the decode kernel's time over it
is what the kernel's own work (query, MMA, softmax, merge) costs on top.

It answers the design questions the ncu digests cannot: how many programs a batch needs to reach the read bandwidth,
and how much of a batch-1 or batch-16 kernel's time the bare read of the cache already takes.

Usage (GPU host; Triton and torch):
    python benchmarks/stream_probe.py --definitions gqa_paged_decode_h32_kv4_d128_ps64 \
        --workloads uniform_b1_kv8192,uniform_b16_kv2048 --out benchmarks/results/<date>_<gpu>_stream_probe
Timing is the harness's official timer (`harness.measure.timing.time_trial`: CUPTI kernel time, L2 flushed).

Two readers: ``pointer`` (a tile's addresses per token through the page table, the templates' KV_LOAD 0/1) and ``tma``
(a TMA box per page tile, KV_LOAD 2; pages of 16+ tokens). Beside them, per workload, the floor's own reader
(torch.sum, contiguous) on the same bytes: how far that reader itself stays from the floor at this size on this timer.
It is not a bound on a kernel: on an H100 (run 27) the paged Triton reads beat it at every size measured, 4-330 MB
(16 MB: 11.3 us against 19.5), so the floor, bytes over the bandwidth torch.sum reaches on a multi-GiB buffer, is an
asymptote its own reader does not approach at these sizes either.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

HEAD_DIM = 128
NUM_WARPS = 4


@triton.jit
def _work_item(work_ptr, num_kv_heads):
    """This program's (KV head, first page slot of its request in kv_indices, first token, end token): program
    (work item, KV head), KV heads fastest as the decode kernels order them."""
    pid = tl.program_id(0)
    item = pid // num_kv_heads
    page_begin = tl.load(work_ptr + 3 * item)
    begin = tl.load(work_ptr + 3 * item + 1)
    end = tl.load(work_ptr + 3 * item + 2)
    return pid % num_kv_heads, page_begin, begin, end


@triton.jit
def _read_ranges_kernel(k_ptr, v_ptr, kv_indices_ptr, work_ptr, out_ptr, num_kv_heads, stride_page, stride_slot,
                        stride_head, PAGE: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                        STAGES: tl.constexpr):
    """Program (work item, KV head), KV heads fastest as the decode kernels order them. A work item is (first page
    slot of its request in kv_indices, first token, end token) of one chunk of one request. Sums K + V over the
    range, loaded through the page table tile by tile."""
    kv_head, page_begin, begin, end = _work_item(work_ptr, num_kv_heads)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    acc = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    for start in tl.range(begin, end, BLOCK_N, num_stages=STAGES):
        token = start + offs_n
        valid = token < end
        page = tl.load(kv_indices_ptr + page_begin + token // PAGE, mask=valid, other=0).to(tl.int64)
        row = page * stride_page + (token % PAGE) * stride_slot + kv_head * stride_head
        k = tl.load(k_ptr + row[:, None] + offs_d[None, :], mask=valid[:, None], other=0.0)
        v = tl.load(v_ptr + row[:, None] + offs_d[None, :], mask=valid[:, None], other=0.0)
        acc += k.to(tl.float32) + v.to(tl.float32)
    tl.store(out_ptr + tl.program_id(0), tl.sum(acc))


@triton.jit
def _read_ranges_tma_kernel(k_desc, v_desc, kv_indices_ptr, work_ptr, out_ptr, num_kv_heads, PAGE: tl.constexpr,
                            TILE: tl.constexpr, HEAD_DIM: tl.constexpr, STAGES: tl.constexpr):
    """As _read_ranges_kernel, with every tile one TMA box of a page (TILE = min(tile, page) tokens of one KV head,
    what the templates' KV_LOAD 2 loads): one page index per tile instead of one per token, and no address
    arithmetic per element. A chunk starts on a box; the rows of a request's last, partly filled box past its end
    are loaded and dropped (the box never leaves its page)."""
    kv_head, page_begin, begin, end = _work_item(work_ptr, num_kv_heads)
    offs_t = tl.arange(0, TILE)
    acc = tl.zeros([TILE, HEAD_DIM], dtype=tl.float32)
    for start in tl.range(begin, end, TILE, num_stages=STAGES):
        page = tl.load(kv_indices_ptr + page_begin + start // PAGE)
        k = k_desc.load([page, start % PAGE, kv_head, 0]).reshape(TILE, HEAD_DIM)
        v = v_desc.load([page, start % PAGE, kv_head, 0]).reshape(TILE, HEAD_DIM)
        keep = (start + offs_t) < end
        acc += tl.where(keep[:, None], k.to(tl.float32) + v.to(tl.float32), 0.0)
    tl.store(out_ptr + tl.program_id(0), tl.sum(acc))


READERS = ("pointer", "tma")


def resolve(definition: str, labels: list[str]) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """The definition's (KV heads, page size, head dim) and, per workload label, its request lengths (from its page
    table) and the bytes the harness's floor counts, from the dataset's own records: any workload, skewed ones too."""
    from harness.data.dataset import Dataset, default_root
    from harness.families import family_for

    dataset = Dataset(default_root())
    d = dataset.definition(definition)
    family = family_for(d.op_type)
    axes = {"kv_heads": d.const_axes["num_kv_heads"], "page": d.const_axes["page_size"],
            "head_dim": d.const_axes["head_dim"]}
    out = []
    for workload in dataset.workloads_for(definition, labels):
        lengths = family.request_lengths(d, workload, dataset.root)
        if lengths is None:
            raise SystemExit(f"stream_probe: {definition} {dataset.label(workload)}: no page table in the dataset")
        cost = family.workload_cost(d, workload, dataset.root)
        out.append({"workload": dataset.label(workload), "lengths": lengths, "cost": cost})
    return axes, out


def chunk_sizes(lengths: list[int], block_n: int) -> list[int]:
    """Chunk sizes (tokens) to try: one tile, doubling, up to the first size that holds the longest request whole."""
    longest = max(lengths, default=0)
    out, c = [], block_n
    while True:
        out.append(c)
        if c >= longest:
            return out
        c *= 2


def work_items(lengths: list[int], page: int, chunk_tokens: int) -> list[tuple[int, int, int]]:
    """(first page slot of the request, first token, end token) of every chunk of ``chunk_tokens``, request by
    request, pages laid out request after request as build_cache lays them; an empty request has none."""
    items, slot = [], 0
    for n in lengths:
        items.extend((slot, t, min(n, t + chunk_tokens)) for t in range(0, n, chunk_tokens))
        slot += -(-n // page)
    return items


def tma_tile(page: int, block_n: int) -> int:
    """Tokens per TMA box for this page size and tile, or 0 where the TMA reader does not apply: a box is one page's
    min(tile, page) tokens, at least 16 (as the templates require)."""
    tile = min(block_n, page)
    return tile if tile >= 16 and page % tile == 0 and block_n % tile == 0 else 0


def build_cache(lengths: list[int], kv_heads: int, page: int, device, seed: int = 0):
    """A cache of exactly the batch's pages, scattered in random order as a serving allocator leaves them."""
    pages = sum(-(-n // page) for n in lengths)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    kv_indices = torch.randperm(pages, generator=generator).to(torch.int32).to(device)
    k_cache = torch.randn(pages, page, kv_heads, HEAD_DIM, dtype=torch.bfloat16, device=device)
    v_cache = torch.randn_like(k_cache)
    return k_cache, v_cache, kv_indices


def make_call(k_cache, lengths: list[int], chunk_tokens: int, block_n: int, stages: int, reader: str = "pointer"):
    """(the launch as a callable of (k, v, kv_indices, out), the output tensor, the work list, the cut's figures).
    reader "tma" loads each tile as TMA boxes of tma_tile tokens."""
    _, page, kv_heads, _ = k_cache.shape
    if chunk_tokens % block_n:
        raise ValueError(f"stream_probe: chunks of {chunk_tokens} tokens are not whole {block_n}-token tiles")
    items = work_items(lengths, page, chunk_tokens)
    work = torch.tensor(items or [(0, 0, 0)], dtype=torch.int32, device=k_cache.device).reshape(-1)
    programs = len(items) * kv_heads
    out = torch.empty(max(programs, 1), dtype=torch.float32, device=k_cache.device)
    figures = {"chunk_tokens": chunk_tokens, "programs": programs, "block_n": block_n, "stages": stages,
               "reader": reader}
    if reader == "tma":
        from triton.tools.tensor_descriptor import TensorDescriptor

        tile = tma_tile(page, block_n)
        if not tile:
            raise ValueError(f"stream_probe: no TMA box for page {page}, tile {block_n}")

        def call(k, v, idx, o):
            if not programs:  # a batch of empty requests reads nothing
                return
            k_desc = TensorDescriptor.from_tensor(k, [1, tile, 1, HEAD_DIM])
            v_desc = TensorDescriptor.from_tensor(v, [1, tile, 1, HEAD_DIM])
            _read_ranges_tma_kernel[(programs,)](k_desc, v_desc, idx, work, o, kv_heads, PAGE=page, TILE=tile,
                                                 HEAD_DIM=HEAD_DIM, STAGES=stages, num_warps=NUM_WARPS)

        return call, out, items, figures
    if reader != "pointer":
        raise ValueError(f"stream_probe: unknown reader {reader!r} (one of {', '.join(READERS)})")

    def call(k, v, idx, o):
        if not programs:
            return
        _read_ranges_kernel[(programs,)](k, v, idx, work, o, kv_heads, k.stride(0), k.stride(1), k.stride(2),
                                         PAGE=page, BLOCK_N=block_n, HEAD_DIM=HEAD_DIM, STAGES=stages,
                                         num_warps=NUM_WARPS)

    return call, out, items, figures


def expected_sums(k_cache, v_cache, kv_indices, lengths: list[int], items: list[tuple[int, int, int]]):
    """What every program must return: K + V summed over its (work item, KV head) range, in grid order."""
    _, page, kv_heads, _ = k_cache.shape
    per_row = (k_cache.float() + v_cache.float()).sum(-1).reshape(-1, kv_heads)  # [pages x page, heads]
    prefix, slot = {}, 0
    for n in lengths:  # per request: cumulative sums over its tokens, through the page table
        pages = kv_indices[slot:slot + -(-n // page)].long()
        rows = (pages[:, None] * page + torch.arange(page, device=k_cache.device)).reshape(-1)[:n]
        zero = torch.zeros(1, kv_heads, dtype=torch.float64, device=k_cache.device)
        prefix[slot] = torch.cat([zero, per_row[rows].double().cumsum(0)])
        slot += -(-n // page)
    sums = [prefix[s][e] - prefix[s][b] for s, b, e in items]
    if not sums:
        return torch.zeros(0, dtype=torch.float32, device=k_cache.device)
    return torch.stack(sums).reshape(-1).float()


def probe_one(k_cache, v_cache, kv_indices, lengths: list[int], chunk_tokens: int, block_n: int, stages: int,
              iterations: int, reader: str = "pointer") -> dict[str, Any]:
    """Check one cut of the batch reads the right bytes, then time it (official timer); returns its figures."""
    from harness.measure.timing import time_trial

    call, out, items, figures = make_call(k_cache, lengths, chunk_tokens, block_n, stages, reader)
    call(k_cache, v_cache, kv_indices, out)
    want = expected_sums(k_cache, v_cache, kv_indices, lengths, items)
    if not torch.allclose(out[:want.numel()], want, rtol=1e-3, atol=0.5):
        raise RuntimeError(f"stream_probe: the kernel read the wrong bytes at {figures}")
    timing = time_trial(call, (k_cache, v_cache, kv_indices, out), warmup=5, iterations=iterations,
                        device=k_cache.device)
    return {**figures, "us": timing.median_ms * 1000, "backend": timing.backend, "aligned": timing.aligned}


def contiguous_read(nbytes: int, iterations: int, device) -> dict[str, Any]:
    """The floor's own reader (torch.sum of one contiguous bf16 buffer, as measure_ceilings reads its multi-GiB
    buffer) on this many bytes, on the official timer, with no page table and no cut: how close the floor's own
    method comes to the floor at this size. A reference, not a bound: a paged read of the same bytes can be faster
    (H100 run 27: 11.3 against 19.5 us at 16 MB)."""
    from harness.measure.timing import time_trial

    data = torch.ones(nbytes // 2, dtype=torch.bfloat16, device=device)
    timing = time_trial(lambda d: torch.sum(d, dtype=torch.float32), (data,), warmup=5, iterations=iterations,
                        device=device)
    del data
    return {"us": timing.median_ms * 1000, "backend": timing.backend, "aligned": timing.aligned}


def flush_cost(sizes_mb: list[int], iterations: int = 30) -> list[dict[str, Any]]:
    """What the official timer's L2 flush costs the call after it, by kind of flush. The official flush zeroes a
    2 x L2 buffer and so leaves L2 dirty; the question is how much of a read's time over the floor the write-back of
    those lines is. Each size is a contiguous read (torch.sum, the floor's own reader) timed with CUDA events (launch
    overhead included, tens of us: only differences between the kinds mean anything, and below 32 MiB not even
    those) after three flushes: zeroing (the official one), reading the same buffer (L2 left clean) and none (L2
    warm with the data where it fits). ``zero_minus_read_us`` is what the dirty L2 costs the read, if anything
    (run 26: 0.6-1.7 us at 64-128 MiB, 8-9 us at 256-512 MiB on an H100)."""
    from harness.measure.timing import flush_buffer_bytes

    device = torch.device("cuda")
    l2 = int(torch.cuda.get_device_properties(device).L2_cache_size)
    flush = torch.empty(flush_buffer_bytes(l2), dtype=torch.int8, device=device)
    modes = {"zero": flush.zero_, "read": lambda: flush.sum(dtype=torch.int32), "none": lambda: None}
    rows = []
    for mb in sizes_mb:
        data = torch.ones(mb << 19, dtype=torch.bfloat16, device=device)
        row: dict[str, Any] = {"mb": mb, "l2_bytes": l2}
        for name, before in modes.items():
            samples = []
            for i in range(iterations + 3):
                before()
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                torch.sum(data, dtype=torch.float32)
                end.record()
                torch.cuda.synchronize()
                if i >= 3:
                    samples.append(start.elapsed_time(end) * 1000)
            row[f"{name}_us"] = sorted(samples)[len(samples) // 2]
        row["zero_minus_read_us"] = row["zero_us"] - row["read_us"]
        rows.append(row)
        print(json.dumps(row), flush=True)
        del data
    return rows


def probe_definitions(resolved: dict[str, tuple], readers: list[str], block_ns: list[int], stage_counts: list[int],
                      iterations: int, ceilings, device) -> tuple[list, list]:
    """(paged rows, contiguous rows): per definition (``resolve``'s answer for it) and workload, the floor's reader
    on its bytes, then every reader x tile x chunk size x depth of the paged read, each checked and timed; progress
    as JSON lines."""
    from harness.measure.roofline import floor_ms

    rows, contiguous = [], []
    for definition, (axes, workloads) in resolved.items():
        if axes["head_dim"] != HEAD_DIM:
            raise SystemExit(f"stream_probe: {definition} has head_dim {axes['head_dim']}, the probe reads {HEAD_DIM}")
        kv_heads, page = axes["kv_heads"], axes["page"]
        for wl in workloads:
            lengths, workload = wl["lengths"], wl["workload"]
            floor_us = floor_ms(wl["cost"], ceilings) * 1000
            row = contiguous_read(wl["cost"].bytes_moved, iterations, device)
            row.update(definition=definition, workload=workload, floor_us=floor_us,
                       pct_of_floor=100 * floor_us / row["us"])
            contiguous.append(row)
            print(json.dumps({"contiguous": row}), flush=True)
            k_cache, v_cache, kv_indices = build_cache(lengths, kv_heads, page, device)
            for reader in readers:
                for block_n in block_ns:
                    if reader == "tma" and not tma_tile(page, block_n):
                        continue
                    for chunk in chunk_sizes(lengths, block_n):
                        for stages in stage_counts:
                            row = probe_one(k_cache, v_cache, kv_indices, lengths, chunk, block_n, stages,
                                            iterations, reader)
                            row.update(definition=definition, workload=workload, floor_us=floor_us,
                                       pct_of_floor=100 * floor_us / row["us"])
                            rows.append(row)
                            print(json.dumps(row), flush=True)
            del k_cache, v_cache, kv_indices
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return rows, contiguous


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--definitions", default="gqa_paged_decode_h32_kv4_d128_ps64")
    parser.add_argument("--workloads", default="uniform_b1_kv2048,uniform_b1_kv8192,uniform_b16_kv512,"
                        "uniform_b16_kv2048,uniform_b64_kv512,uniform_b64_kv2048,uniform_b256_kv512,skewed_b64,"
                        "one_long_32k_31x256", help="the dataset's workload labels (or uuids), any shape")
    parser.add_argument("--block-n", default="64", help="comma-separated tile sizes (tokens)")
    parser.add_argument("--stages", default="2,3,4", help="comma-separated pipeline depths")
    parser.add_argument("--readers", default="pointer,tma",
                        help="comma-separated: pointer (per-token addresses), tma (a box per page tile; pages of "
                             "16+ tokens, skipped elsewhere)")
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--flush-sizes", default="8,16,32,64,128,256,512",
                        help="MiB of contiguous reads timed after each kind of L2 flush ('' to skip)")
    parser.add_argument("--out", required=True, help="folder for stream_probe.json and stream_probe.md")
    parser.add_argument("--compare", nargs=2, metavar=("SUBMIT_JSON", "PROBE_JSON"),
                        help="no GPU: write OUT/decode_vs_read.md, the decodes of a `harness submit --json` output "
                             "next to the bare reads of a stream_probe.json from the same card")
    args = parser.parse_args()
    if args.compare:
        from template_sweep import parse_results  # `harness submit --json`: one object per solution

        submit, probe = (Path(p).read_text() for p in args.compare)
        text = "".join(compare_markdown(result, json.loads(probe)) for result in parse_results(submit))
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "decode_vs_read.md").write_text(text)
        print(text)
        return
    from harness.data.schema import SchemaError

    try:  # every name checked before any GPU time: a typo is one line, not a traceback after minutes
        resolved = {d: resolve(d, args.workloads.split(",")) for d in args.definitions.split(",")}
    except SchemaError as exc:
        print(f"stream_probe: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if not torch.cuda.is_available():
        raise SystemExit("stream_probe: needs a CUDA GPU")
    readers = [r for r in args.readers.split(",") if r]
    if not readers or set(readers) - set(READERS):
        raise SystemExit(f"stream_probe: --readers takes {', '.join(READERS)}, got {args.readers!r}")
    from harness.measure.roofline import measure_ceilings

    device = torch.device("cuda")
    ceilings = measure_ceilings(device)
    read_bps = ceilings.memory_bytes_per_s
    flushes = flush_cost([int(x) for x in args.flush_sizes.split(",") if x])
    rows, contiguous = probe_definitions(resolved, readers, [int(b) for b in args.block_n.split(",")],
                                         [int(x) for x in args.stages.split(",")], args.iterations, ceilings, device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"gpu": torch.cuda.get_device_name(device), "torch": torch.__version__, "triton": triton.__version__,
            "read_bytes_per_s": read_bps, "ceilings_method": ceilings.method, "num_warps": NUM_WARPS}
    (out / "stream_probe.json").write_text(json.dumps({"meta": meta, "rows": rows, "contiguous": contiguous,
                                                       "flush": flushes}, indent=1))
    text = summary_markdown(meta, rows, contiguous) + markdown(rows) + flush_markdown(flushes)
    (out / "stream_probe.md").write_text(text)
    print(text)


def best_by(rows: list[dict[str, Any]], *fields: str) -> dict[tuple, dict[str, Any]]:
    """The fastest row per distinct value of ``fields``, in first-seen order."""
    best: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        key = tuple(row.get(f) for f in fields)
        if key not in best or row["us"] < best[key]["us"]:
            best[key] = row
    return best


def summary_markdown(meta: dict[str, Any], rows: list[dict[str, Any]], contiguous: list[dict[str, Any]]) -> str:
    """Per (definition, workload): the floor, the floor's own reader on the same bytes (contiguous, official timer),
    and the best paged read per reader."""
    readers = [r for r in READERS if any(row.get("reader", "pointer") == r for row in rows)]
    lines = [f"# Reading the paged KV cache only ({meta['gpu']}, torch {meta['torch']}, triton {meta['triton']})",
             "", f"Read bandwidth (the floor's): {meta['read_bytes_per_s'] / 1e12:.2f} TB/s. Official timer. "
             "'contiguous': torch.sum of the same bytes as one buffer (the floor's reader at this size). Paged: the "
             "best cut, tile and depth per reader. Each as us (% of floor).", "",
             "| definition | workload | floor us | contiguous | " + " | ".join(f"paged, {r}" for r in readers) + " |",
             "|---|---|---:|---:|" + "---:|" * len(readers)]
    paged = best_by([{**r, "reader": r.get("reader", "pointer")} for r in rows], "definition", "workload", "reader")
    for c in contiguous:
        cells = []
        for reader in readers:
            r = paged.get((c["definition"], c["workload"], reader))
            cells.append(f"{r['us']:.2f} ({r['pct_of_floor']:.0f}%, {r['programs']} programs)" if r else "")
        lines.append(f"| {c['definition']} | {c['workload']} | {c['floor_us']:.2f} | {c['us']:.2f} "
                     f"({c['pct_of_floor']:.0f}%) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n"


def compare_markdown(result: dict[str, Any], probe: dict[str, Any]) -> str:
    """Per workload of one submission: the decode's kernel figure next to the bare reads of the same workload on the
    same card (the floor's reader on the same bytes, and the best paged read of either reader), every % against the
    harness's floor as the submission recorded it, and decode / best paged read: what the decode's own work costs
    over its loads. Workloads the probe did not read show blanks."""
    definition = result["definition"]
    paged = best_by([r for r in probe.get("rows", []) if r["definition"] == definition], "workload")
    contiguous = {c["workload"]: c for c in probe.get("contiguous", []) if c["definition"] == definition}

    def cell(us: Any, floor_ms: Any, extra: str = "") -> str:
        if not us:
            return ""
        pct = f" ({100 * floor_ms * 1e3 / us:.0f}%{extra})" if floor_ms else ""
        return f"{us:.2f}{pct}"

    lines = [f"## {definition}: `{result.get('solution')}` against reading its bytes only "
             f"({probe.get('meta', {}).get('gpu', 'GPU')})", "",
             "Kernel figures on the official timer, us (% of the harness's floor). Contiguous: torch.sum of the "
             "same bytes; paged: the probe's best cut and reader.", "",
             "| workload | decode | contiguous read | paged read | decode / paged read |",
             "|---|---:|---:|---:|---:|"]
    for w in result.get("workloads", []):
        label, floor_ms = w.get("label"), w.get("floor_ms")
        mine = (w.get("kernel_latency_ms") or w.get("latency_ms") or 0) * 1e3
        read = paged.get((label,))
        ratio = f"{mine / read['us']:.2f}x" if read and mine else ""
        lines.append(f"| {label} | {cell(mine, floor_ms)} | "
                     f"{cell((contiguous.get(label) or {}).get('us'), floor_ms)} | "
                     + (cell(read["us"], floor_ms, f", {read.get('reader', 'pointer')}") if read else "")
                     + f" | {ratio} |")
    return "\n".join(lines) + "\n\n"


def markdown(rows: list[dict[str, Any]]) -> str:
    """Per (definition, workload, reader): the best time per chunk size."""
    lines = ["## Every cut", "", "| definition | workload | reader | floor us | chunk tokens | programs | best us | "
             "% of floor | tile, stages |", "|---|---|---|---:|---:|---:|---:|---:|---|"]
    keyed = best_by([{**r, "reader": r.get("reader", "pointer")} for r in rows],
                    "definition", "workload", "reader", "chunk_tokens")
    for (definition, workload, reader, chunk), row in keyed.items():
        lines.append(f"| {definition} | {workload} | {reader} | {row['floor_us']:.2f} | {chunk} | "
                     f"{row['programs']} | {row['us']:.2f} | {row['pct_of_floor']:.1f}% | {row['block_n']}, "
                     f"{row['stages']} |")
    return "\n".join(lines) + "\n"


def flush_markdown(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    lines = ["", f"## What the L2 flush costs the next call (L2 {rows[0]['l2_bytes'] >> 20} MiB; CUDA events, "
             "contiguous torch.sum)", "", "| MiB read | after zeroing (official) us | after a read flush us | "
             "no flush us | zeroing - read flush us |", "|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['mb']} | {r['zero_us']:.2f} | {r['read_us']:.2f} | {r['none_us']:.2f} | "
                     f"{r['zero_minus_read_us']:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
