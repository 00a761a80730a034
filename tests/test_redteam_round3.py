"""Red-team round three (2026-12-05, CPU): hostile solutions submitted through the harness, each caught by a gate
error, a failed audit or a recorded failure status, with nothing escaping.

Found and fixed here:
- A Triton solution that did the whole operator in numpy (``.numpy()`` in, ``torch.from_numpy`` out: no torch
  compute, no library the static gate knows, no kernel at all) PASSED on the CPU with no promotion blocker, where a
  GPU's attribution would have found no kernel of its own. Under the Triton interpreter the worker now counts the
  kernels it launches (``triton_interp.LAUNCHES``) and a checked call that launched none is a RUNTIME_ERROR
  (``worker_calls.require_own_kernel``).

Tried and already caught (kept so they stay caught): outputs handed back sparse or on the meta device (a
RUNTIME_ERROR, no traceback), an inf in lse, laziness keyed on the output buffer's content, ATen reached through
``operator.attrgetter``, state left for the next evaluation (files in /tmp, /dev/shm, $HOME, Triton's and torch's
caches, ``.pth`` files in every ``sys.path`` folder, POSIX and System V shared memory, a double-forked ``setsid``
daemon on an abstract socket), and reaching for the host from under a real terminal (the host's unix and TCP
sockets, TIOCSTI into the harness's terminal, the core-dump handler, the cgroup, rlimits, systemd-run/at, inherited
descriptors, pid 1's environment, a seal key anywhere in the file system).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import uuid

import pytest

import harness.sandbox.isolation as sandbox_mod
from harness.archive.database import Archive
from harness.audits.static_gate import awaits_attribution
from harness.data.dataset import Dataset
from harness.data.schema import Solution
from harness.pipeline.evaluate import Session, SubmitOptions

from redteam3_attacks import (ATTRGETTER, FIND, HOST, LAZY_WHEN_FILLED, LEAVE, NON_DPS, NUMPY, RECON,
                              after_launch, solution, with_steps)
from sandbox_attacks import outcomes
from support import ROOT

needs_sandbox = pytest.mark.skipif(not sandbox_mod.probe()[0],
                                   reason=f"this host gives no sandbox: {sandbox_mod.probe()[1]}")


@pytest.fixture(scope="module")
def session(tiny_dataset_root, tmp_path_factory):
    with Session(Dataset(tiny_dataset_root), Archive(tmp_path_factory.mktemp("redteam3")),
                 SubmitOptions(workloads=["tiny_b2_t40"], timeout_s=120)) as s:
        yield s


def _submit(session, sol: dict):
    result = session.submit(Solution.model_validate(sol))
    return result, result.workloads[0]


def test_numpy_doing_the_whole_operator_is_no_kernel_of_its_own(session):
    result, w = _submit(session, solution("numpy_host", NUMPY))
    assert not [f for f in result.static_findings if f["severity"] == "error"], result.static_findings
    # numpy's math on arrays is library compute to the gate (red team round 7); the run time catches it as well
    assert any(f["rule"] == "torch_compute" and "numpy" in f["message"] for f in result.static_findings), \
        result.static_findings
    own = [a for a in w.audits if a.name == "own_kernel"]
    assert own and not own[0].passed and "no Triton kernel of the solution ran" in own[0].detail, w.audits
    assert w.status == "PASSED" and any("own_kernel" in str(b) for b in result.promotion_blockers), \
        result.promotion_blockers  # judged as on a GPU: passed, never promotable


@pytest.mark.parametrize("returned, why", [("output.to_sparse(), lse", "SparseTensorImpl"),
                                           ("torch.empty_like(output, device='meta'), lse", "meta")])
def test_outputs_in_a_layout_the_harness_cannot_read_are_a_recorded_runtime_error(session, returned, why):
    result, w = _submit(session, solution("odd_output", NON_DPS.replace("__HOW__", returned), dps=False,
                                          honest=True))
    assert w.status == "RUNTIME_ERROR" and why in w.message and "Traceback" not in w.message, (w.status, w.message)
    assert result.promotion_blockers


def test_an_inf_in_lse_is_incorrect(session):
    result, w = _submit(session, solution("inf_lse", after_launch("lse[0, 0] = float('inf')")))
    assert w.status == "INCORRECT_NUMERICAL" and "inf/nan" in w.message, (w.status, w.message)


def test_laziness_keyed_on_the_output_buffers_content_fails(session):
    result, w = _submit(session, solution("lazy_filled", LAZY_WHEN_FILLED, honest=True))
    assert w.status != "PASSED", w.message
    assert result.promotion_blockers


def test_aten_through_operator_attrgetter_is_library_compute(session):
    result, w = _submit(session, solution("attrgetter_aten", ATTRGETTER))
    library = {f["rule"] for f in result.static_findings if awaits_attribution(f)}
    assert "torch_compute" in library, result.static_findings
    # the CPU's attribution sees the batched matmul it reached (never glue): the finding is not cleared
    assert any("audit attribution failed" in b and "aten::bmm" in b for b in result.promotion_blockers), \
        result.promotion_blockers


@needs_sandbox
def test_state_left_by_one_evaluation_never_reaches_the_next(session):
    mark = "crucible-rt3-" + uuid.uuid4().hex[:12]
    try:
        left, lw = _submit(session, solution("leave_state", with_steps(LEAVE.replace("__MARK__", mark))))
        done = outcomes(lw.log)
        # inside its own evaluation each write lands in its private /tmp, /dev/shm and IPC namespace
        assert done["leave_files"].startswith("ESCAPED") and done["leave_daemon"].startswith("ESCAPED"), done
        audit = {a.name: a for a in lw.audits}["thread_creation"]
        assert not audit.passed and "process" in audit.detail, audit.detail  # the daemon, seen at the recheck
        assert left.promotion_blockers
        found, fw = _submit(session, solution("find_state", with_steps(FIND.replace("__MARK__", mark))))
        seen = outcomes(fw.log)
        assert set(seen) == {"find_files", "find_shm", "find_sysv", "find_socket"}, fw.log[-2000:]
        assert all(v.startswith("BLOCKED") for v in seen.values()), seen
        assert found.promotion_blockers  # its probing is a static-gate error besides
        assert not [p for p in ("/dev/shm", "/tmp", "/var/tmp", os.path.expanduser("~")) for n in os.listdir(p)
                    if mark in n]
        assert not [p for p in sys.path if p and os.path.exists(os.path.join(p, mark + ".pth"))]
    finally:
        for folder in ("/dev/shm", "/tmp", "/var/tmp"):
            for name in os.listdir(folder):
                if mark in name:
                    os.remove(os.path.join(folder, name))


@pytest.fixture
def host_listeners(tmp_path):
    """A unix socket by name and by path, and a TCP port on loopback, all the host's: none may hear a candidate."""
    abstract = "crucible-rt3-host-" + uuid.uuid4().hex[:12]
    path = str(tmp_path / "host.sock")
    servers = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(2)] + [socket.socket()]
    servers[0].bind("\0" + abstract)
    servers[1].bind(path)
    servers[2].bind(("127.0.0.1", 0))
    os.chmod(path, 0o777)
    for s in servers:
        s.listen(4)
        s.setblocking(False)
    yield {"abstract": abstract, "path": path, "port": servers[2].getsockname()[1]}, servers
    for s in servers:
        s.close()


