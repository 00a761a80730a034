"""The gqa-decode skill's CUDA template (cuda-mma-split-kv-fused) on the CPU: the template's own Python (`plan`,
`run`, the arguments the launcher gets) driven by a pure-PyTorch model of the kernel's tiling (tokens on M, the group
on N, warps over 16-token row tiles, chunks, clusters merging through distributed shared memory, the fused last-CTA
merge in base 2) matches a plain softmax reference; and the plan's choice of cluster follows what the GPU holds.

Nothing here runs the CUDA kernel: its correctness and speed on a GPU are benchmarks/results' (run 25)."""

from __future__ import annotations

import ast
import math
import random
from types import SimpleNamespace

import pytest
import torch

from controller.skills import kernel_templates, load_skills, render_skill_template

from support import ROOT, paged_decode_reference


@pytest.fixture(scope="module")
def gqa():
    return load_skills(ROOT / "skills")["gqa-decode"]


@pytest.fixture(scope="module")
def template(gqa):
    return kernel_templates(gqa)["cuda-mma-split-kv-fused"]



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
    # the plan's tensors are on the CPU, where _cluster_fits assumes a fit: ask the stub driver as on a GPU
    module.plan.__globals__["_cluster_fits"] = lambda device, size: module._EXT.max_active_clusters(size) >= 1
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


def test_whether_a_cluster_fits_is_asked_of_the_driver_once_per_device_and_size(gqa, template, monkeypatch):
    """`_cluster_fits` as the plan calls it on a GPU: the extension's max_active_clusters (the driver's
    cudaOccupancyMaxActiveClusters) under that device, once per (device, size); a single CTA always fits."""
    import contextlib

    module = load_template_python(render_skill_template(gqa, template, {**template.defaults, "PAGE_SIZE": 1,
                                                                        "CLUSTER": 16}), [], largest_cluster=8)
    asked = []
    answer = module._EXT.max_active_clusters
    module._EXT.max_active_clusters = lambda size: asked.append(size) or answer(size)
    devices = []
    monkeypatch.setattr(torch.cuda, "device", lambda device: devices.append(device) or contextlib.nullcontext())
    gpu = SimpleNamespace(type="cuda", index=3)
    assert module._cluster_fits(gpu, 8) and not module._cluster_fits(gpu, 16)
    assert module._cluster_fits(gpu, 8) and not module._cluster_fits(gpu, 16)  # cached
    assert module._cluster_fits(gpu, 1) and module._cluster_fits(SimpleNamespace(type="cpu", index=None), 16)
    assert asked == [8, 16] and devices == [gpu, gpu]
