"""What the CPU's library-compute attribution (``harness.sandbox.library_ops.Counter``) costs per ATen operator.

    python benchmarks/attribution_cost.py [--out DIR] [--repeat 2000]

The worker enters the counter around every checked call of a Triton or Python solution on the CPU interpreter, so
each ATen operator the solution's glue dispatches goes through its dispatch mode (counting the elements read, and
marking integer tensors made from values). Cases: small operators (the per-call overhead dominates, as in a
solution's host-side glue), the same on integer bit views (the value-derived marks), and the definition's own
PyTorch reference of ``gqa_paged_decode_h32_kv8_d128_ps1`` on ``uniform_b1_kv512``-sized inputs (a whole call made
of library operators). Each is timed plain and under the counter (per
operator: less the counter's own enter and exit, the first case); prints a table and writes attribution_cost.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.sandbox.library_ops import Counter


def _small_float() -> None:
    x = torch.randn(64)
    y = x * 2.0 + 1.0
    y.sum()


def _small_bits() -> None:
    x = torch.randn(64, dtype=torch.bfloat16)
    b = x.view(torch.int16).to(torch.int32)
    ((b >> 7) & 0xFF).sum()


def _views() -> None:
    x = torch.empty(8, 128)
    x.view(1024).reshape(16, 64)[1:3].transpose(0, 1)


def _gqa_reference() -> None:  # the shape of the definition's reference: one request, 512 tokens, 32 q heads, 8 kv
    q = torch.randn(1, 32, 128, dtype=torch.bfloat16)
    k = torch.randn(512, 8, 128, dtype=torch.bfloat16)
    v = torch.randn(512, 8, 128, dtype=torch.bfloat16)
    qf = q.float().view(8, 4, 128)
    s = torch.einsum("gqd,tgd->gqt", qf, k.float()) * (128 ** -0.5)
    lse = torch.logsumexp(s, dim=-1)
    out = torch.einsum("gqt,tgd->gqd", torch.softmax(s, dim=-1), v.float())
    out.to(torch.bfloat16), lse


def _nothing() -> None:
    pass


CASES = {"nothing (enter and exit)": _nothing, "small float ops": _small_float, "small ops on bf16 bits": _small_bits,
         "views (no compute)": _views, "gqa reference b1 x 512": _gqa_reference}


class _OpsCount(TorchDispatchMode):
    """How many operators a case dispatches (what the counter's mode sees)."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def _ops(fn) -> int:
    with _OpsCount() as mode:
        fn()
    return mode.n


def _block(fn, counted: bool) -> float:
    start = time.perf_counter()
    for _ in range(50):
        if counted:
            with Counter():
                fn()
        else:
            fn()
    return (time.perf_counter() - start) / 50


def _time(fn, repeat: int) -> tuple[float, float]:
    """Median seconds per call, plain and counted, over ``repeat`` calls each in blocks of 50 taken in turn (so a
    busy host slows both alike)."""
    plain, counted = [], []
    for _ in range(max(1, repeat // 50)):
        plain.append(_block(fn, False))
        counted.append(_block(fn, True))
    return statistics.median(plain), statistics.median(counted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = []
    base = None
    for name, fn in CASES.items():
        fn(), fn()
        plain, counted = _time(fn, args.repeat)
        ops = _ops(fn)
        base = counted - plain if base is None else base  # the counter's own enter and exit, once per part of a call
        rows.append({"case": name, "aten_ops": ops, "plain_us": plain * 1e6, "counted_us": counted * 1e6,
                     "added_us_per_op": (counted - plain - base) * 1e6 / ops if ops else None,
                     "ratio": counted / plain})
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'case':26} {'ops':>4} {'plain us':>9} {'counted us':>11} {'x':>6} {'us/op added':>12}")
    for r in rows:
        per_op = "" if r["added_us_per_op"] is None else f"{r['added_us_per_op']:12.1f}"
        print(f"{r['case']:26} {r['aten_ops']:4d} {r['plain_us']:9.1f} {r['counted_us']:11.1f} {r['ratio']:6.2f} "
              f"{per_op}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "attribution_cost.json").write_text(json.dumps(
            {"torch": torch.__version__, "threads": torch.get_num_threads(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
