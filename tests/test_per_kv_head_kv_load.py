"""The per-KV-head template's ``KV_LOAD_MIN_PROGRAMS_PER_SM`` (skills/gqa-decode): the K/V load path a call takes is
decided on the host from the batch's programs (requests x KV heads) per SM. Looking ahead with TMA boxes won on an
H200 where 256 requests x 8 KV heads filled the GPU and lost 13% at 64 requests, so one kernel takes each path where
it wins. Table-driven on CPU tensors (a CPU device counts 132 SMs); both paths of one rendered kernel against the
reference on the interpreter: tests/test_skill_templates_interpreter.py."""

from __future__ import annotations

import pytest

from support import rendered_gqa_template

torch = pytest.importorskip("torch")
pytest.importorskip("triton")


def rendered(tmp_path, **params):
    return rendered_gqa_template(tmp_path, "triton-per-kv-head", **params)


def launch(module, batch, kv_heads):
    """(AHEAD, TMA, STEP, descriptors present, grid) of a call on ``batch`` requests of two pages each."""
    pages = 2 * batch
    k = torch.zeros(pages, 64, kv_heads, 128, dtype=torch.bfloat16)
    v = torch.zeros_like(k)
    q = torch.zeros(batch, 32, 128, dtype=torch.bfloat16)
    indptr = torch.arange(0, pages + 1, 2, dtype=torch.int32)
    indices = torch.arange(pages, dtype=torch.int32)
    last = torch.full((batch,), 64, dtype=torch.int32)
    output, lse = torch.empty_like(q), torch.empty(batch, 32)
    grid, args, kwargs = module._kernel_call(q, k, v, indptr, indices, last, 0.088, output, lse)
    return kwargs["AHEAD"], kwargs["TMA"], kwargs["STEP"], args[3] is not None and args[4] is not None, grid


@pytest.mark.parametrize("params, batch, kv_heads, expected", [
    # threshold 0: KV_LOAD on every batch
    ({"KV_LOAD": 2}, 1, 8, (True, True, 64, True)),
    ({"KV_LOAD": 0}, 256, 8, (False, False, 64, False)),
    # 12 per SM = 1584 programs on 132 SMs: 256 x 8 = 2048 take the boxes; 64 x 8 = 512 and 256 x 4 = 1024 do not
    ({"KV_LOAD": 2, "KV_LOAD_MIN_PROGRAMS_PER_SM": 12}, 256, 8, (True, True, 64, True)),
    ({"KV_LOAD": 2, "KV_LOAD_MIN_PROGRAMS_PER_SM": 12}, 64, 8, (False, False, 64, False)),
    ({"KV_LOAD": 2, "KV_LOAD_MIN_PROGRAMS_PER_SM": 12}, 256, 4, (False, False, 64, False)),
    ({"KV_LOAD": 2, "KV_LOAD_MIN_PROGRAMS_PER_SM": 12}, 198, 8, (True, True, 64, True)),    # 1584: at the threshold
    ({"KV_LOAD": 2, "KV_LOAD_MIN_PROGRAMS_PER_SM": 12}, 197, 8, (False, False, 64, False)),  # 1576: one request short
    # a step ahead with pointer loads, above and below
    ({"KV_LOAD": 1, "KV_LOAD_MIN_PROGRAMS_PER_SM": 1}, 64, 4, (True, False, 64, False)),
    ({"KV_LOAD": 1, "KV_LOAD_MIN_PROGRAMS_PER_SM": 1}, 1, 4, (False, False, 64, False)),
    # BLOCK_N 128 over pages of 64: a box per page when the boxes are taken, one 128-token step when not
    ({"KV_LOAD": 2, "BLOCK_N": 128, "KV_LOAD_MIN_PROGRAMS_PER_SM": 2}, 64, 8, (True, True, 64, True)),
    ({"KV_LOAD": 2, "BLOCK_N": 128, "KV_LOAD_MIN_PROGRAMS_PER_SM": 2}, 16, 8, (False, False, 128, False)),
])
def test_the_load_path_follows_the_programs_per_sm(tmp_path, params, batch, kv_heads, expected):
    module = rendered(tmp_path, PAGE_SIZE=64, **params)
    *path, grid = launch(module, batch, kv_heads)
    assert tuple(path) == expected
    assert grid == (batch, kv_heads)  # one program per request and KV head either way
