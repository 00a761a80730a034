"""The inputs of the DSA definitions (op_type ``dsa_paged``) that generic random draws cannot make.

The official workloads take the sparse attention's ``sparse_indices`` and the indexer's ``seq_lens`` /
``block_table`` from captured blobs, which are not shipped; where a blob is absent, these functions draw
stand-ins with the structure the captured tensors have. The indexer's key cache is ``random`` in every
official workload, but the official evaluator never uses a generic int8 fill for it: it draws a bf16
cache and packs it into DeepGEMM's FP8 layout with per-token scales (``pack_fp8_key_cache``); so do we.

Every function draws only from the generator it is given, on the device it is given, so the reference's
and the candidate's workers (each calling them with the same seeded generators) produce identical tensors.
"""

from __future__ import annotations

import math

import torch

FP8_E4M3_MAX = 448.0  # largest finite float8_e4m3fn: the per-token scale maps |k|max onto it
SCALE_BYTES = 4  # one float32 scale per token
MIN_ABS_MAX = 1e-4  # a token of all zeros still gets a finite, positive scale
_PACK_SLICE_PAGES = 2048  # pages packed per step: bounds the bf16/fp32 temporaries at full size


# ---------------------------------------------------------------------------------------------
# Request lengths


def _log_uniform_lengths(count: int, low: int, high: int, gen: torch.Generator, device: torch.device) -> list[int]:
    """``count`` integers in [low, high], log-uniform: decode batches mix short and long contexts."""
    low, high = max(1, low), max(1, high)
    if high <= low:
        return [high] * count
    u = torch.rand(count, generator=gen, device=device, dtype=torch.float64)
    values = torch.exp(math.log(low) + u * (math.log(high + 1) - math.log(low))).floor().clamp(low, high)
    return [int(v) for v in values.tolist()]


def _disjoint_page_lists(pages_per_request: list[int], num_pages: int, gen: torch.Generator,
                         device: torch.device) -> list[torch.Tensor]:
    """Scattered page ids for each request, no page shared between requests (each request owns its KV)."""
    total = sum(pages_per_request)
    if total > num_pages:
        raise ValueError(f"{total} pages needed but the pool holds {num_pages}")
    pool = torch.randperm(num_pages, generator=gen, device=device)
    out, start = [], 0
    for n in pages_per_request:
        out.append(pool[start:start + n])
        start += n
    return out


# ---------------------------------------------------------------------------------------------
# Sparse attention: the top-k indices of each query token


