"""What the worker proves at run time whatever the static gate missed (red-team round, 2026-12-05, CPU).

- An output whose class is a torch.Tensor subclass (``class L(type(output))``, ``type("L", (torch.Tensor,), ...)``,
  ``torch.nn.Buffer``: spellings the gate did not see) ran the candidate's code when the worker read the output
  after the call (``detach`` for the reply): the work deferred past the timed call. Outputs and inputs must be plain
  tensors after every call.
- A process the candidate started (a shell pager's ``sleep &``, DataLoader workers, a daemon) did its work outside the
  worker's threads and outside the CUPTI trace of the worker's process, and no audit saw it: the thread census counted
  the worker's own threads only. A process of the candidate's alive at the recheck fails ``thread_creation``.
- A torch function mode of the candidate's left active (entered at import, its base class reached through a module
  that re-exports it: ``torch.utils._device.TorchFunctionMode``) ran inside the worker's own torch calls after the
  candidate's: ``torch.equal`` of the mutation check answered True, so inputs written over passed as untouched
  (PASSED, promotable). A mode other than torch's own default-device one is tampering, as a replaced function is.
- The builtins module, reached as ``len.__self__`` (no name the gate knew), was not fingerprinted: the worker's
  checks call ``isinstance``, ``type`` and ``len`` by name, and a candidate could answer for them.
- ``torch.cuda.get_device_properties`` (the L2 size the cold-L2 flush is sized by), ``empty_cache`` and the memory
  figures were not fingerprinted: a card reported with no L2 makes every flush a no-op (a warm-L2 timing).
- The host's OOM killer: the memory limit (32 GiB) can exceed a host's memory (this CPU host has 23 GiB), and a
  candidate that exhausted the host had the harness, or another session's process, as likely a victim as itself.
  A sandboxed worker's processes now go first (oom_score_adj 1000, set by the sandbox's root; where that root has
  CAP_SYS_RESOURCE the candidate cannot lower it again, elsewhere only by a write to /proc the static gate refuses).
"""

from __future__ import annotations

import os

import pytest

from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.data.schema import Solution
from harness.pipeline.evaluate import Session, SubmitOptions

from sandbox_attacks import HONEST
from support import KV8_PS1

LAUNCH = "    _launch(q, k_cache, v_cache, kv_indptr, kv_indices, None, sm_scale, output, lse)\n"


def _solution(name: str, after_launch: str, prelude: str = "") -> Solution:
    assert LAUNCH in HONEST
    body = "".join("    " + line + "\n" for line in after_launch.strip("\n").splitlines())
    source = HONEST.replace(LAUNCH, LAUNCH + body) + "\n" + prelude
    return Solution.model_validate(
        {"name": name, "definition": KV8_PS1, "author": "hostile",
         "spec": {"language": "triton", "target_hardware": ["cpu"], "entry_point": "kernel.py::run",
                  "dependencies": [], "destination_passing_style": True},
         "sources": [{"path": "kernel.py", "content": source}]})


@pytest.fixture(scope="module")
def session(tiny_dataset_root, tmp_path_factory):
    with Session(Dataset(tiny_dataset_root), Archive(tmp_path_factory.mktemp("redteam")),
                 SubmitOptions(workloads=["tiny_b2_t40"], timeout_s=120)) as s:
        yield s


LAZY_CLASS = '''
class _Lazy(type(output)):
    def detach(self):
        print("LAZY: the candidate's code ran as the harness read its output", flush=True)
        return super().detach()
output.__class__ = _Lazy
'''


def test_output_of_a_tensor_subclass_is_a_runtime_error(session):
    result = session.submit(_solution("lazy_output", LAZY_CLASS))
    w = result.workloads[0]
    assert w.status == "RUNTIME_ERROR" and "subclass" in w.message, (w.status, w.message)
    assert result.promotion_blockers


LEFT_RUNNING = '''
import pydoc
pydoc.pipepager("", "sleep 120 & :")
'''


