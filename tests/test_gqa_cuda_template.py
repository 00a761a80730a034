"""The gqa-decode skill's CUDA template (cuda-mma-split-kv-fused): it renders for every definition and for the
default and edge parameters into a solution the harness's static gate and signature check accept; its kernel
compiles for sm_90a and the SASS holds tensor-core HMMA; and the template's own Python (`plan`, `run`, the
arguments the launcher gets) driven by a pure-PyTorch model of the kernel's tiling (tokens on M, the group on N,
warps over 16-token row tiles, chunks, the fused last-CTA merge in base 2) matches a plain softmax reference.

Nothing here runs the CUDA kernel: correctness and speed on a GPU are not checked by these tests."""

from __future__ import annotations

import ast
import math
import random
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from controller.providers.offline import offline_generator
from controller.skills import kernel_templates, load_skills, machine_blocks, render_skill_template
from harness.audits.sass import disassemble, find_disassembler
from harness.audits.static_gate import load_policy, scan_sources
from harness.data.dataset import Dataset
from harness.data.schema import Solution
from harness.sandbox.build import static_signature_problem

from support import DEFINITIONS, ROOT, paged_decode_reference

NAME = "cuda-mma-split-kv-fused"
GQA_DEFINITIONS = [f"gqa_paged_decode_h32_kv{kv}_d128_ps{ps}" for kv in (8, 4) for ps in (1, 64)]
NVCC = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"


@pytest.fixture(scope="module")
def skills():
    return load_skills(ROOT / "skills")


@pytest.fixture(scope="module")
def gqa(skills):
    return skills["gqa-decode"]


@pytest.fixture(scope="module")
def template(gqa):
    return kernel_templates(gqa)[NAME]


def edge_params(template) -> list[dict]:
    """The defaults, then every free placeholder at its smallest and largest value (the others at defaults)."""
    out = [dict(template.defaults)]
    for name, choices in template.placeholders.items():
        if name in template.fixed_by_definition:
            continue
        for value in (choices[0], choices[-1]):
            if value != template.defaults[name]:
                out.append({**template.defaults, name: value})
    out.append({**template.defaults, "BLOCK_N": 128, "CHUNK_TOKENS": 128, "NUM_WARPS": 8, "STAGES": 4,
                "PROGRAMS_PER_SM": 8})  # deepest
    out.append({**template.defaults, "BLOCK_N": 32, "CHUNK_TOKENS": 4096, "NUM_WARPS": 2, "STAGES": 2,
                "PROGRAMS_PER_SM": 1, "CLUSTER": 16, "ONE_REQUEST_SCALARS": 1})
    return out


