"""torch's CUDA queries in the candidate's worker on a host without a GPU: a GPU solution's synchronize, current
stream and device properties (its SM count read at import) are answered by a stand-in, so its kernels run and are
judged here instead of the call raising "Torch not compiled with CUDA enabled"; whether a GPU is present is still
told truly, and the reference's worker is left as it is."""

from __future__ import annotations

import types

import pytest
import torch

from harness.data.dataset import Dataset
from harness.data.schema import Solution
from harness.sandbox import cpu_cuda
from harness.sandbox.messages import BuildRequest, RunRequest
from harness.sandbox.runner import WorkerOptions, WorkerProcess

from support import KV8_PS1, TORCH_CANDIDATE, solution_dict

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the stand-in is for hosts without a GPU")

GPU_HABITS = '''
import torch
NUM_SMS = torch.cuda.get_device_properties("cuda").multi_processor_count
MAJOR, MINOR = torch.cuda.get_device_capability()
'''
AFTER_THE_WORK = '''
    torch.cuda.synchronize()
    torch.cuda.current_stream().synchronize()
    assert NUM_SMS == 132 and (MAJOR, MINOR) == (9, 0) and not torch.cuda.is_available()
    assert torch.cuda.device_count() == 0 and "stand-in" in torch.cuda.get_device_name()
'''


def test_the_stand_in_answers_only_where_there_is_no_gpu():
    nvtx = types.SimpleNamespace()
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: False, nvtx=nvtx))
    assert cpu_cuda.apply(fake)
    assert fake.cuda.get_device_properties(0).multi_processor_count == 132
    assert fake.cuda.synchronize() is None and fake.cuda.current_stream().cuda_stream == 0
    with fake.cuda.device(3):
        assert fake.cuda.current_device() == 0 and fake.cuda.is_current_stream_capturing() is False
    with nvtx.range("decode"):
        assert nvtx.range_push("a") == 0 and nvtx.range_pop() == 0
    gpu = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: True))
    assert not cpu_cuda.apply(gpu) and not hasattr(gpu.cuda, "synchronize")


def test_a_gpu_solutions_cuda_queries_run_in_the_candidates_worker():
    dataset = Dataset()
    workload = dataset.workloads_for(KV8_PS1)[0]
    source = GPU_HABITS + TORCH_CANDIDATE.rstrip("\n") + "\n" + AFTER_THE_WORK
    _build_and_run(dataset, workload, Solution.model_validate(solution_dict(source)))


def test_torch_accelerator_queries_are_answered_as_torch_cuda_s():
    stream_queries = types.SimpleNamespace()
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: False), accelerator=stream_queries)
    assert cpu_cuda.apply(fake)
    with stream_queries.device_index(stream_queries.current_device_index()):
        assert stream_queries.current_device_idx() == 0 and stream_queries.set_device_index(0) is None
    with stream_queries.device_index(None):
        assert stream_queries.current_stream().cuda_stream == 0 and stream_queries.synchronize() is None


