#!/usr/bin/env python3
"""Regenerate the GQA paged-decode family of the trace set rooted at definitions/.

Writes, for the four definitions gqa_paged_decode_h32_kv{8,4}_d128_ps{1,64}:

  definitions/definitions/gqa_paged/<definition>.json          Definition (FlashInfer Trace schema)
  definitions/workloads/gqa_paged/<definition>.jsonl           workload traces, one per line
  definitions/blob/workloads/gqa_paged/<definition>/<definition>_<uuid>.safetensors
                                                                kv_indptr (+ kv_last_page_len for ps64)
  definitions/workloads/gqa_paged/labels.json                  uuid -> readable label (our sidecar)

Everything is a pure function of the constants below, so two runs give byte-identical files.
aliases.yaml and eval_config.yaml are hand-maintained data shared with other families; this
script does not write them.

Usage: python scripts/make_gqa_workloads.py [--root DIR]   (default: <repo>/definitions)
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
from safetensors.numpy import save_file

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE_SET_ROOT = REPO_ROOT / "definitions"

OP_TYPE = "gqa_paged"
NUM_QO_HEADS = 32
HEAD_DIM = 128
SM_SCALE = 1.0 / math.sqrt(HEAD_DIM)

# (num_kv_heads, page_size) of each shipped definition, in the order aliases list them.
DEFINITION_VARIANTS: List[Tuple[int, int]] = [(8, 1), (8, 64), (4, 1), (4, 64)]

# Which model each head layout comes from (32 q heads / 4 kv heads is Llama-3.1-70B's 64/8
# split over two tensor-parallel ranks).
MODEL_TAGS: Dict[int, Tuple[str, str, str]] = {
    8: ("model:llama-3.1-8b", "tp:1", "Head layout of Llama-3.1-8B."),
    4: ("model:llama-3.1-70b", "tp:2", "Head layout of Llama-3.1-70B at tensor parallel 2."),
}

# uuid5 namespace for workload ids; changing it renames every workload and blob.
WORKLOAD_UUID_NAMESPACE = uuid.UUID("6c1f3c52-0d3e-5a1e-9d0b-6a8f3f2c9e41")

UNIFORM_BATCH_SIZES = [1, 16, 64, 256]
UNIFORM_KV_LENGTHS = [512, 2048, 8192]
SKEWED_BATCH_SIZE = 64
SKEWED_MIN_LEN, SKEWED_MAX_LEN = 64, 16384
# random.Random(seed).random() is guaranteed stable across Python versions (numpy's Generator
# methods are not), so the skewed lengths never drift.
SKEWED_SEED = 20260214
ONE_LONG_LEN, MANY_SHORT_COUNT, MANY_SHORT_LEN = 32768, 31, 256


def definition_name(num_kv_heads: int, page_size: int) -> str:
    return f"gqa_paged_decode_h{NUM_QO_HEADS}_kv{num_kv_heads}_d{HEAD_DIM}_ps{page_size}"


# ---------------------------------------------------------------------------------------------
# Reference implementation (one template for all four definitions)
# ---------------------------------------------------------------------------------------------

REFERENCE_TEMPLATE = '''import math

import torch

# Requests are padded to the longest one and processed in chunks of at most an eighth of the
# batch's tokens (at least one request, at most MAX_PADDED_TOKENS_PER_CHUNK padded tokens), so the
# gathered fp32 K/V stay a fraction of the KV cache itself, even in float64 (the harness's oracle).
MAX_PADDED_TOKENS_PER_CHUNK = 1 << 20


@torch.no_grad()
def run({signature}):
    batch_size, num_qo_heads, head_dim = q.shape
    num_pages, page_size, num_kv_heads, _ = k_cache.shape

    # Check constants
    assert num_qo_heads == {num_qo_heads}
    assert num_kv_heads == {num_kv_heads}
    assert head_dim == {head_dim}
    assert page_size == {page_size}

    # Check constraints
    assert kv_indptr.shape[0] == batch_size + 1
    assert kv_indices.shape[0] == kv_indptr[-1].item()
{extra_checks}
    device = q.device
    gqa_ratio = num_qo_heads // num_kv_heads
    output = torch.zeros(
        (batch_size, num_qo_heads, head_dim), dtype=torch.bfloat16, device=device
    )
    lse = torch.full(
        (batch_size, num_qo_heads), -float("inf"), dtype=torch.float32, device=device
    )

    indptr = kv_indptr.to(device=device, dtype=torch.int64)
    page_ids = kv_indices.to(device=device, dtype=torch.int64)
    pages_per_request = indptr[1:] - indptr[:-1]
{seq_len_code}
    max_len = int(seq_lens.max().item()) if batch_size > 0 else 0
    if max_len == 0:
        # no tokens anywhere: every row keeps output 0 and lse -inf
        return output, lse

    # Token-major views of the caches: slot s of page p is row p * page_size + s.
    k_rows = k_cache.reshape(num_pages * page_size, num_kv_heads, head_dim)
    v_rows = v_cache.reshape(num_pages * page_size, num_kv_heads, head_dim)
    # q head h shares kv head h // gqa_ratio: [B, KV, G, D]
    q_grouped = q.to(torch.float32).reshape(batch_size, num_kv_heads, gqa_ratio, head_dim)
    last_table_pos = page_ids.shape[0] - 1

    padded_budget = min(MAX_PADDED_TOKENS_PER_CHUNK, max(max_len, int(seq_lens.sum().item()) // 8))
    chunk_batch = max(1, padded_budget // max_len)
    for start in range(0, batch_size, chunk_batch):
        end = min(start + chunk_batch, batch_size)
        chunk_lens = seq_lens[start:end]
        chunk_max_len = int(chunk_lens.max().item())
        if chunk_max_len == 0:
            continue
        positions = torch.arange(chunk_max_len, device=device)
        valid = positions[None, :] < chunk_lens[:, None]  # [C, L]
        # Token l of request b lives in page kv_indices[kv_indptr[b] + l // page_size],
        # slot l % page_size. Padding positions are clamped onto a real table entry and
        # masked out below, so the gather never leaves the cache.
        table_pos = (indptr[start:end, None] + positions[None, :] // page_size).clamp(
            max=last_table_pos
        )
        rows = page_ids[table_pos] * page_size + positions[None, :] % page_size
        k = k_rows[rows].to(torch.float32)  # [C, L, KV, D]
        # zero padded V rows: an unused slot may hold NaN garbage, and 0 * NaN is NaN
        v = v_rows[rows].to(torch.float32).masked_fill_(~valid[:, :, None, None], 0.0)

        logits = torch.einsum("bkgd,blkd->bkgl", q_grouped[start:end], k) * sm_scale
        logits = logits.masked_fill(~valid[:, None, None, :], -float("inf"))
        chunk_lse = torch.logsumexp(logits, dim=-1) / math.log(2.0)  # base-2, [C, KV, G]
        lse[start:end] = chunk_lse.reshape(end - start, num_qo_heads)

        probs = torch.softmax(logits, dim=-1)
        # an empty request has an all -inf row whose softmax is NaN; its output stays 0
        nonempty = (chunk_lens > 0)[:, None, None, None]
        probs = torch.where(nonempty, probs, torch.zeros_like(probs))
        chunk_out = torch.einsum("bkgl,blkd->bkgd", probs, v)
        output[start:end] = chunk_out.reshape(end - start, num_qo_heads, head_dim).to(
            torch.bfloat16
        )

    return output, lse
'''

SEQ_LENS_PS1 = """    # one token per page
    seq_lens = pages_per_request
