"""Tiny DSA definitions for CPU tests: the official JSON with small constants (reference asserts edited to match),
and a trace-set folder holding them with a few workloads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from harness.data.schema import Definition

ROOT = Path(__file__).resolve().parent.parent
OFFICIAL = ROOT.parent / "shared" / "background" / "contest"
DATASET = ROOT / "definitions"
ATTENTION = "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64"
INDEXER = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"
TINY_ATTENTION = "dsa_sparse_attention_tiny_topk64"
TINY_INDEXER = "dsa_topk_indexer_tiny_topk96"
TINY_ATTENTION_TOPK = 64
TINY_INDEXER_TOPK = 96

# label -> (definition, var axes)
TINY_WORKLOADS = {
    "attn_t3_p8": (TINY_ATTENTION, {"num_tokens": 3, "num_pages": 8}),
    "attn_t1_p2": (TINY_ATTENTION, {"num_tokens": 1, "num_pages": 2}),
    "idx_b3_m3": (TINY_INDEXER, {"batch_size": 3, "max_num_pages": 3, "num_pages": 12}),
    "idx_b2_m1": (TINY_INDEXER, {"batch_size": 2, "max_num_pages": 1, "num_pages": 4}),
}


def official_json(name: str) -> dict:
    return json.loads((DATASET / "definitions" / "dsa_paged" / f"{name}.json").read_text())


def tiny_definition_json(kind: str) -> dict:
    """The official definition with topk made small; heads, head dims and page size stay official."""
    if kind == "attention":
        d = official_json(ATTENTION)
        d["name"], topk = TINY_ATTENTION, TINY_ATTENTION_TOPK
        d["reference"] = d["reference"].replace("assert topk == 2048", f"assert topk == {topk}")
    else:
        d = official_json(INDEXER)
        d["name"], topk = TINY_INDEXER, TINY_INDEXER_TOPK
        d["reference"] = d["reference"].replace("topk = 2048", f"topk = {topk}")
    assert str(topk) in d["reference"]
    d["axes"]["topk"]["value"] = topk
    return d


def tiny_definition(kind: str) -> Definition:
    return Definition.model_validate(tiny_definition_json(kind))


def make_tiny_dsa_dataset(root: Path) -> Path:
    """A trace set with the two tiny definitions, their workloads (the official input kinds: the index tensors
    as blobs this folder does not hold, so the family draws them) and the shipped presets."""
    (root / "definitions" / "dsa_paged").mkdir(parents=True, exist_ok=True)
    for kind in ("attention", "indexer"):
        d = tiny_definition_json(kind)
        (root / "definitions" / "dsa_paged" / f"{d['name']}.json").write_text(json.dumps(d, indent=2))
    for name in ("eval_config.yaml", "aliases.yaml", "audit_policy.yaml"):
        shutil.copy(DATASET / name, root / name)
    wl_dir = root / "workloads" / "dsa_paged"
    wl_dir.mkdir(parents=True, exist_ok=True)
    labels, lines = {}, {}
    for i, (label, (definition, axes)) in enumerate(TINY_WORKLOADS.items()):
        uuid = f"00000000-0000-4000-a000-{i:012d}"
        labels[uuid] = label
        blob = f"blob/workloads/dsa_paged/{definition}/{definition}_{uuid}.safetensors"
        if definition == TINY_ATTENTION:
            inputs = {"q_nope": {"type": "random"}, "q_pe": {"type": "random"}, "ckv_cache": {"type": "random"},
                      "kpe_cache": {"type": "random"},
                      "sparse_indices": {"type": "safetensors", "path": blob, "tensor_key": "sparse_indices"},
                      "sm_scale": {"type": "scalar", "value": 0.1352337788608801}}
        else:
            inputs = {"q_index_fp8": {"type": "random"}, "k_index_cache_fp8": {"type": "random"},
                      "weights": {"type": "random"},
                      "seq_lens": {"type": "safetensors", "path": blob, "tensor_key": "seq_lens"},
                      "block_table": {"type": "safetensors", "path": blob, "tensor_key": "block_table"}}
        record = {"definition": definition, "solution": None, "evaluation": None,
                  "workload": {"uuid": uuid, "axes": axes, "inputs": inputs}}
        lines.setdefault(definition, []).append(json.dumps(record))
    for definition, ls in lines.items():
        (wl_dir / f"{definition}.jsonl").write_text("\n".join(ls) + "\n")
    (wl_dir / "labels.json").write_text(json.dumps(labels, indent=2))
    return root
