"""Checks of the gdn templates on Triton's CPU interpreter against the official references, run as a script by
tests/test_gdn_examples.py (in a fresh process with TRITON_INTERPRET=1, which triton reads when imported); writes
its findings as JSON.

    TRITON_INTERPRET=1 python tests/gdn_interpreter_checks.py OUT.json

- both templates at two parameter sets each: failing elements of `output` and `new_state` under the contest's
  element rule, on the cases the harness's workloads do not reach (no initial state, a zero-length sequence
  among several, a zero scale meaning 1/sqrt(128));
- the chunked prefill template at two parameter sets (two chunk sizes) on one packed batch whose lengths
  are single tokens, shorter than, not multiples of and longer than the chunk, with and without a state;
- classic slips of the honest kernels (state read as [K, V], v head h paired with q/k head h % 4, softplus
  dropped, an empty sequence keeping its input state): each must fail the rule.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import tempfile
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

from controller.skills.templates import render_template  # noqa: E402
from gdn_support import DECODE, PREFILL, SKILL, reference  # noqa: E402
from harness.sandbox import triton_interp  # noqa: E402

DECODE_TMPL = SKILL / "references" / "triton_gdn_decode.py.tmpl"
PREFILL_TMPL = SKILL / "references" / "triton_gdn_prefill.py.tmpl"
CHUNKED_TMPL = SKILL / "references" / "triton_gdn_prefill_chunked.py.tmpl"
# large V blocks keep the interpreter's program count (and the test's time) down
CHUNKED_PARAMS = [{"CHUNK": 16, "BLOCK_V": 64, "NUM_WARPS": 4}, {"CHUNK": 32, "BLOCK_V": 128, "NUM_WARPS": 8}]
PARAMS = {DECODE: [{"BLOCK_V": 32, "NUM_WARPS": 4}, {"BLOCK_V": 128, "NUM_WARPS": 8}],
          PREFILL: [{"BLOCK_V": 32, "NUM_WARPS": 4, "NUM_STAGES": 2},
                    {"BLOCK_V": 128, "NUM_WARPS": 8, "NUM_STAGES": 1}]}
SLIPS = {
    "state read as [K, V]": (PREFILL, "offs_v[:, None]) * K + offs_k[None, :]",
                             "offs_k[None, :]) * K + offs_v[:, None]"),
    "v head h on q/k head h % 4": (DECODE, "hk = h // GROUP", "hk = h % (HV // GROUP)"),
    "softplus dropped": (DECODE, "* softplus)", "* x)"),
    "empty sequence keeps its state": (PREFILL, "s = tl.where(eos > bos, s, 0.0)", "s = s"),
}


def _load(source: str, name: str, folder: Path):
    path = folder / f"crucible_gdn_{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"crucible_gdn_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _failing(x: torch.Tensor, y: torch.Tensor) -> int:
    """Elements failing the contest's rule (atol = rtol = 1e-2); a non-finite output fails all."""
    x, y = x.float(), y.float()
    if not torch.isfinite(x).all():
        return x.numel()
    err = (x - y).abs()
    return int(((err > 1e-2) & (err / (y.abs() + 1e-8) > 1e-2)).sum())


def _unit(x: torch.Tensor) -> torch.Tensor:
    return (x / x.norm(dim=-1, keepdim=True)).bfloat16()  # Qwen3-Next's keys are unit-norm


def decode_inputs(batch: int, with_state: bool, scale: float) -> list:
    g = torch.Generator().manual_seed(batch)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    state = r(batch, 8, 128, 128) * 0.3 if with_state else None
    return [_unit(r(batch, 1, 4, 128)), _unit(r(batch, 1, 4, 128)), r(batch, 1, 8, 128).bfloat16(), state,
            r(8) * 0.5, r(batch, 1, 8).bfloat16(), r(8) * 0.5, r(batch, 1, 8).bfloat16(), scale]


def prefill_inputs(lengths: list[int], with_state: bool, scale: float) -> list:
    g = torch.Generator().manual_seed(sum(lengths))
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    t, n = sum(lengths), len(lengths)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int64)
    state = r(n, 8, 128, 128) * 0.3 if with_state else None
    return [_unit(r(t, 4, 128)), _unit(r(t, 4, 128)), r(t, 8, 128).bfloat16(), state, r(8) * 0.5,
            r(t, 8).bfloat16(), r(8) * 0.5, r(t, 8).bfloat16(), cu, scale]


CASES = {DECODE: {"b2 state": (decode_inputs, (2, True, 1 / math.sqrt(128))),
                  "b2 no state, scale 0": (decode_inputs, (2, False, 0.0))},
         PREFILL: {"lengths 3,0,4": (prefill_inputs, ([3, 0, 4], True, 1 / math.sqrt(128))),
                   "lengths 5 no state": (prefill_inputs, ([5], False, 1 / math.sqrt(128)))}}
# a zero scale here too: the chunked kernel must resolve it the reference's way
CHUNKED_CASES = {"lengths 1,5,0,17,33 state": (prefill_inputs, ([1, 5, 0, 17, 33], True, 0.0)),
                 "lengths 1,5,0,17,33 no state": (prefill_inputs, ([1, 5, 0, 17, 33], False, 1 / math.sqrt(128)))}


def judge(module, definition: str, case: str, cases: dict | None = None) -> list[int]:
    make, args = (cases or CASES[definition])[case]
    inputs = make(*args)
    want_out, want_state = reference(definition)(*inputs)
    out, new_state = torch.full_like(want_out, float("nan")), torch.full_like(want_state, float("nan"))
    before = None if inputs[3] is None else inputs[3].clone()
    module.run(*inputs, out, new_state)
    mutated = before is not None and not torch.equal(before, inputs[3])
    return [_failing(out, want_out), _failing(new_state, want_state), int(mutated)]


def main(out_path: str) -> None:
    # the harness's own interpreter fixes: without them tl.dot on bf16 operands (the chunked kernel's K K^T and
    # Q K^T) multiplies raw bit patterns; the worker applies the same ones to every candidate
    triton_interp.apply()
    found: dict = {"honest": {}, "chunked": {}, "slips": {}}
    folder = Path(tempfile.mkdtemp(prefix="gdn_checks_"))
    for definition, template in ((DECODE, DECODE_TMPL), (PREFILL, PREFILL_TMPL)):
        for i, params in enumerate(PARAMS[definition]):
            module = _load(render_template(template.read_text(), params), f"{definition[:8]}_{i}", folder)
            for case in CASES[definition]:
                found["honest"][f"{definition} {params} {case}"] = judge(module, definition, case)
    for i, params in enumerate(CHUNKED_PARAMS):
        module = _load(render_template(CHUNKED_TMPL.read_text(), params), f"chunked_{i}", folder)
        for case in CHUNKED_CASES:
            found["chunked"][f"{params} {case}"] = judge(module, PREFILL, case, CHUNKED_CASES)
    for i, (slip, (definition, old, new)) in enumerate(SLIPS.items()):
        template = DECODE_TMPL if definition == DECODE else PREFILL_TMPL
        text = render_template(template.read_text(), PARAMS[definition][0])
        assert old in text, slip
        module = _load(text.replace(old, new), f"slip{i}", folder)
        found["slips"][slip] = sum(sum(judge(module, definition, case)[:2]) for case in CASES[definition])
    Path(out_path).write_text(json.dumps(found, indent=2))


if __name__ == "__main__":
    main(sys.argv[1])