def test_a_process_left_running_fails_thread_creation(session):
    result = session.submit(_solution("process_left", LEFT_RUNNING))
    audit = {a.name: a for a in result.workloads[0].audits}["thread_creation"]
    assert not audit.passed and "process" in audit.detail and "sleep" in audit.detail, audit.detail
    assert result.promotion_blockers


MODE = '''
import torch as _torch
from torch.utils._device import TorchFunctionMode as _Base


def _tf(self, func, types, args=(), kwargs=None):
    return True if func is _torch.equal else func(*args, **(kwargs or {}))


_Mode = type("_Mode", (_Base,), {"__torch_function__": _tf})
_Mode().__enter__()
'''


def test_a_torch_mode_left_over_the_worker_is_tampering(session):
    result = session.submit(_solution("mode_over_the_worker", "q.zero_()", prelude=MODE))
    w = result.workloads[0]
    assert w.status == "RUNTIME_ERROR" and "torch function mode _Mode" in w.message, (w.status, w.message)


def test_torchs_own_default_device_mode_is_not_tampering(session):
    prelude = "import torch as _torch\n_torch.set_default_device('cpu')\n"
    result = session.submit(_solution("default_device", "", prelude=prelude))
    assert result.status == "PASSED", [w.message for w in result.workloads]


@pytest.mark.parametrize("module, name", [("len.__self__", "isinstance"), ("__import__('bisect')", "bisect_left"),
                                          ("__import__('math')", "fsum")])
def test_a_replaced_builtin_or_timer_helper_is_tampering(session, module, name):
    """The builtins, and the stdlib the timer computes spans and means with (bisect, math.fsum)."""
    prelude = f"_m = {module}\n_real = _m.{name}\nsetattr(_m, '{name}', lambda *a: _real(*a))\n"
    result = session.submit(_solution(f"replaced_{name}", "", prelude=prelude))
    w = result.workloads[0]
    shown = "builtins" if name == "isinstance" else module.split("'")[1]
    assert w.status == "RUNTIME_ERROR" and f"{shown}.{name}" in w.message, (w.status, w.message)


def test_the_device_queries_the_timer_sizes_its_flush_by_are_fingerprinted(session):
    prelude = ("import torch as _t\n_real = _t.cuda.get_device_properties\n"
               "setattr(_t.cuda, 'get_device_properties', lambda *a, **k: _real(*a, **k))\n")
    result = session.submit(_solution("l2_hidden", "", prelude=prelude))
    w = result.workloads[0]
    assert w.status == "RUNTIME_ERROR" and "torch.cuda.get_device_properties" in w.message, (w.status, w.message)


OOM_FIRST = '''
print("OOM_ADJ", open("/proc/self/oom_score_adj").read().strip(), flush=True)
try:
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("0")
    print("OOM_LOWERED", open("/proc/self/oom_score_adj").read().strip(), flush=True)
except OSError as err:
    print("OOM_KEPT", type(err).__name__, flush=True)
'''


def test_the_candidate_is_the_oom_killers_first_choice(session):
    result = session.submit(_solution("oom_first", OOM_FIRST))
    log = result.workloads[0].log
    if result.sandbox != "full":
        pytest.skip(f"no full sandbox on this host: {result.sandbox}")
    assert log.index("OOM_ADJ") == log.index("OOM_ADJ 1000"), log[-2000:]
    if _has_cap_sys_resource():  # root with CAP_SYS_RESOURCE set it: the floor the candidate cannot go under
        assert "OOM_KEPT" in log and "OOM_LOWERED" not in log, log[-2000:]


def _has_cap_sys_resource() -> bool:
    for line in open("/proc/self/status"):
        if line.startswith("CapEff:"):
            return os.geteuid() == 0 and bool(int(line.split()[1], 16) >> 24 & 1)
    return False


def test_honest_after_the_hostile_ones(session):
    result = session.submit(_solution("honest", ""))
    assert result.status == "PASSED", [w.message for w in result.workloads]
    assert {a.name: a.passed for a in result.workloads[0].audits}["thread_creation"]
    assert result.promotion_blockers == [], result.promotion_blockers
