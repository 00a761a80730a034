"""The CPU host's size rule (workloads too large for the Triton interpreter are SKIPPED unrun) and a Python solution
that builds a native extension: it is built first, so where its extension cannot run on this host (a CUDA one) the
workload says that, not "too slow for the Triton interpreter" (red team round 7, c02: a MoE solution whose main.py
builds its CUDA with torch.utils.cpp_extension.load was SKIPPED for its 1344 MiB of inputs, its build never tried)."""

from __future__ import annotations

import pytest
import torch

from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.data.options import SubmitOptions
from harness.data.schema import Solution
from harness.pipeline.evaluate import Session, builds_extension, cpu_size_rule

from support import KV8_PS1, TORCH_CANDIDATE, solution_dict

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the size rule is a CPU host's")

LOAD_INLINE_CUDA = '''
from torch.utils.cpp_extension import load_inline

_ext = load_inline(name="scale_ext", cpp_sources="void scale(torch::Tensor x);",
                   cuda_sources="""
#include <torch/extension.h>
__global__ void k(float* x) { x[threadIdx.x] *= 2.f; }
void scale(torch::Tensor x) { k<<<1, 32>>>(x.data_ptr<float>()); }
""", functions=["scale"])
'''
TOO_SLOW = "too slow to check without a GPU"


def solution(source: str, **kw) -> Solution:
    return Solution.model_validate(solution_dict(source, **kw))


def test_the_size_rule_waits_for_the_build_of_an_extension():
    dataset = Dataset()
    definition = dataset.definition(KV8_PS1)
    workload = dataset.workloads_for(KV8_PS1)[0]
    tiny = SubmitOptions(cpu_max_input_mib=0.0)
    plain, native = solution(TORCH_CANDIDATE), solution(LOAD_INLINE_CUDA + TORCH_CANDIDATE)
    assert not builds_extension(plain) and builds_extension(native)
    deferred, skip = cpu_size_rule(plain, definition, workload, tiny, has_gpu=False)
    assert deferred is None and TOO_SLOW in skip
    deferred, skip = cpu_size_rule(native, definition, workload, tiny, has_gpu=False)
    assert TOO_SLOW in deferred and skip is None
    cuda = solution("__global__ void k() {}\n", entry="kernel.cu::run", language="cuda")
    assert cpu_size_rule(cuda, definition, workload, tiny, has_gpu=False) == (None, None)
    assert cpu_size_rule(native, definition, workload, tiny, has_gpu=True) == (None, None)
    assert cpu_size_rule(native, definition, workload, SubmitOptions(cpu_max_input_mib=0.0, all_workloads_on_cpu=True),
                         has_gpu=False) == (None, None)


def test_an_extension_that_cannot_run_here_says_so_and_one_that_can_keeps_the_size_rule(tiny_dataset_root, tmp_path):
    with Session(Dataset(tiny_dataset_root), Archive(tmp_path / "a"),
                 SubmitOptions(workloads=["tiny_b2_t40"], timeout_s=300, cpu_max_input_mib=0.0)) as s:
        cuda_extension = s.submit(solution(LOAD_INLINE_CUDA + TORCH_CANDIDATE)).workloads[0]
        # it mentions the builder and builds nothing: it runs here, so its workload is still too large
        runs_here = s.submit(solution("import torch.utils.cpp_extension\n" + TORCH_CANDIDATE,
                                      name="mentions")).workloads[0]
        plain = s.submit(solution(TORCH_CANDIDATE, name="plain")).workloads[0]
    assert cuda_extension.status == "SKIPPED" and TOO_SLOW not in cuda_extension.message, cuda_extension.message
    assert "CUDA extension (load_inline/load)" in cuda_extension.message, cuda_extension.message
    assert runs_here.status == "SKIPPED" and TOO_SLOW in runs_here.message, runs_here.message
    assert "build" in runs_here.phases_s  # built first: the build is what decided
    assert plain.status == "SKIPPED" and TOO_SLOW in plain.message and "build" not in plain.phases_s


LAZY_CUDA = LOAD_INLINE_CUDA.replace('_ext = load_inline(name="scale_ext"', '''_built = []


def _scale_ext():  # built at the first call, not at import
    if not _built:
        _built.append(_load())
    return _built[0]


def _load():
    return load_inline(name="lazy_scale_ext"''')


def test_an_extension_built_at_the_first_call_is_skipped_as_one_built_at_import(tiny_dataset_root, tmp_path):
    """Red team of real contestants' code: a load_inline inside the entry point failed as the candidate's
    RUNTIME_ERROR here, with a hint about CUDA tensors, where the same build at import is SKIPPED."""
    assert "_load()" in LAZY_CUDA and "def _load():\n    return load_inline(" in LAZY_CUDA
    lazy = LAZY_CUDA + TORCH_CANDIDATE.replace("    batch, heads, dim = q.shape",
                                               "    _scale_ext()\n    batch, heads, dim = q.shape")
    assert "    _scale_ext()\n" in lazy
    with Session(Dataset(tiny_dataset_root), Archive(tmp_path / "a"),
                 SubmitOptions(workloads=["tiny_b2_t40"], timeout_s=300)) as s:
        result = s.submit(solution(lazy, name="lazy")).workloads[0]
    assert result.status == "SKIPPED", result.message
    assert "CUDA extension (load_inline/load) built at its first call: built and run on a GPU host only" in \
        result.message
    assert "CUDA tensors" not in result.message
