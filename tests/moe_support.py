"""A tiny MoE definition of op_type ``moe`` (the official reference with its fixed sizes lifted) and a trace set
holding it, small enough for the CPU and the Triton interpreter."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from support import DEFINITIONS

OFFICIAL = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
OFFICIAL_JSON = DEFINITIONS / "definitions" / "moe" / f"{OFFICIAL}.json"
OFFICIAL_JSONL = DEFINITIONS / "workloads" / "moe" / f"{OFFICIAL}.jsonl"
BACKGROUND = DEFINITIONS.parent.parent / "shared" / "background" / "contest"

TINY = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e8_h384_i256"
# 64 experts in 8 groups of 8, 8 local experts (one group, as in the official rank); hidden 3 blocks of 128
# (an odd count, so a transposed scale layout cannot line up), intermediate 2 blocks.
TINY_AXES = {"num_experts": 64, "num_local_experts": 8, "hidden_size": 384, "intermediate_size": 256,
             "gemm1_out_size": 512, "num_hidden_blocks": 3, "num_intermediate_blocks": 2, "num_gemm1_out_blocks": 4}

# The official reference asserts DeepSeek's sizes; the tiny one reads them from the tensors and keeps the
# rest of the text (routing, dequantisation, expert loop) as it is.
_LIFTS = [
    ("    H = 7168\r\n", "    H = hidden_states.shape[1]\r\n"),
    ("    I = 2048\r\n", "    I = gemm2_weights.shape[2]\r\n"),
    ('    assert H == 7168, "hidden_size must be 7168" \r\n', ""),
    ('    assert I == 2048, "intermediate_size must be 2048"\r\n', ""),
    ('    assert E_global == 256, "num_experts must be 256"\r\n', ""),
    ('    assert E_local == 32, "num_local_experts must be 32"\r\n', ""),
]


def tiny_definition() -> dict:
    official = json.loads(OFFICIAL_JSON.read_text())
    reference = official["reference"]
    for old, new in _LIFTS:
        assert reference.count(old) == 1, f"the official reference changed: {old!r} not found once"
        reference = reference.replace(old, new)
    axes = {name: ({**axis, "value": TINY_AXES[name]} if axis["type"] == "const" else axis)
            for name, axis in official["axes"].items()}
    return {**official, "name": TINY, "axes": axes, "reference": reference}


# label -> (seq_len, local_expert_offset)
TINY_WORKLOADS = {"moe_t1": (1, 0), "moe_t7": (7, 8), "moe_t24": (24, 56)}


def tiny_workload(uuid: str, seq_len: int, offset: int) -> dict:
    return {"uuid": uuid, "axes": {"seq_len": seq_len},
            "inputs": {"local_expert_offset": {"type": "scalar", "value": offset},
                       "routed_scaling_factor": {"type": "scalar", "value": 2.5}}}


def make_moe_dataset(root: Path, workloads: dict[str, tuple[int, int]] = TINY_WORKLOADS) -> Path:
    """The tiny definition and its workloads (routing left to the family, as where the blobs are absent)."""
    (root / "definitions" / "moe").mkdir(parents=True, exist_ok=True)
    (root / "definitions" / "moe" / f"{TINY}.json").write_text(json.dumps(tiny_definition(), indent=2))
    shutil.copy(DEFINITIONS / "eval_config.yaml", root / "eval_config.yaml")
    wl_dir = root / "workloads" / "moe"
    wl_dir.mkdir(parents=True, exist_ok=True)
    labels, lines = {}, []
    for i, (label, (seq_len, offset)) in enumerate(workloads.items()):
        uuid = f"00000000-0000-4000-a000-{i:012d}"
        labels[uuid] = label
        lines.append(json.dumps({"definition": TINY, "solution": None, "evaluation": None,
                                 "workload": tiny_workload(uuid, seq_len, offset)}))
    (wl_dir / f"{TINY}.jsonl").write_text("\n".join(lines) + "\n")
    (wl_dir / "labels.json").write_text(json.dumps(labels, indent=2))
    return root