"""

SEQ_LENS_PAGED = """    # a request with n > 0 pages holds n - 1 full pages plus kv_last_page_len tokens
    last_page_len = kv_last_page_len.to(device=device, dtype=torch.int64)
    seq_lens = torch.where(
        pages_per_request > 0,
        (pages_per_request - 1) * page_size + last_page_len,
        torch.zeros_like(pages_per_request),
    )
"""

EXTRA_CHECKS_PAGED = """    assert kv_last_page_len.shape[0] == batch_size
    assert bool(((kv_last_page_len >= 1) & (kv_last_page_len <= page_size)).all())
"""


def reference_source(num_kv_heads: int, page_size: int) -> str:
    paged = page_size > 1
    params = ["q", "k_cache", "v_cache", "kv_indptr", "kv_indices"]
    if paged:
        params.append("kv_last_page_len")
    params.append("sm_scale")
    return REFERENCE_TEMPLATE.format(
        signature=", ".join(params),
        num_qo_heads=NUM_QO_HEADS,
        num_kv_heads=num_kv_heads,
        head_dim=HEAD_DIM,
        page_size=page_size,
        extra_checks=EXTRA_CHECKS_PAGED if paged else "",
        seq_len_code=SEQ_LENS_PAGED if paged else SEQ_LENS_PS1,
    )


# ---------------------------------------------------------------------------------------------
# Definition JSON
# ---------------------------------------------------------------------------------------------


def build_definition(num_kv_heads: int, page_size: int) -> dict:
    paged = page_size > 1
    model_tag, tp_tag, model_sentence = MODEL_TAGS[num_kv_heads]
    description = (
        f"Batched Grouped Query Attention decode with a paged KV cache (NHD pages of "
        f"{page_size} token{'s' if paged else ''}). {model_sentence}"
    )
    if paged:
        description += (
            " A request with n pages holds (n - 1) * page_size + kv_last_page_len tokens."
        )
    description += " Empty requests give output 0 and lse -inf."

    constraints = [
        "len_indptr == batch_size + 1",
        "num_kv_indices == kv_indptr[-1].item()",
    ]
    if paged:
        constraints.append(
            "bool(((kv_last_page_len >= 1) & (kv_last_page_len <= page_size)).all())"
        )

    page_shape = ["num_pages", "page_size", "num_kv_heads", "head_dim"]
    inputs = {
        "q": {"shape": ["batch_size", "num_qo_heads", "head_dim"], "dtype": "bfloat16"},
        "k_cache": {"shape": page_shape, "dtype": "bfloat16"},
        "v_cache": {"shape": page_shape, "dtype": "bfloat16"},
        "kv_indptr": {
            "shape": ["len_indptr"],
            "dtype": "int32",
            "description": "KV page offsets for each sequence.",
        },
        "kv_indices": {
            "shape": ["num_kv_indices"],
            "dtype": "int32",
            "description": "Page IDs for KV cache lookups.",
        },
    }
    if paged:
        inputs["kv_last_page_len"] = {
            "shape": ["batch_size"],
            "dtype": "int32",
            "description": "Number of valid tokens in each request's last page (1..page_size).",
        }
    inputs["sm_scale"] = {
        "shape": None,
        "dtype": "float32",
        "description": "Softmax scale. Default is (1/sqrt(head_dim)).",
    }

    return {
        "name": definition_name(num_kv_heads, page_size),
        "description": description,
        "op_type": OP_TYPE,
        "tags": [
            "stage:decode",
            model_tag,
            "fi_api:flashinfer.decode.BatchDecodeWithPagedKVCacheWrapper",
            tp_tag,
            "layout:nhd",
        ],
        "axes": {
            "batch_size": {"type": "var", "description": "Total number of query tokens."},
            "num_qo_heads": {"type": "const", "value": NUM_QO_HEADS},
            "num_kv_heads": {"type": "const", "value": num_kv_heads},
            "head_dim": {"type": "const", "value": HEAD_DIM},
            "num_pages": {"type": "var"},
            "page_size": {"type": "const", "value": page_size},
            "len_indptr": {"type": "var", "description": "Length of kv_indptr array."},
            "num_kv_indices": {
                "type": "var",
                "description": "Total number of KV page indices.",
            },
        },
        "constraints": constraints,
        "inputs": inputs,
        "outputs": {
            "output": {
                "shape": ["batch_size", "num_qo_heads", "head_dim"],
                "dtype": "bfloat16",
            },
            "lse": {
                "shape": ["batch_size", "num_qo_heads"],
                "dtype": "float32",
                "description": "The 2-based log-sum-exp of attention logits.",
            },
        },
        "reference": reference_source(num_kv_heads, page_size),
    }


# ---------------------------------------------------------------------------------------------
# Workloads
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchShape:
    label: str
    seq_lens: Tuple[int, ...]  # KV tokens per request


def skewed_seq_lens() -> Tuple[int, ...]:
    rng = random.Random(SKEWED_SEED)
    log_lo, log_hi = math.log(SKEWED_MIN_LEN), math.log(SKEWED_MAX_LEN)
    lens = []
    for _ in range(SKEWED_BATCH_SIZE):
        kv_len = round(math.exp(log_lo + rng.random() * (log_hi - log_lo)))
        lens.append(min(SKEWED_MAX_LEN, max(SKEWED_MIN_LEN, kv_len)))
    return tuple(lens)


def batch_shapes() -> List[BatchShape]:
    shapes = [
        BatchShape(f"uniform_b{batch}_kv{kv_len}", (kv_len,) * batch)
        for batch in UNIFORM_BATCH_SIZES
        for kv_len in UNIFORM_KV_LENGTHS
    ]
    shapes.append(BatchShape(f"skewed_b{SKEWED_BATCH_SIZE}", skewed_seq_lens()))
    shapes.append(
        BatchShape(
            f"one_long_{ONE_LONG_LEN // 1024}k_{MANY_SHORT_COUNT}x{MANY_SHORT_LEN}",
            (ONE_LONG_LEN,) + (MANY_SHORT_LEN,) * MANY_SHORT_COUNT,
        )
    )
    return shapes


def page_layout(seq_lens: Tuple[int, ...], page_size: int) -> Tuple[np.ndarray, np.ndarray]:
    """kv_indptr (int32, len batch+1) and kv_last_page_len (int32, len batch) for seq_lens."""
    lens = np.asarray(seq_lens, dtype=np.int64)
    pages = (lens + page_size - 1) // page_size
    kv_indptr = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(pages, out=kv_indptr[1:])
    last_page_len = lens - (pages - 1) * page_size
    return kv_indptr.astype(np.int32), last_page_len.astype(np.int32)


def workload_uuid(def_name: str, label: str) -> str:
    return str(uuid.uuid5(WORKLOAD_UUID_NAMESPACE, f"{def_name}/{label}"))


def blob_relpath(def_name: str, workload_id: str) -> str:
    return f"blob/workloads/{OP_TYPE}/{def_name}/{def_name}_{workload_id}.safetensors"


def build_workloads(
    num_kv_heads: int, page_size: int
) -> List[Tuple[dict, str, Dict[str, np.ndarray]]]:
    """[(workload trace dict, label, blob tensors)] in shipping order."""
    def_name = definition_name(num_kv_heads, page_size)
    paged = page_size > 1
    result = []
    for shape in batch_shapes():
        workload_id = workload_uuid(def_name, shape.label)
        kv_indptr, last_page_len = page_layout(shape.seq_lens, page_size)
        num_kv_indices = int(kv_indptr[-1])
        blob_path = blob_relpath(def_name, workload_id)
        inputs = {
            "q": {"type": "random"},
            "k_cache": {"type": "random"},
            "v_cache": {"type": "random"},
            "kv_indptr": {"type": "safetensors", "path": blob_path, "tensor_key": "kv_indptr"},
            # the harness draws a random permutation of the page pool for kv_indices
            "kv_indices": {"type": "random"},
        }
        blob = {"kv_indptr": kv_indptr}
        if paged:
            inputs["kv_last_page_len"] = {
                "type": "safetensors",
                "path": blob_path,
                "tensor_key": "kv_last_page_len",
            }
            blob["kv_last_page_len"] = last_page_len
        inputs["sm_scale"] = {"type": "scalar", "value": SM_SCALE}
        trace = {
            "definition": def_name,
            "solution": None,
            "workload": {
                "uuid": workload_id,
                "axes": {
                    "batch_size": len(shape.seq_lens),
                    # the pool is exactly the pages in use, scattered by the kv_indices permutation
                    "num_pages": num_kv_indices,
                    "len_indptr": len(shape.seq_lens) + 1,
                    "num_kv_indices": num_kv_indices,
                },
                "inputs": inputs,
            },
            "evaluation": None,
        }
        result.append((trace, shape.label, blob))
    return result


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


def generate(root: Path) -> List[Path]:
    """Write the family under root; returns every path written."""
    written: List[Path] = []
    labels: Dict[str, str] = {}
    for num_kv_heads, page_size in DEFINITION_VARIANTS:
        def_name = definition_name(num_kv_heads, page_size)

        def_path = root / "definitions" / OP_TYPE / f"{def_name}.json"
        write_text(def_path, json.dumps(build_definition(num_kv_heads, page_size), indent=2) + "\n")
        written.append(def_path)

        # drop blobs of workloads that no longer exist so stale files never linger
        blob_dir = root / "blob" / "workloads" / OP_TYPE / def_name
        if blob_dir.exists():
            shutil.rmtree(blob_dir)
        blob_dir.mkdir(parents=True)

        lines = []
        for trace, label, blob in build_workloads(num_kv_heads, page_size):
            workload_id = trace["workload"]["uuid"]
            blob_path = root / blob_relpath(def_name, workload_id)
            save_file(blob, str(blob_path))
            blob_path.chmod(0o644)  # safetensors writes 0600; sandboxed workers read blobs as another user
            written.append(blob_path)
            lines.append(json.dumps(trace))
            labels[workload_id] = label

        jsonl_path = root / "workloads" / OP_TYPE / f"{def_name}.jsonl"
        write_text(jsonl_path, "\n".join(lines) + "\n")
        written.append(jsonl_path)

    labels_path = root / "workloads" / OP_TYPE / "labels.json"
    write_text(labels_path, json.dumps(labels, indent=2) + "\n")
    written.append(labels_path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=DEFAULT_TRACE_SET_ROOT, help="trace-set root")
    args = parser.parse_args()
    written = generate(args.root)
    print(f"wrote {len(written)} files under {args.root}")


if __name__ == "__main__":
    main()