# Run in a process of its own: apply() changes torch.library.Library for the process.
CUDA_ONLY_OPERATORS = '''
import sys
import torch
sys.path.insert(0, sys.argv[1])
from harness.sandbox import cpu_cuda
assert cpu_cuda.apply(torch)
x = torch.zeros(2)

@torch.library.custom_op("crucible_cpu::plus1", mutates_args=("out",), device_types="cuda")
def plus1(x: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(x + 1)

out = torch.empty(2)
torch.ops.crucible_cpu.plus1(x, out)
assert out.tolist() == [1.0, 1.0]

@torch.library.custom_op("crucible_cpu::plus2", mutates_args=(), device_types="cuda")
def plus2(x: torch.Tensor) -> torch.Tensor:
    return x + 2

assert torch.ops.crucible_cpu.plus2(x).tolist() == [2.0, 2.0]
@plus2.register_kernel("cpu")  # the solution's own CPU kernel, registered after: it replaces the stand-in
def _(x):
    return x + 20

assert torch.ops.crucible_cpu.plus2(x).tolist() == [20.0, 20.0]

@torch.library.custom_op("crucible_cpu::plus3", mutates_args=(), device_types=("cpu", "cuda"))
def plus3(x: torch.Tensor) -> torch.Tensor:
    return x + 3

assert torch.ops.crucible_cpu.plus3(x).tolist() == [3.0, 3.0]
lib = torch.library.Library("crucible_cpu", "DEF")
lib.define("plus4(Tensor x) -> Tensor")
lib.define("plus5(Tensor x) -> Tensor")
lib.impl("plus4", lambda x: x + 40, "CPU")  # before the CUDA one: kept
lib.impl("plus4", lambda x: x + 4, "CUDA")
lib.impl(torch.ops.crucible_cpu.plus5.default, lambda x: x + 5, "CUDA")
assert torch.ops.crucible_cpu.plus4(x).tolist() == [40.0, 40.0]
assert torch.ops.crucible_cpu.plus5(x).tolist() == [5.0, 5.0]
torch.library.define("crucible_cpu::plus6", "(Tensor x) -> Tensor")
torch.library.register_kernel("crucible_cpu::plus6", "cuda", lambda x: x + 6)
assert torch.ops.crucible_cpu.plus6(x).tolist() == [6.0, 6.0]
# PyTorch's own operators are never stood in for (the dispatcher guard holds them to PyTorch's kernels)
assert cpu_cuda._operator(torch.library.Library("aten", "IMPL"), "sin") == ""
assert sorted(cpu_cuda._STAND_INS) == ["crucible_cpu::plus1", "crucible_cpu::plus5", "crucible_cpu::plus6"], \
    sorted(cpu_cuda._STAND_INS)
print("ok")
'''


def test_an_operator_registered_for_cuda_alone_runs_for_cpu_tensors():
    import subprocess
    import sys

    from support import ROOT

    proc = subprocess.run([sys.executable, "-c", CUDA_ONLY_OPERATORS, str(ROOT)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
    assert "Overriding a previously registered kernel" not in proc.stderr


CUSTOM_OP_SOLUTION = '''

@torch.library.custom_op("crucible_test::decode", mutates_args=("output", "lse"), device_types="cuda")
def _decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, kv_indptr: torch.Tensor,
            kv_indices: torch.Tensor, sm_scale: float, output: torch.Tensor, lse: torch.Tensor) -> None:
    with torch.accelerator.device_index(torch.accelerator.current_device_index()):
        _run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse)
    torch.accelerator.synchronize()


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    torch.ops.crucible_test.decode(q, k_cache, v_cache, kv_indptr, kv_indices, float(sm_scale), output, lse)
'''


def test_a_cuda_only_custom_op_and_torch_accelerator_run_in_the_candidates_worker():
    dataset = Dataset()
    workload = dataset.workloads_for(KV8_PS1)[0]
    source = TORCH_CANDIDATE.replace("def run(", "def _run(") + CUSTOM_OP_SOLUTION
    _build_and_run(dataset, workload, Solution.model_validate(solution_dict(source)))


def _build_and_run(dataset, workload, solution):
    """The solution built and run once in a candidate worker on this CPU host: both replies must be ok."""
    worker = WorkerProcess(WorkerOptions(cpu_only=True, dataset_root=str(dataset.root), sandbox=False,
                                         isolate_network=False))
    worker.start()
    try:
        reply, _ = worker.request(BuildRequest(solution=solution, definition=dataset.definition(KV8_PS1)),
                                  timeout_s=120)
        assert reply.ok, reply.error
        reply, _ = worker.request(RunRequest(workload=workload, seed=1, dataset_root=str(dataset.root)),
                                  timeout_s=120)
        assert reply.ok, reply.error
    finally:
        worker.stop(graceful=False)