def string_constant(source: str, name: str) -> str:
    """A module-level string constant of the rendered file, read from its AST (the file is never imported here:
    importing it builds the extension)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"no {name} in the rendered file")


# ------------------------------------------------------------------------------------------ registration


def test_registered_with_placeholders_matching_its_file_and_never_the_naive_start(gqa, template):
    (block,) = machine_blocks(gqa)
    assert template.language == "python" and template.setup == "plan" and template.entry_point == "run"
    assert template.fixed_by_definition == ["PAGE_SIZE"]
    from controller.skills import template_placeholders

    text = (gqa.folder / template.path).read_text(encoding="utf-8")
    assert set(template_placeholders(text)) == set(template.placeholders)
    assert block["naive"]["template"] != NAME
    assert all(point["template"] != NAME for point in block["starting_points"].values())
    for chunk in template.placeholders["CHUNK_TOKENS"]:  # a chunk is whole tiles for every BLOCK_N
        assert all(chunk % block_n == 0 for block_n in template.placeholders["BLOCK_N"])
    assert "cuda-mma-split-kv-fused" in gqa.body and "sm__inst_executed_pipe_tensor_op_hmma" in gqa.body


# ------------------------------------------------------------- rendering, static gate, signature check


@pytest.mark.parametrize("definition", GQA_DEFINITIONS)
def test_renders_for_every_definition_into_a_solution_the_gate_accepts(skills, template, definition):
    generator = offline_generator(skills, definition)
    assert NAME in generator.templates
    naive = generator.naive()
    assert naive["template"] != NAME
    page_size = int(definition.rsplit("ps", 1)[1])
    policy = load_policy(op_type="gqa_paged", definition=definition)
    dataset_definition = Dataset(DEFINITIONS).definition(definition)
    for params in edge_params(template):
        origin = {"template": NAME, "params": generator.complete(NAME, params)}
        assert origin["params"] == params
        solution = Solution.model_validate(generator.render(origin, definition, "cuda_mma", "test", "H200"))
        assert solution.spec.language.value == "python"
        assert solution.spec.entry_point == "kernel.py::run" and solution.spec.setup == "kernel.py::plan"
        (source,) = solution.sources
        assert f"PAGE_SIZE = {page_size}\n" in source.content
        assert "{" + "PAGE_SIZE}" not in source.content
        assert static_signature_problem(solution, dataset_definition) is None
        findings = scan_sources({s.path: s.content for s in solution.sources}, "python", policy)
        assert findings == [], (params, findings)
        kernel = string_constant(source.content, "KERNEL_SRC")
        constants = {"PAGE_SIZE": "kPageSize", "BLOCK_N": "kBlockN", "NUM_WARPS": "kNumWarps", "STAGES": "kStages",
                     "CLUSTER": "kCluster"}
        for name, value in {**params, "PAGE_SIZE": page_size}.items():
            assert f"\n{name} = {value}" in source.content, name  # every placeholder, as the module's constant
            if name in constants:  # compiled in; the chunk size is the plan's, per batch
                assert f"constexpr int {constants[name]} = {value}" in kernel, name
        assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in kernel
        assert "cp.async.cg.shared.global" in kernel and "__threadfence()" in kernel


def test_the_gate_reads_the_embedded_cuda(gqa, template):
    """A positive control: the same file with an environment probe in its kernel text is an error."""
    source = render_skill_template(gqa, template, {**template.defaults, "PAGE_SIZE": 1})
    probed = source.replace("cp_async_commit();\n    }", 'cp_async_commit(); getenv("HOME");\n    }', 1)
    assert probed != source
    findings = scan_sources({"kernel.py": probed}, "python", load_policy(op_type="gqa_paged"))
    assert any(f.rule == "env_probe" and f.severity == "error" for f in findings)


# -------------------------------------------------------------------------------- nvcc sm_90a + SASS

COMPILE_CASES = [
    (1, {}),  # defaults
    (64, {}),
    (64, {"BLOCK_N": 128, "CHUNK_TOKENS": 4096, "NUM_WARPS": 8, "STAGES": 4}),  # STAGES clamped to 3 by smem
    (1, {"BLOCK_N": 32, "CHUNK_TOKENS": 128, "NUM_WARPS": 2, "STAGES": 2}),
    (64, {"BLOCK_N": 64, "STAGES": 3, "CLUSTER": 16, "ONE_REQUEST_SCALARS": 1}),  # the cluster merge
    (1, {"CLUSTER": 2}),
]


@pytest.mark.skipif(not Path(NVCC).exists(), reason="nvcc is not installed")
@pytest.mark.parametrize("page_size, params", COMPILE_CASES,
                         ids=[f"ps{p}-" + "-".join(f"{k}{v}" for k, v in c.items()) for p, c in COMPILE_CASES])
def test_kernel_compiles_for_sm90a_with_hmma_and_no_spills(gqa, template, tmp_path, page_size, params):
    params = {**template.defaults, **params, "PAGE_SIZE": page_size}
    kernel = string_constant(render_skill_template(gqa, template, params), "KERNEL_SRC")
    (tmp_path / "kernel.cu").write_text(kernel)
    cubin = tmp_path / "kernel.cubin"
    completed = subprocess.run([NVCC, "-cubin", "-arch=sm_90a", "-O3", "-std=c++17", "-Xptxas", "-v",
                                "-o", str(cubin), str(tmp_path / "kernel.cu")],
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-4000:]
    assert "0 bytes spill stores, 0 bytes spill loads" in completed.stderr, completed.stderr
    tool = find_disassembler()
    if tool is None:
        pytest.skip("no cuobjdump or nvdisasm to read the SASS")
    kernels, notes = disassemble([cubin], tool)
    (sass,) = [k for k in kernels if k.name == "gqa_mma_split_kv_fused"]
    assert sass.arch.startswith("sm_90")
    ops = sass.bases()
    # QK^T: 8 k-steps of 16 dims; PV: 8 row tiles of 16 dims; one HMMA.16816 each per 16-token row tile
    hmma = {op: n for op, n in sass.opcodes.items() if op.startswith("HMMA")}
    assert sum(hmma.values()) == 16 and all(".16816.F32.BF16" in op for op in hmma), hmma
    assert ops["LDSM"] == 16  # 8 ldmatrix.x4 (K) and 8 ldmatrix.x4.trans (V) per row tile
    assert ops["LDGSTS"] > 0  # cp.async
    assert ops["ATOMG"] >= 2  # the counter's add and reset
    assert ops["HGMMA"] == 0  # mma.sync, not wgmma
    if params["CLUSTER"] > 1:  # two cluster barriers (arrive + wait each) and loads from other CTAs' shared memory
        assert ops["UCGABAR_ARV"] == 2 and ops["UCGABAR_WAIT"] == 2, ops
        assert ops["LD"] >= 3 * params["CLUSTER"], ops  # generic loads: (m, l, acc) from every CTA of the cluster
    else:
        assert not any("CGABAR" in op for op in ops), ops


MERGE_CASES = [(64, {"CLUSTER": 1, "STAGES": 3, "BLOCK_N": 64}), (64, {"CLUSTER": 16, "STAGES": 3, "BLOCK_N": 64}),
               (1, {"CLUSTER": 8, "NUM_WARPS": 8})]
_SASS_OP = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)", re.M)
_FLOAT_MATH = ("FMNMX", "FADD", "FFMA", "FMUL", "MUFU", "FSETP", "FSEL")


def load_bursts(ops: list[str], is_load) -> list[int]:
    """Lengths of the runs of loads that no floating-point instruction interrupts (integer address arithmetic may)."""
    runs, current = [], 0
    for op in ops:
        if is_load(op):
            current += 1
        elif op.startswith(_FLOAT_MATH) and current:
            runs.append(current)
            current = 0
    return runs + ([current] if current else [])


@pytest.mark.skipif(not Path(NVCC).exists(), reason="nvcc is not installed")
@pytest.mark.parametrize("page_size, params", MERGE_CASES, ids=[f"ps{p}-cluster{c['CLUSTER']}" for p, c in MERGE_CASES])
def test_the_merges_have_a_batch_of_loads_in_flight(gqa, template, tmp_path, page_size, params):
    """H100 run 25: a merge written as a chain (load a partial, fold it in, load the next) compiled to loads three at
    a time, each waiting on the last fold: at 64 partials batch 1 took 167 us. Loads first, then the fold: the last
    CTA's merge issues kMergeBatch partials' loads (m, l and the thread's dims) before any floating-point use, and
    the cluster merge every rank's (predicated, no early exit: a `break` in the unrolled loop serialised it too)."""
    params = {**template.defaults, **params, "PAGE_SIZE": page_size}
    kernel = string_constant(render_skill_template(gqa, template, params), "KERNEL_SRC")
    (tmp_path / "kernel.cu").write_text(kernel)
    cubin = tmp_path / "kernel.cubin"
    completed = subprocess.run([NVCC, "-cubin", "-arch=sm_90a", "-O3", "-std=c++17", "-o", str(cubin),
                                str(tmp_path / "kernel.cu")], capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-4000:]
    tool = find_disassembler()
    if tool is None or tool[0] != "cuobjdump":
        pytest.skip("no cuobjdump to list the SASS in order")
    listing = subprocess.run([tool[1], "-sass", str(cubin)], capture_output=True, text=True, timeout=120).stdout
    ops = _SASS_OP.findall(listing)
    counter_add = next(i for i, op in enumerate(ops) if op.startswith("ATOMG.E.ADD"))
    batch = int(re.search(r"kMergeBatch = (\d+)", kernel).group(1))
    last_cta = load_bursts(ops[counter_add:], lambda op: op.startswith("LDG"))
    assert max(last_cta) >= 3 * batch, last_cta  # m, l and at least one dim per partial of the batch
    if params["CLUSTER"] > 1:
        barrier = next(i for i, op in enumerate(ops) if op.startswith("UCGABAR_WAIT"))
        on_chip = load_bursts(ops[barrier:counter_add], lambda op: op == "LD" or op.startswith("LD."))
        assert max(on_chip) >= 3 * params["CLUSTER"] - 3, on_chip  # (m, l, acc) of every rank, near enough


# ------------------------------------------------- the template's Python with a model of its kernel


def kernel_model(module: SimpleNamespace, log: list):
    """A stand-in for the extension's `launch`: the kernel's algorithm in PyTorch, CTA by CTA (with CLUSTER > 1,
    cluster by cluster) in a random order, on exactly the arguments the template passes (plan's work list,
    counters, scratch and batch 1's launch arguments)."""

    def launch(q, k_cache, v_cache, kv_indices, work_request, work_chunk, page_begin, length, chunks, first_slot,
               counters, partial_m, partial_l, partial_acc, output, lse, qk_scale_log2, chunk_tokens, works,
               one_request_len, one_request_page_begin, cluster):
        block_n = module.BLOCK_N
        assert 1 <= cluster <= module.CLUSTER and cluster & (cluster - 1) == 0
        assert chunk_tokens % block_n == 0 and chunk_tokens <= module.CHUNK_TOKENS
        num_qo_heads, num_kv_heads = q.shape[1], k_cache.shape[2]
        group = num_qo_heads // num_kv_heads
        one_request = one_request_len >= 0
        assert one_request == bool(module.ONE_REQUEST_SCALARS and q.shape[0] == 1)
        assert works % cluster == 0  # the grid is whole clusters

        def descriptor(work):  # what the CTA reads (or, for one request, takes from its launch arguments)
            if one_request:
                return 0, work, one_request_page_begin, one_request_len, works, 0
            request = int(work_request[work])
            return (request, int(work_chunk[work]), int(page_begin[request]), int(length[request]),
                    int(chunks[request]), int(first_slot[request]))

        clusters = [(w0, h) for w0 in range(0, works, cluster) for h in range(num_kv_heads)]
        random.Random(len(log)).shuffle(clusters)  # any completion order
        log.append(len(clusters) * cluster)
        for w0, kv_head in clusters:
            heads = slice(kv_head * group, (kv_head + 1) * group)
            parts = []
            for work in range(w0, w0 + cluster):
                request, chunk, first_page, kv_len, n_chunks, slot0 = descriptor(work)
                assert n_chunks % cluster == 0 and chunk == descriptor(w0)[1] + work - w0  # consecutive chunks
                assert chunk % cluster == work % cluster  # the cluster rank is the chunk's place in its cluster
                parts.append(cta_partial(module, q, k_cache, v_cache, kv_indices, qk_scale_log2, chunk_tokens,
                                         request, chunk, first_page, kv_len, kv_head, group))
            request, chunk, _, _, n_chunks, slot0 = descriptor(w0)
            assert all(descriptor(w)[0] == request for w in range(w0, w0 + cluster))  # one request per cluster
            m, l_, acc_t = merge([p[0] for p in parts], [p[1] for p in parts], [p[2] for p in parts])
            merged = n_chunks // cluster
            if merged == 1:
                store_final(output, lse, request, heads, m, l_, acc_t)
                continue
            slot = slot0 + chunk // cluster
            partial_m[slot, heads], partial_l[slot, heads], partial_acc[slot, heads] = m, l_, acc_t.T
            done_before = int(counters[request, kv_head])
            counters[request, kv_head] += cluster  # every CTA of the cluster counts itself
            if done_before != n_chunks - cluster:
                continue
            m, l_, acc = merge([partial_m[slot0 + c, heads] for c in range(merged)],  # in chunk order
                               [partial_l[slot0 + c, heads] for c in range(merged)],
                               [partial_acc[slot0 + c, heads].T for c in range(merged)])
            store_final(output, lse, request, heads, m, l_, acc)
            counters[request, kv_head] = 0

    return launch


def cta_partial(module, q, k_cache, v_cache, kv_indices, qk_scale_log2, chunk_tokens, request, chunk, first_page,
                kv_len, kv_head, group):
    """One CTA's chunk: (m, l, O^T [128, group]) of its tokens, warps over 16-token row tiles, merged over warps."""
    block_n, warps, page = module.BLOCK_N, module.NUM_WARPS, module.PAGE_SIZE
    token_begin = chunk * chunk_tokens
    token_end = min(token_begin + chunk_tokens, kv_len)
    # Q^T as the MMA's B operand: [128 dims, 8 columns], the group padded with zero columns
    q_t = torch.zeros(128, 8)
    q_t[:, :group] = q[request, kv_head * group:(kv_head + 1) * group].float().T
    m = torch.full((warps, 8), -math.inf)
    l = torch.zeros(warps, 8)
    acc = torch.zeros(warps, 128, 8)  # O^T per warp
    tiles = max(0, -(-(token_end - token_begin) // block_n))
    for tile in range(tiles):
        tile_begin = token_begin + tile * block_n
        tokens = torch.arange(tile_begin, tile_begin + block_n)
        valid = tokens < token_end
        pages = kv_indices[first_page + torch.where(valid, tokens, 0) // page].long()
        slots = tokens % page
        k_tile = torch.where(valid[:, None], k_cache[pages, slots, kv_head].float(), 0.0)  # zero-filled
        v_tile = torch.where(valid[:, None], v_cache[pages, slots, kv_head].float(), 0.0)
        for warp in range(warps):
            for row0 in range(warp * 16, block_n, warps * 16):
                if tile_begin + row0 >= token_end:
                    break
                rows = slice(row0, row0 + 16)
                s_t = k_tile[rows] @ q_t  # S^T: 16 tokens (M) x 8 columns (N)
                s_t = torch.where(valid[rows, None], s_t * qk_scale_log2, -math.inf)
                m_new = torch.maximum(m[warp], s_t.max(0).values)
                assert torch.isfinite(m_new).all()
                alpha = torch.exp2(m[warp] - m_new)
                p = torch.exp2(s_t - m_new)
                l[warp] = l[warp] * alpha + p.sum(0)
                p_bf16 = p.to(torch.bfloat16).float()  # P rounded once, for the MMA
                acc[warp] = acc[warp] * alpha + v_tile[rows].T @ p_bf16  # O^T += V^T P^T
                m[warp] = m_new
    big_m, part_l, part_acc = merge(list(m), list(l), list(acc))
    return big_m[:group], part_l[:group], part_acc[:, :group]


def merge(ms, ls, accs):
    """Partials (m, l, O^T [128, columns]) combined in base 2; with no tokens anywhere the reference point is 0."""
    m, l, acc = torch.stack(ms), torch.stack(ls), torch.stack(accs)
    big_m = m.max(0).values
    ref = torch.where(big_m == -math.inf, 0.0, big_m)
    weight = torch.exp2(m - ref)
    return big_m, (weight * l).sum(0), (weight[:, None, :] * acc).sum(0)


def store_final(output, lse, request, heads, m, l, acc_t):
    has = l > 0
    output[request, heads] = torch.where(has[:, None], acc_t.T / torch.where(has, l, 1.0)[:, None], 0.0).to(
        output.dtype)
    lse[request, heads] = torch.where(has, torch.where(m == -math.inf, 0.0, m) + torch.log2(torch.where(has, l, 1.0)),
                                      -math.inf)


def load_template_python(source: str, log: list, sms: int = 132, largest_cluster: int = 16) -> SimpleNamespace:
    """The rendered module's Python without the load_inline build: its `_EXT` is the kernel model, on a GPU of
    ``sms`` SMs that holds clusters of up to ``largest_cluster`` CTAs."""
    tree = ast.parse(source)
    tree.body = [n for n in tree.body
                 if not (isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "_EXT" for t in n.targets))
                 and not (isinstance(n, ast.ImportFrom) and n.module == "torch.utils.cpp_extension")]
    namespace: dict = {}
    exec(compile(tree, "<cuda template python>", "exec"), namespace)
    module = SimpleNamespace(**{k: v for k, v in namespace.items() if not k.startswith("__")})
    namespace["_EXT"] = SimpleNamespace(launch=kernel_model(module, log),
                                        max_active_clusters=lambda size: 8 if size <= largest_cluster else 0)
    namespace["_sm_count"] = lambda device: sms
    namespace["_cluster_fits"] = lambda device, size: namespace["_EXT"].max_active_clusters(size) >= 1
    return SimpleNamespace(**{k: v for k, v in namespace.items() if not k.startswith("__")})


reference = paged_decode_reference


def failures(candidate, expected, atol=1e-2, rtol=1e-2):
    candidate = candidate.float()
    matched_inf = torch.isneginf(candidate) & torch.isneginf(expected)
    error = (candidate - expected).abs()
    bad = (error > atol) & (error / (expected.abs() + 1e-8) > rtol)
    return int(((bad | ~torch.isfinite(candidate)) & ~matched_inf).sum())


MODEL_CASES = [
    # (kv_heads, page_size, lengths, params, SMs, the plan's chunk, its cluster): the chunk is whole tiles, enough
    # for PROGRAMS_PER_SM CTAs per SM over the batch's tiles x KV heads, at most CHUNK_TOKENS
    (8, 1, [300, 0, 5, 17], {"BLOCK_N": 32, "CHUNK_TOKENS": 128, "NUM_WARPS": 4, "STAGES": 2, "PROGRAMS_PER_SM": 2},
     1, 128, 1),  # 96 tiles for 2 CTAs: the largest chunk; idle warps
    (4, 1, [129, 0, 1], {"BLOCK_N": 64, "CHUNK_TOKENS": 128, "NUM_WARPS": 2, "STAGES": 3, "PROGRAMS_PER_SM": 1},
     132, 64, 1),  # 16 tiles for 132 CTAs: one tile each
    (8, 64, [130, 0, 64, 1], {"BLOCK_N": 64, "CHUNK_TOKENS": 128, "NUM_WARPS": 4, "STAGES": 3, "PROGRAMS_PER_SM": 2},
     1, 128, 1),  # partial pages
    (4, 64, [200, 63, 0, 385], {"BLOCK_N": 128, "CHUNK_TOKENS": 128, "NUM_WARPS": 8, "STAGES": 4,
                                "PROGRAMS_PER_SM": 8}, 132, 128, 1),
    (4, 64, [600, 7], {"BLOCK_N": 32, "CHUNK_TOKENS": 256, "NUM_WARPS": 2, "STAGES": 2, "PROGRAMS_PER_SM": 1},
     16, 160, 1),  # 80 tiles for 16 CTAs: 5-tile chunks, a size no placeholder names
    (8, 1, [0, 0], {"BLOCK_N": 64, "CHUNK_TOKENS": 512, "NUM_WARPS": 4, "STAGES": 3, "PROGRAMS_PER_SM": 2},
     132, 64, 1),  # only empty requests
    # CLUSTER: every request padded to whole clusters, the longest spread evenly over its clusters' CTAs
    (4, 64, [1000], {"BLOCK_N": 64, "CHUNK_TOKENS": 512, "NUM_WARPS": 4, "STAGES": 3, "PROGRAMS_PER_SM": 2,
                     "CLUSTER": 16, "ONE_REQUEST_SCALARS": 1}, 132, 64, 16),  # batch 1: 16 CTAs, one merge on chip
    (8, 1, [300, 0, 5, 17], {"BLOCK_N": 32, "CHUNK_TOKENS": 128, "NUM_WARPS": 4, "STAGES": 2, "PROGRAMS_PER_SM": 2,
                            "CLUSTER": 4, "ONE_REQUEST_SCALARS": 1}, 1, 96, 4),  # 300 tokens: 4 CTAs of 3 tiles
    (4, 64, [2000, 63, 0, 385], {"BLOCK_N": 32, "CHUNK_TOKENS": 128, "NUM_WARPS": 2, "STAGES": 2,
                                 "PROGRAMS_PER_SM": 2, "CLUSTER": 2}, 8, 128, 2),  # clusters, then the counter merge
    (8, 1, [0], {"BLOCK_N": 64, "CHUNK_TOKENS": 512, "NUM_WARPS": 4, "STAGES": 3, "PROGRAMS_PER_SM": 2,
                 "CLUSTER": 8, "ONE_REQUEST_SCALARS": 1}, 132, 64, 1),  # an empty batch of one: no cluster
    (8, 64, [4095], {"BLOCK_N": 64, "CHUNK_TOKENS": 512, "NUM_WARPS": 4, "STAGES": 3, "PROGRAMS_PER_SM": 2,
                     "CLUSTER": 16, "ONE_REQUEST_SCALARS": 0}, 132, 128, 16),  # 2 clusters of 16, then scratch
    (4, 64, [300, 300, 300], {"BLOCK_N": 64, "CHUNK_TOKENS": 128, "NUM_WARPS": 4, "STAGES": 2, "PROGRAMS_PER_SM": 8,
                              "CLUSTER": 16}, 132, 64, 8),  # 5 chunks a request: the batch's cluster is 8
    (8, 1, [100, 50], {"BLOCK_N": 64, "CHUNK_TOKENS": 512, "NUM_WARPS": 4, "STAGES": 2, "PROGRAMS_PER_SM": 1,
                       "CLUSTER": 16}, 1, 512, 1),  # one chunk a request: no cluster
]


@pytest.mark.parametrize("kv_heads, page_size, lengths, params, sms, chunk_tokens, cluster", MODEL_CASES,
                         ids=[f"kv{c[0]}-ps{c[1]}-{'_'.join(map(str, c[2]))}-sm{c[4]}" for c in MODEL_CASES])
def test_template_python_with_kernel_model_matches_softmax_reference(gqa, template, kv_heads, page_size, lengths,
                                                                       params, sms, chunk_tokens, cluster):
    params = {**template.defaults, **params}
    source = render_skill_template(gqa, template, {**params, "PAGE_SIZE": page_size})
    log: list = []
    module = load_template_python(source, log, sms)
    torch.manual_seed(sum(lengths) + kv_heads)
    pages_per_request = [-(-n // page_size) for n in lengths]
    pool = sum(pages_per_request) + 7
    kv_indices = torch.randperm(pool)[: sum(pages_per_request)].to(torch.int32)  # scattered pages
    kv_indptr = torch.tensor([0] + torch.tensor(pages_per_request).cumsum(0).tolist(), dtype=torch.int32)
    last_page_len = torch.tensor([n - (p - 1) * page_size if p else 0 for n, p in zip(lengths, pages_per_request)],
                                 dtype=torch.int32)
    q = (torch.randn(len(lengths), 32, 128) * 2).to(torch.bfloat16)  # sharper softmax than unit scale
    k_cache = torch.randn(pool, page_size, kv_heads, 128).to(torch.bfloat16)
    v_cache = torch.randn(pool, page_size, kv_heads, 128).to(torch.bfloat16)
    sm_scale = 1.0 / math.sqrt(128)
    inputs = [q, k_cache, v_cache, kv_indptr, kv_indices] + ([last_page_len] if page_size > 1 else []) + [sm_scale]
    state = module.plan(*inputs)
    assert state["chunk_tokens"] == chunk_tokens
    assert state["cluster"] == cluster
    expected_works = sum(-(-max(1, -(-n // chunk_tokens)) // cluster) * cluster for n in lengths)
    assert state["works"] == expected_works
    expected_output, expected_lse = reference(q, k_cache, v_cache, kv_indptr, kv_indices,
                                              last_page_len if page_size > 1 else None, sm_scale)
    for call in range(2):  # the plan's state is reused: counters must come back to 0
        output = torch.full((len(lengths), 32, 128), float("nan")).to(torch.bfloat16)
        lse = torch.full((len(lengths), 32), float("nan"))
        assert module.run(*inputs, output, lse, state) is None
        assert failures(output, expected_output) == 0, call
        assert failures(lse, expected_lse) == 0, call
        finite = torch.isfinite(expected_lse)
        assert torch.allclose(lse[finite], expected_lse[finite], atol=1e-4, rtol=1e-5)  # fp32 throughout
        for b, n in enumerate(lengths):
            if n == 0:
                assert (output[b] == 0).all() and torch.isneginf(lse[b]).all()
        assert int(state["counter"].abs().sum()) == 0
    assert log == [expected_works * kv_heads] * 2  # one launch per call, a CTA per (chunk, KV head)
    one_request = params.get("ONE_REQUEST_SCALARS", 0) and len(lengths) == 1
    assert state["one_request_len"] == (lengths[0] if one_request else -1)


@pytest.mark.parametrize("largest, cluster", [(16, 16), (8, 8), (2, 2), (1, 1)])
def test_the_plan_shrinks_the_cluster_to_what_the_gpu_holds(gqa, template, largest, cluster):
    """A cluster of 16 needs a GPC with 16 SMs free for the kernel (Hopper's non-portable size); where the driver
    says none fits (cudaOccupancyMaxActiveClusters 0), the plan halves the cluster until one does, down to none,
    and the result is still right."""
    params = {**template.defaults, "BLOCK_N": 64, "CHUNK_TOKENS": 512, "STAGES": 3, "PROGRAMS_PER_SM": 2,
              "CLUSTER": 16, "ONE_REQUEST_SCALARS": 1}
    log: list = []
    module = load_template_python(render_skill_template(gqa, template, {**params, "PAGE_SIZE": 64}), log,
                                  largest_cluster=largest)
    torch.manual_seed(largest)
    lengths = [1000]
    pages = -(-lengths[0] // 64)
    q = torch.randn(1, 32, 128).to(torch.bfloat16)
    k_cache = torch.randn(pages + 3, 64, 4, 128).to(torch.bfloat16)
    v_cache = torch.randn(pages + 3, 64, 4, 128).to(torch.bfloat16)
    kv_indices = torch.randperm(pages + 3)[:pages].to(torch.int32)
    kv_indptr = torch.tensor([0, pages], dtype=torch.int32)
    last = torch.tensor([lengths[0] - (pages - 1) * 64], dtype=torch.int32)
    inputs = [q, k_cache, v_cache, kv_indptr, kv_indices, last, 0.088]
    state = module.plan(*inputs)
    assert state["cluster"] == cluster and state["works"] % cluster == 0
    output = torch.empty(1, 32, 128, dtype=torch.bfloat16)
    lse = torch.empty(1, 32)
    module.run(*inputs, output, lse, state)
    expected_output, expected_lse = reference(q, k_cache, v_cache, kv_indptr, kv_indices, last, 0.088)
    assert failures(output, expected_output) == 0 and failures(lse, expected_lse) == 0


@pytest.mark.parametrize("page_size", [1, 64])
def test_batch_one_with_its_pages_past_other_entries_of_kv_indices(gqa, template, page_size):
    """ONE_REQUEST_SCALARS passes the request's first page (kv_indptr[0]) as a launch argument: a page table whose
    request starts past other entries (a slice of a larger table) must be read from there, with clusters too."""
    params = {**template.defaults, "BLOCK_N": 32, "CHUNK_TOKENS": 128, "STAGES": 2, "PROGRAMS_PER_SM": 2,
              "CLUSTER": 4, "ONE_REQUEST_SCALARS": 1}
    log: list = []
    module = load_template_python(render_skill_template(gqa, template, {**params, "PAGE_SIZE": page_size}), log)
    torch.manual_seed(page_size)
    tokens, offset = 700, 9
    pages = -(-tokens // page_size)
    pool = pages + offset + 4
    kv_indices = torch.randperm(pool).to(torch.int32)[: offset + pages]  # the first `offset` entries: another's
    kv_indptr = torch.tensor([offset, offset + pages], dtype=torch.int32)
    q = (torch.randn(1, 32, 128) * 2).to(torch.bfloat16)
    k_cache = torch.randn(pool, page_size, 4, 128).to(torch.bfloat16)
    v_cache = torch.randn(pool, page_size, 4, 128).to(torch.bfloat16)
    last = [torch.tensor([tokens - (pages - 1) * page_size], dtype=torch.int32)] if page_size > 1 else []
    inputs = [q, k_cache, v_cache, kv_indptr, kv_indices, *last, 0.088]
    state = module.plan(*inputs)
    assert state["one_request_len"] == tokens and state["one_request_page_begin"] == offset
    assert state["cluster"] == 4
    output = torch.empty(1, 32, 128, dtype=torch.bfloat16)
    lse = torch.empty(1, 32)
    module.run(*inputs, output, lse, state)
    expected_output, expected_lse = reference(q, k_cache, v_cache, kv_indptr, kv_indices,
                                              last[0] if last else None, 0.088)
    assert failures(output, expected_output) == 0 and failures(lse, expected_lse) == 0
