"""Checks of the MoE template on Triton's CPU interpreter, run as a script by tests/test_moe_example.py (in a
fresh process with TRITON_INTERPRET=1, which triton reads when imported); writes its findings as JSON.

    TRITON_INTERPRET=1 python tests/moe_interpreter_checks.py OUT.json

- classic slips of the honest kernel on a tiny workload: the low-bit rule's statuses;
- the example on the contest's generic input recipe (scales N(0, 1), negative ones included);
- the precision audit's verdict on the example's FP8 arithmetic and on an e5m2 intermediate.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "skills" / "moe-fp8" / "references" / "triton_moe_fp8.py.tmpl"
EXAMPLE_PARAMS = {"BLOCK_M": 16, "BLOCK_N": 128, "NUM_WARPS": 4, "NUM_STAGES": 3, "DOT": "fp8"}
# One classic slip each: (old text, new text) applied to the honest kernel.
SLIPS = {
    "activation scale read as [T, H/128]": ("kb * num_tokens + tok", "tok * (H // QB) + kb"),
    "silu on the first half": ("acc_up * (acc_gate / (1.0 + tl.exp(-acc_gate)))",
                               "acc_gate * (acc_up / (1.0 + tl.exp(-acc_up)))"),
    "routing bias ignored": ("biased = s + tl.load(bias_ptr + offs).to(tl.float32)", "biased = s"),
    "GEMM2 weight scale ignored": ("acc += p * tl.load(s_base + kb)", "acc += p"),
}
# The intermediate re-quantised to e5m2 instead of e4m3: a cheaper precision than the definition's.
E5M2 = [("amax / 448.0", "amax / 57344.0"), (".to(tl.float8e4nv)", ".to(tl.float8e5)"),
        ("p = tl.dot(cq, tl.trans(w))", "p = tl.dot(cq.to(tl.float32), tl.trans(w.to(tl.float32)))")]
SLIP_WORKLOADS = ((40, 16),)


def _load(source: str, name: str, folder: Path):
    path = folder / f"crucible_moe_{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"crucible_moe_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(out_path: str) -> None:
    assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1 before triton is imported"
    import torch
    import yaml

    from controller.skills.templates import render_template
    from harness.sandbox import triton_interp
    from harness.audits.thresholds import policy_thresholds
    from harness.audits.verdicts import AuditConfig, precision_verdict
    from harness.measure.correctness import Tolerance
    from harness.families.moe import MoeFamily
    from harness.data.inputs import generate_inputs
    from harness.data.schema import Definition, Workload
    from harness.measure.oracle import _float64_import
    from moe_support import TINY, tiny_definition, tiny_workload

    triton_interp.apply()  # the fixes the workers apply: fp8 and bf16 casts, bf16 dots
    tiny = Definition.model_validate(tiny_definition())
    namespace: dict = {}
    exec(compile(tiny.reference, "<tiny moe reference>", "exec"), namespace)
    reference = namespace["run"]
    low_bit = Tolerance(atol=1.0, rtol=0.3, required_matched_ratio=0.9)
    folder = Path(tempfile.mkdtemp(prefix="crucible_moe_"))

    def inputs_for(definition, seq_len, offset, seed):
        return generate_inputs(definition, Workload.model_validate(tiny_workload("c", seq_len, offset)), seed=seed)

    def run(module, inputs):
        t, h = inputs["hidden_states"].shape
        out = torch.full((t, h), float("nan"), dtype=torch.bfloat16)
        module.run(*inputs.values(), out)
        return out

    def judge(module, inputs):
        return MoeFamily().compare(tiny, {"output": run(module, inputs)}, {"output": reference(**inputs)}, low_bit)

    found: dict = {"slips": {}, "precision": {}}
    honest_fp32 = render_template(TEMPLATE.read_text(), {**EXAMPLE_PARAMS, "DOT": "fp32"})
    cases = {"honest": honest_fp32}
    for slip, (old, new) in SLIPS.items():
        assert honest_fp32.count(old) == 1, slip
        cases[slip] = honest_fp32.replace(old, new)
    for i, (name, source) in enumerate(cases.items()):
        module = _load(source, f"case{i}", folder)
        statuses = [judge(module, inputs_for(tiny, t, off, seed=t)).status.value for t, off in SLIP_WORKLOADS]
        if name == "honest":
            found["honest"] = statuses
        else:
            found["slips"][name] = statuses

    example = (ROOT / "examples" / "moe_fp8" / "kernel.py").read_text()
    module = _load(example, "example", folder)
    generic = Definition.model_validate({**tiny_definition(), "op_type": "moe_generic_recipe"})  # no family
    inputs = inputs_for(generic, 24, 8, seed=2)
    result = judge(module, inputs)
    found["generic"] = {"status": result.status.value, "matched_ratio": result.matched_ratio,
                        "negative_scales": bool(float(inputs["hidden_states_scale"].min()) < 0)}

    policy = yaml.safe_load((ROOT / "definitions" / "audit_policy.yaml").read_text())
    config = AuditConfig(**policy_thresholds(policy, TINY, "moe"))
    oracle_ns = {"__builtins__": {**(__builtins__ if isinstance(__builtins__, dict) else __builtins__.__dict__),
                                  "__import__": _float64_import}}
    exec(compile(tiny.reference, "<tiny moe oracle>", "exec"), oracle_ns)
    e5m2 = example
    for old, new in E5M2:
        assert e5m2.count(old) == 1, old
        e5m2 = e5m2.replace(old, new)
    inputs = inputs_for(tiny, 40, 16, seed=4)
    wide = {k: v.to(torch.float64) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
            for k, v in inputs.items()}
    oracle = oracle_ns["run"](**wide).to(torch.float64)
    ref = reference(**inputs)
    for variant, source in (("fp8", example), ("e5m2", e5m2)):
        got = run(_load(source, f"precision_{variant}", folder), inputs)
        correct = MoeFamily().compare(tiny, {"output": got}, {"output": ref}, low_bit)
        errors = {"output": ((got.double() - oracle).abs().mean().item(), (ref.double() - oracle).abs().mean().item(),
                             oracle.abs().mean().item())}
        found["precision"][variant] = {"correct": correct.status.value, "errors": errors["output"],
                                       "verdict": precision_verdict(errors, config).to_json()}
    Path(out_path).write_text(json.dumps(found, indent=2))


if __name__ == "__main__":
    main(sys.argv[1])
