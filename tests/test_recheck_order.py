"""The order of a worker's recheck calls, which decides what the replay audit compares (``fresh_input_timing``).

On a GPU a call on new content in reused buffers is timed against its repeat. Both must start warm: on the H200
the first call after the harness's input generation and hashing (seconds of host work, the GPU idle) ran 2-2.5x
its repeat on honest kernels of 40-100 us. So the worker first calls the candidate on the content the buffers
already hold; the new content goes in only after that call, so nothing can be primed with it. Checked here on
the CPU by letting the worker believe it has a GPU (no timing is judged, only who sees which content when).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

import harness.measure.device_measure as device_measure
import harness.sandbox.worker_calls as worker_mod
from harness.data.dataset import Dataset
from harness.data.schema import Solution
from harness.sandbox.messages import BuildRequest, RecheckRequest
from harness.sandbox.worker import Worker

from support import KV8_PS1, solution_dict

# Records the content of q it is called on (and leaves the outputs alone: nothing is judged here).
RECORDER = '''
SEEN = []


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    SEEN.append(round(float(q.double().sum()), 6))
'''


def test_new_content_is_first_seen_by_the_timed_call_which_follows_a_call_on_the_old_content(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # the worker builds in its working folder
    dataset = Dataset()
    definition, workload = dataset.definition(KV8_PS1), dataset.workloads_for(KV8_PS1)[0]
    worker = Worker("candidate")
    reply, _ = worker.build(BuildRequest(solution=Solution.model_validate(solution_dict(RECORDER)),
                                         definition=definition))
    assert reply["ok"], reply
    cpu = torch.device("cpu")
    generate, allocate = worker_mod.generate_inputs, worker_mod.allocate_outputs
    monkeypatch.setattr(worker_mod, "generate_inputs", lambda d, w, seed, device, root: generate(d, w, seed, cpu, root))
    monkeypatch.setattr(worker_mod, "allocate_outputs", lambda d, w, device: allocate(d, w, cpu))
    monkeypatch.setattr(worker_mod, "l2_flush", lambda device: (lambda: None))
    monkeypatch.setattr(worker_mod, "raise_clocks", lambda device, flush: None)
    monkeypatch.setattr(worker_mod, "sync", lambda device: None)
    monkeypatch.setattr(device_measure, "sync", lambda device: None)
    worker.device = SimpleNamespace(type="cuda")  # the timed path: repeats, and the call before new content

    steps = [{"kind": "fresh", "seed": 5}, {"kind": "fresh", "seed": 6}, {"kind": "reuse", "seed": 7, "buffers_of": 0}]
    reply, _ = worker.recheck(RecheckRequest(workload=workload, steps=steps, dataset_root=str(dataset.root)))
    content = {seed: round(float(generate(definition, workload, seed, cpu, dataset.root)["q"].double().sum()), 6)
               for seed in (5, 6, 7)}
    seen = worker.built.fn.__globals__["SEEN"]
    # fresh 5: timed + repeat; fresh 6: timed + repeat; reuse of 5's buffers with 7: a call on 5, then timed + repeat
    assert seen == [content[5]] * 2 + [content[6]] * 2 + [content[5], content[7], content[7]], (seen, content)
    assert len(reply["wall_ms"]) == len(reply["repeat_wall_ms"]) == 3
    assert reply["input_fingerprints"][2] == worker_mod.fingerprint(generate(definition, workload, 7, cpu,
                                                                             dataset.root))
