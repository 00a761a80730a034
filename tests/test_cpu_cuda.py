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
    solution = Solution.model_validate(solution_dict(source))
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