def draw_sparse_indices(num_tokens: int, topk: int, num_pages: int, page_size: int, gen: torch.Generator,
                        device: torch.device) -> torch.Tensor:
    """[num_tokens, topk] int32 token ids (page * page_size + slot), the pattern the indexer produces.

    Each decode token is its own request with a context of L tokens on pages of its own, scattered over the
    pool. Its indices are min(topk, L) distinct tokens of that context in score order (here: a random
    order), then -1 padding at the tail when L < topk. Lengths are log-uniform between 1/8 of topk and 16x
    topk (capped by the pool), so a batch mixes padded and full rows as captured decode batches do.
    """
    out = torch.full((num_tokens, topk), -1, dtype=torch.int32, device=device)
    if num_tokens == 0:
        return out
    pages_each = max(1, num_pages // num_tokens)
    lengths = _log_uniform_lengths(num_tokens, max(1, topk // 8), min(16 * topk, pages_each * page_size), gen, device)
    pages = _disjoint_page_lists([math.ceil(n / page_size) for n in lengths], num_pages, gen, device)
    for t, (length, owned) in enumerate(zip(lengths, pages)):
        tokens = (owned.to(torch.int64)[:, None] * page_size
                  + torch.arange(page_size, device=device, dtype=torch.int64)[None, :]).reshape(-1)[:length]
        chosen = tokens[torch.randperm(length, generator=gen, device=device)[: min(topk, length)]]
        out[t, : chosen.numel()] = chosen.to(torch.int32)
    return out


# ---------------------------------------------------------------------------------------------
# Top-k indexer: sequence lengths and the page table


def draw_seq_lens(batch_size: int, max_num_pages: int, page_size: int, gen: torch.Generator,
                  device: torch.device) -> torch.Tensor:
    """[batch_size] int32 lengths consistent with ``max_num_pages``: the longest request fills exactly
    ``max_num_pages`` pages (the axis is the batch's maximum), the others are uniform in [1, that]."""
    capacity = max_num_pages * page_size
    if batch_size == 0 or capacity == 0:
        return torch.zeros(batch_size, dtype=torch.int32, device=device)
    lengths = torch.randint(1, capacity + 1, (batch_size,), generator=gen, device=device, dtype=torch.int64)
    longest = int(torch.randint(0, batch_size, (1,), generator=gen, device=device))
    lengths[longest] = int(torch.randint((max_num_pages - 1) * page_size + 1, capacity + 1, (1,),
                                         generator=gen, device=device))
    return lengths.to(torch.int32)


def draw_block_table(seq_lens: torch.Tensor, max_num_pages: int, num_pages: int, page_size: int,
                     gen: torch.Generator, device: torch.device) -> torch.Tensor:
    """[batch_size, max_num_pages] int32 page table consistent with ``seq_lens``.

    Row b's first ceil(seq_lens[b] / page_size) entries are distinct pages scattered over the pool, owned by
    no other request while the pool allows it (else pages are drawn per row, still distinct within a row).
    Slots past a request's pages hold 0 (the captured tables' filler is not known; 0 is a valid page, so a
    kernel that reads past its pages reads real memory and the reachability check still catches it).
    """
    batch = int(seq_lens.numel())
    table = torch.zeros((batch, max_num_pages), dtype=torch.int32, device=device)
    needed = [min(max_num_pages, math.ceil(int(n) / page_size)) for n in seq_lens.tolist()]
    if sum(needed) <= num_pages:
        rows = _disjoint_page_lists(needed, num_pages, gen, device)
    else:
        rows = [torch.randperm(num_pages, generator=gen, device=device)[:n] for n in needed]
    for b, row in enumerate(rows):
        table[b, : row.numel()] = row.to(torch.int32)
    return table


# ---------------------------------------------------------------------------------------------
# Top-k indexer: the DeepGEMM-packed FP8 key cache


def pack_fp8_key_cache(keys: torch.Tensor) -> torch.Tensor:
    """bf16 keys [num_pages, page_size, 1, head_dim] -> the packed int8 cache [num_pages, page_size, 1, head_dim + 4].

    Per token: scale = max(|k|max, 1e-4) / 448 (fp32) and k / scale cast to float8_e4m3fn. Per page the
    bytes are all page_size x head_dim FP8 values (token-major) and then the page_size fp32 scales, so the
    [.., head_dim + 4] view is a reshape of the page, not head_dim + 4 contiguous bytes per token.
    """
    num_pages, page_size, heads, head_dim = keys.shape
    if heads != 1:
        raise ValueError(f"the packed key cache holds one head, got {heads}")
    packed = torch.empty((num_pages, page_size * (head_dim + SCALE_BYTES)), dtype=torch.uint8, device=keys.device)
    for start in range(0, num_pages, _PACK_SLICE_PAGES):
        k = keys[start:start + _PACK_SLICE_PAGES, :, 0, :]
        n = k.shape[0]
        scale = k.abs().float().amax(dim=-1, keepdim=True).clamp(min=MIN_ABS_MAX) / FP8_E4M3_MAX
        fp8 = (k.float() * (1.0 / scale)).to(torch.float8_e4m3fn)
        packed[start:start + n, : page_size * head_dim] = fp8.reshape(n, page_size * head_dim).view(torch.uint8)
        packed[start:start + n, page_size * head_dim:] = scale.reshape(n, page_size).contiguous().view(torch.uint8)
    return packed.view(num_pages, page_size, 1, head_dim + SCALE_BYTES).view(torch.int8)


def unpack_fp8_key_cache(packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The packed cache's FP8 values [num_pages, page_size, head_dim] and fp32 scales [num_pages, page_size]."""
    num_pages, page_size, _, with_scale = packed.shape
    head_dim = with_scale - SCALE_BYTES
    flat = packed.view(torch.uint8).reshape(num_pages, page_size * with_scale)
    fp8 = flat[:, : page_size * head_dim].contiguous().view(torch.float8_e4m3fn).view(num_pages, page_size, head_dim)
    scales = flat[:, page_size * head_dim:].contiguous().view(torch.float32).view(num_pages, page_size)
    return fp8, scales


def dequantize_key_cache(packed: torch.Tensor) -> torch.Tensor:
    """fp32 keys [num_pages, page_size, head_dim] = FP8 value x its token's scale (the reference's view)."""
    fp8, scales = unpack_fp8_key_cache(packed)
    return fp8.to(torch.float32) * scales[..., None]


def draw_packed_key_cache(num_pages: int, page_size: int, head_dim: int, gen: torch.Generator,
                          device: torch.device) -> torch.Tensor:
    """A bf16 N(0, 1) key cache drawn page slice by page slice and packed (``pack_fp8_key_cache``)."""
    out = torch.empty((num_pages, page_size, 1, head_dim + SCALE_BYTES), dtype=torch.int8, device=device)
    for start in range(0, num_pages, _PACK_SLICE_PAGES):
        n = min(_PACK_SLICE_PAGES, num_pages - start)
        keys = torch.randn((n, page_size, 1, head_dim), generator=gen, device=device, dtype=torch.bfloat16)
        out[start:start + n] = pack_fp8_key_cache(keys)
    return out
