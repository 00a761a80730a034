"""Test support: a tiny trace set (the shipped GQA definitions with workloads small enough for the
Triton interpreter), archives in tmp folders, and solution builders."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
DEFINITIONS = ROOT / "definitions"
EXAMPLES = ROOT / "examples"
KV8_PS1 = "gqa_paged_decode_h32_kv8_d128_ps1"
KV8_PS64 = "gqa_paged_decode_h32_kv8_d128_ps64"

# label -> (definition, batch_size, num_kv_indices, num_pages)
TINY_WORKLOADS = {
    "tiny_b2_t40": (KV8_PS1, 2, 40, 48),
    "tiny_b3_t96": (KV8_PS1, 3, 96, 96),
    "tiny_ps64_b2_p3": (KV8_PS64, 2, 3, 5),
}


def make_tiny_dataset(root: Path) -> Path:
    """The shipped definitions plus small workloads whose index tensors the harness generates."""
    for d in (KV8_PS1, KV8_PS64):
        src = DEFINITIONS / "definitions" / "gqa_paged" / f"{d}.json"
        (root / "definitions" / "gqa_paged").mkdir(parents=True, exist_ok=True)
        shutil.copy(src, root / "definitions" / "gqa_paged" / src.name)
    shutil.copy(DEFINITIONS / "aliases.yaml", root / "aliases.yaml")
    shutil.copy(DEFINITIONS / "eval_config.yaml", root / "eval_config.yaml")
    wl_dir = root / "workloads" / "gqa_paged"
    wl_dir.mkdir(parents=True, exist_ok=True)
    labels = {}
    lines: dict[str, list[str]] = {}
    for i, (label, (d, batch, n_idx, pages)) in enumerate(TINY_WORKLOADS.items()):
        uuid = f"00000000-0000-4000-8000-{i:012d}"
        labels[uuid] = label
        wl = {"uuid": uuid, "axes": {"batch_size": batch, "num_pages": pages, "len_indptr": batch + 1,
                                     "num_kv_indices": n_idx},
              "inputs": {"sm_scale": {"type": "scalar", "value": 0.08838834764831845}}}
        lines.setdefault(d, []).append(json.dumps({"definition": d, "solution": None, "workload": wl,
                                                   "evaluation": None}))
    for d, ls in lines.items():
        (wl_dir / f"{d}.jsonl").write_text("\n".join(ls) + "\n")
    (wl_dir / "labels.json").write_text(json.dumps(labels, indent=2))
    return root


def solution_dict(source: str, *, definition: str = KV8_PS1, entry: str = "kernel.py::run", name: str = "candidate",
                  language: str = "python", dps: bool = True, extra_sources: dict[str, str] | None = None) -> dict:
    sources = [{"path": entry.split("::")[0], "content": source}]
    sources += [{"path": p, "content": c} for p, c in (extra_sources or {}).items()]
    return {"name": name, "definition": definition, "author": "tests",
            "spec": {"language": language, "target_hardware": ["cpu"], "entry_point": entry, "dependencies": [],
                     "destination_passing_style": dps},
            "sources": sources}


def submit_triton_cli(source: str, name: str, folder: Path, dataset_root: Path, workloads: tuple[str, ...]) -> dict:
    """`harness submit --json` of a one-file Triton solution of KV8_PS1 (kernel.py::run), in a fresh process, into
    an archive in `folder`: the JSON result."""
    import subprocess
    import sys

    (folder / f"{name}.json").write_text(json.dumps(solution_dict(source, name=name, language="triton")))
    (folder / "archive").mkdir()
    picks = [arg for w in workloads for arg in ("-w", w)]
    proc = subprocess.run([sys.executable, "-m", "harness", "submit", str(folder / f"{name}.json"), "--archive",
                           str(folder / "archive"), "--dataset", str(dataset_root), *picks, "--json"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    return json.loads(proc.stdout)


def example_solution(name: str) -> dict:
    path = EXAMPLES / name / "solution.json" if (EXAMPLES / name / "solution.json").exists() else EXAMPLES / name
    return json.loads(Path(path).read_text())


def triton_example(definition: str = KV8_PS1) -> dict:
    return json.loads((EXAMPLES / "triton_gqa_decode" / "solutions" / f"{definition}.json").read_text())


# A value-returning torch implementation of the operator, used as the "honest python candidate" in
# pipeline tests (the harness's job is judging, the candidate's speed is irrelevant here).
TORCH_CANDIDATE = '''
import math
import torch


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    batch, heads, dim = q.shape
    kv_heads = k_cache.shape[2]
    group = heads // kv_heads
    for b in range(batch):
        pages = kv_indices[int(kv_indptr[b]):int(kv_indptr[b + 1])].long()
        if pages.numel() == 0:
            output[b].zero_()
            lse[b].fill_(-math.inf)
            continue
        k = k_cache[pages, 0].float().repeat_interleave(group, dim=1)  # [T, H, D]
        v = v_cache[pages, 0].float().repeat_interleave(group, dim=1)
        logits = torch.einsum("hd,thd->ht", q[b].float(), k) * sm_scale
        lse[b] = torch.logsumexp(logits, -1) / math.log(2.0)
        output[b] = torch.einsum("ht,thd->hd", torch.softmax(logits, -1), v).to(output.dtype)
'''




def paged_decode_reference(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale):
    """Straightforward fp32 softmax per request and query head (natural log, converted to base 2 for lse); the
    template checks' yardstick. Self-contained: its source is also written into subprocess check scripts."""
    import math

    import torch

    batch, heads, dim = q.shape
    _, page_size, kv_heads, _ = k_cache.shape
    group = heads // kv_heads
    output = torch.zeros(batch, heads, dim)
    lse = torch.full((batch, heads), -math.inf)
    for b in range(batch):
        pages = kv_indices[kv_indptr[b]:kv_indptr[b + 1]].long()
        if len(pages) == 0:
            continue
        last = page_size if kv_last_page_len is None else int(kv_last_page_len[b])
        length = (len(pages) - 1) * page_size + last
        keys = k_cache[pages].float().reshape(-1, kv_heads, dim)[:length]
        values = v_cache[pages].float().reshape(-1, kv_heads, dim)[:length]
        for h in range(heads):
            logits = keys[:, h // group] @ q[b, h].float() * sm_scale
            lse[b, h] = torch.logsumexp(logits, 0) / math.log(2.0)
            output[b, h] = torch.softmax(logits, 0) @ values[:, h // group]
    return output, lse


def rendered_gqa_template(tmp_path: Path, template_name: str, **params):
    """The gqa-decode skill's ``template_name`` rendered with its defaults and ``params``, imported as a module (host
    code only runs: its kernels are called by tests that choose their device)."""
    import importlib.util

    from controller.skills import kernel_templates, load_skills, render_skill_template

    gqa = load_skills(ROOT / "skills")["gqa-decode"]
    template = kernel_templates(gqa)[template_name]
    path = tmp_path / f"{template_name.replace('-', '_')}_{abs(hash(tuple(sorted(params.items()))))}.py"
    path.write_text(render_skill_template(gqa, template, {**template.defaults, **params}), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The top of a script for run_interpreted: the repository importable, the worker's interpreter fixes applied.
INTERPRETED_HEAD = """import json, sys
import torch, triton, triton.language as tl
sys.path.insert(0, sys.argv[1])
from harness.sandbox import library_ops, triton_interp
triton_interp.apply()
"""


def run_interpreted(folder: Path, script: str) -> dict:
    """``script`` run as a file (its tracebacks show the kernels' source lines) under Triton's CPU interpreter, with
    the repository's root as its argument (INTERPRETED_HEAD starts one); the JSON object its last line prints."""
    path = folder / "kernels.py"
    path.write_text(script)
    proc = subprocess.run([sys.executable, str(path), str(ROOT)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TRITON_INTERPRET": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
