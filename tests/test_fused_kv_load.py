"""The fused split-KV template's ``KV_LOAD`` (skills/gqa-decode): when a launch takes the page indices a step ahead
and when it loads K/V tiles as TMA boxes, decided on the host per call from the rendered constants and the caches
(``_tma_tile`` and the launch's constexprs), table-driven on CPU tensors."""

from __future__ import annotations

import pytest

from support import rendered_gqa_template

torch = pytest.importorskip("torch")
pytest.importorskip("triton")


def rendered(tmp_path, **params):
    return rendered_gqa_template(tmp_path, "triton-split-kv-fused", **params)


def caches(page_size, pages=6, kv_heads=4, offset=0, expanded=False):
    """K and V caches [pages, page_size, kv_heads, 128] (bf16); ``offset`` elements into a larger buffer;
    ``expanded``: one page broadcast over all (stride 0)."""
    if expanded:
        k = torch.zeros(1, page_size, kv_heads, 128, dtype=torch.bfloat16).expand(pages, -1, -1, -1)
        return k, k
    numel = pages * page_size * kv_heads * 128
    flat = torch.zeros(numel + offset, dtype=torch.bfloat16)
    k = flat[offset:].view(pages, page_size, kv_heads, 128)
    return k, k.clone()


def test_a_broadcast_cache_is_not_a_box(tmp_path):
    module = rendered(tmp_path, PAGE_SIZE=64, KV_LOAD=2)
    assert module._tma_tile(*caches(64, expanded=True)) == 0 and module._tma_tile(*caches(64)) == 64


@pytest.mark.parametrize("params, page_size, offset, tile", [
    ({"KV_LOAD": 2}, 64, 0, 64),                      # BLOCK_N 128 over pages of 64: a box per page, two per block
    ({"KV_LOAD": 2, "BLOCK_N": 32}, 64, 0, 32),       # boxes of a block, two per page
    ({"KV_LOAD": 2, "BLOCK_N": 16}, 16, 0, 16),       # pages of 16: a box per page and block
    ({"KV_LOAD": 2}, 1, 0, 0),                        # page size 1: a box would be one token
    ({"KV_LOAD": 2}, 8, 0, 0),                        # under tl.dot's 16 rows
    ({"KV_LOAD": 2}, 64, 1, 0),                       # a base 2 bytes off 16-byte alignment: no descriptor
    ({"KV_LOAD": 2, "USE_DOT": 1}, 64, 0, 0),         # tf32 path: not a tensor-core bf16 tile
    ({"KV_LOAD": 1}, 64, 0, 0),                       # a step ahead with pointer loads
    ({"KV_LOAD": 0}, 64, 0, 0),
])
def test_when_a_tile_is_a_tma_box(tmp_path, params, page_size, offset, tile):
    # the skill renders pages of 1 and 64; the decision reads the caches' own page size
    module = rendered(tmp_path, PAGE_SIZE=page_size if page_size in (1, 64) else 64, **params)
    assert module._tma_tile(*caches(page_size, offset=offset)) == tile


@pytest.mark.parametrize("params, ahead, tma, step", [
    ({"KV_LOAD": 0}, False, False, 128),
    ({"KV_LOAD": 1}, True, False, 128),
    ({"KV_LOAD": 2}, True, True, 64),
    ({"KV_LOAD": 2, "USE_DOT": 3}, False, False, 128),  # the ahead path is the bf16 tensor-core one only
])
def test_the_launch_takes_the_path_the_host_decided(tmp_path, params, ahead, tma, step):
    module = rendered(tmp_path, PAGE_SIZE=64, **params)
    k, v = caches(64)
    q = torch.zeros(2, 16, 128, dtype=torch.bfloat16)
    indptr, indices = torch.tensor([0, 3, 6], dtype=torch.int32), torch.arange(6, dtype=torch.int32)
    last = torch.tensor([64, 10], dtype=torch.int32)
    state = module._plan(q, k, v, indptr, indices, last, 0.088)
    output, lse = torch.empty_like(q), torch.empty(2, 16)
    _, args, kwargs = module._kernel_call(q, k, v, indices, 0.088, output, lse, state)
    assert (kwargs["AHEAD"], kwargs["TMA"], kwargs["STEP"]) == (ahead, tma, step)
    descriptors = args[4:6]
    assert all(d is None for d in descriptors) != tma
    if tma:  # one box: `step` tokens of one page and one KV head, the whole head
        assert [list(d.block_shape) for d in descriptors] == [[1, step, 1, 128]] * 2
        assert descriptors[0].base is k and descriptors[1].base is v
