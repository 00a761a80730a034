"""Triton autotuning keyed by a value read from the inputs' content, on a GPU: every never-seen input tunes again,
which the official timer (one input, repeated) never pays. The replay audit fails it and names the tuning
(harness.sandbox.triton_tuning). Runs only where a GPU is visible (marker `gpu`)."""

from __future__ import annotations

import pytest

from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.data.schema import Solution
from harness.pipeline.evaluate import Session, SubmitOptions
from support import KV8_PS1, triton_example

pytestmark = pytest.mark.gpu

# The example's kernel does the work; a small autotuned kernel beside it is keyed by a number read from q.
TUNED_ON_CONTENT = '''

_example_run = run


@triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64}),
                          triton.Config({"BLOCK": 128})], key=["salt"])
@triton.jit
def _zero_scratch(x_ptr, salt, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32))


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    salt = int(q[0, 0, 0].float().item() * 1e4)  # from the content: every new input, a new key
    scratch = torch.empty(128, device=q.device, dtype=torch.float32)
    _zero_scratch[(1,)](scratch, salt)
    _example_run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse)
'''


def test_autotuning_keyed_by_content_fails_the_replay_audit_and_is_named(tmp_path):
    solution = triton_example(KV8_PS1)
    solution["name"] = "tuned_on_content"
    source = solution["sources"][0]["content"]
    assert "import triton.language as tl" in source and "import torch" in source
    solution["sources"][0]["content"] = source + TUNED_ON_CONTENT
    with Session(Dataset(), Archive(tmp_path / "a"),
                 SubmitOptions(workloads=["uniform_b1_kv512"], baselines=False)) as session:
        result = session.submit(Solution.model_validate(solution))
    w = result.workloads[0]
    assert w.status == "PASSED", w.message  # right answers: the tuning is a cost, not an error
    replay = next(a for a in w.audits if a.name == "fresh_input_timing")
    assert not replay.passed, replay.detail
    assert "autotuner tuned" in replay.detail and "key the tuning on shapes" in replay.detail, replay.detail
    assert result.promotion_blockers