@needs_sandbox
@pytest.mark.skipif(not shutil.which("script"), reason="util-linux's script gives the harness a terminal")
def test_nothing_reaches_the_host_even_from_under_the_harnesss_terminal(tiny_dataset_root, tmp_path, host_listeners):
    """Run as a user runs it, from an interactive terminal (``script`` gives the harness a controlling tty, which
    TIOCSTI would write a command into), with an API key in the harness's environment."""
    params, servers = host_listeners
    canary = "sk-ant-canary-rt3-" + uuid.uuid4().hex
    sol = solution("host_reach", with_steps(RECON + HOST.replace("__PARAMS__", json.dumps(params))))
    (tmp_path / "host_reach.json").write_text(json.dumps(sol))
    archive = tmp_path / "archive"
    Archive(archive)  # made first, as a user's is
    cmd = [sys.executable, "-m", "harness", "submit", str(tmp_path / "host_reach.json"), "--archive", str(archive),
           "--dataset", str(tiny_dataset_root), "-w", "tiny_b2_t40", "--json"]
    proc = subprocess.run(["script", "-qec", shlex.join(cmd), "/dev/null"], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env={**os.environ, "ANTHROPIC_API_KEY": canary},
                          stdin=subprocess.DEVNULL)
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", proc.stdout)  # a terminal gets colours
    sub = re.search(r'"submission_id":\s*"?([\w-]+)', shown)
    assert sub, (shown[-2000:], proc.stderr[-2000:])
    store = Archive(archive)
    ev = store.submission(sub.group(1))["evaluations"][0]
    log = store.get_blob(ev["log_blob"]).decode(errors="replace")
    seen = outcomes(log)
    steps = {"host_socket", "tiocsti", "core_pattern", "cgroup", "scheduled", "fds", "init_environ", "seal_key"}
    assert set(seen) == steps, log[-3000:]
    assert all(v.startswith("BLOCKED") for v in seen.values()), seen
    for s in servers:  # nothing connected to the host's listeners
        with pytest.raises(BlockingIOError):
            s.accept()
    assert canary not in log and canary not in proc.stdout and str(archive) not in log
    assert "CRUCIBLE-TIOCSTI" not in proc.stdout  # no command pushed into the terminal came back as input
