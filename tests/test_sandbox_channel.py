"""The worker's reply channel against the candidate that shares its process: whatever a candidate writes into it
(the channel's descriptor is in its process, named on its command line) ends that candidate's evaluation as a
RUNTIME_ERROR, never the harness, its memory or a later submission's evaluation.

Each hostile candidate is the honest example kernel whose ``run`` first writes one forged message into the reply
channel, ahead of the worker's own reply."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time

import pytest

from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.sandbox import protocol
from harness.sandbox.channel_guard import BASE
from harness.sandbox.extension_cache import MAX_BYTES as EXTENSION_BYTES
from harness.sandbox.messages import (BuildRequest, ExitRequest, HelloRequest, RecheckRequest, RecheckStep,
                                      RunRequest, SassRequest)
from harness.sandbox.runner import PAYLOAD_SLACK, reply_payload_limit
from sandbox_attacks import HONEST
from support import KV8_PS1, ROOT

FORGE = r'''
import os as _os, struct as _struct
_FORGED = []


def _nonce():
    """The nonce of the request being answered, from the worker loop's frame (red team round 12, a10)."""
    import sys as _sys
    frame = _sys._getframe(1)
    while frame is not None and frame.f_code.co_name != "serve":
        frame = frame.f_back
    return frame.f_locals["nonce"]["nonce"].encode() if frame is not None else b""


def _forge():
    if _FORGED:
        return
    _FORGED.append(1)
    fd = __WFD__  # where the worker keeps its reply channel (harness.sandbox.channel_guard)
    head, body_len, body_bytes = __MESSAGE__
    head = head.replace(b"__NONCE__", _nonce())
    _os.write(fd, _struct.pack(">Q", len(head)) + head + _struct.pack(">Q", body_len))
    while body_bytes > 0:  # streamed from one small buffer: the candidate's own memory limit is no bound
        body_bytes -= _os.write(fd, b"\0" * min(body_bytes, 1 << 20))
'''

SURROGATE = r'''

_honest_run = run


def run(*args):
    _honest_run(*args)
    raise RuntimeError("lone \ud800 and \udfff")
'''

# name -> (header, payload length announced, payload bytes written), and the reason the harness must give
FORGERIES = {
    "nested": ((b"[" * 100_000 + b"]" * 100_000), 0, 0, "RecursionError"),
    "digits": (b'{"ok": true, "elapsed_s": ' + b"7" * 20_000 + b"}", 0, 0, "ValueError"),
    # with the request's nonce (read from the loop's frame): the bound holds for a frame the harness takes as the reply
    "payload": (b'{"ok": true, "input_fingerprint": "x", "nonce": "__NONCE__"}', 1 << 30, 64 << 20,
                "is larger than allowed"),
    # well-formed, as a forged timing would be: told apart by the request's nonce, which the candidate never sees
    "wellformed": (b'{"ok": true, "input_fingerprint": "x"}', 0, 0, "wrote into the harness's channel"),
    # ...and with the nonce read from the loop's frame: taken as the reply, then the loop's own reply arrives before
    # the answer to the sync the harness sends after every reply (runner.WorkerProcess._confirm)
    "with_nonce": (b'{"ok": true, "input_fingerprint": "x", "nonce": "__NONCE__"}', 0, 0,
                   "wrote into the harness's channel"),
}
PROTOCOL_BREAKS = ("wellformed", "with_nonce")


def forging_solution(name: str) -> dict:
    head, body_len, body_bytes, _ = FORGERIES[name]
    kernel = HONEST.replace("def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):\n",
                            "def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):\n"
                            "    _forge()\n")
    prelude = FORGE.replace("__MESSAGE__", repr((head, body_len, body_bytes))).replace("__WFD__", str(BASE + 1))
    return {"name": name, "definition": KV8_PS1, "author": "hostile",
            "spec": {"language": "triton", "target_hardware": ["cpu"], "entry_point": "kernel.py::run",
                     "dependencies": [], "destination_passing_style": True},
            "sources": [{"path": "kernel.py", "content": prelude + kernel}]}


@pytest.fixture(scope="module")
def forged_run(tiny_dataset_root, tmp_path_factory):
    """One `harness submit` of every forging candidate, then an honest one, in that order."""
    tmp = tmp_path_factory.mktemp("forged")
    paths = []
    for name in [*FORGERIES, "surrogate", "honest"]:
        solution = forging_solution("nested") if name in ("honest", "surrogate") else forging_solution(name)
        if name == "honest":
            solution["name"] = "honest"
            solution["sources"][0]["content"] = HONEST
        if name == "surrogate":  # red team round 12, a02: its message once failed the archive's write and the batch
            solution["name"] = "surrogate"
            solution["sources"][0]["content"] = HONEST + SURROGATE
        paths.append(tmp / f"{name}.json")
        paths[-1].write_text(json.dumps(solution))
    (tmp / "archive").mkdir()
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "harness", "submit", *map(str, paths), "--archive",
                           str(tmp / "archive"), "--dataset", str(tiny_dataset_root), "-w", "tiny_b2_t40",
                           "--timeout", "120"], capture_output=True, text=True, timeout=900, cwd=ROOT)
    yield proc, Archive(tmp / "archive"), time.monotonic() - started


def test_a_forged_reply_never_ends_the_harness_nor_the_next_submission(forged_run):
    proc, archive, _ = forged_run
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 1, proc.stderr[-3000:]  # a submission failed: said, not crashed
    statuses = {row["solution_name"]: row["status"] for row in archive.submissions()}
    assert statuses == {**{name: "RUNTIME_ERROR" for name in FORGERIES}, "surrogate": "RUNTIME_ERROR",
                        "honest": "PASSED"}, statuses


def test_lone_surrogates_in_a_message_are_archived_as_their_escapes(forged_run):
    _, archive, _ = forged_run
    row = next(r for r in archive.submissions() if r["solution_name"] == "surrogate")
    message = archive.submission(row["id"])["evaluations"][0]["message"]
    assert "lone \\ud800 and \\udfff" in message, message


@pytest.mark.parametrize("name", list(FORGERIES))
def test_a_forged_reply_is_the_candidates_runtime_error_naming_it(forged_run, name):
    _, archive, _ = forged_run
    row = next(r for r in archive.submissions() if r["solution_name"] == name)
    message = archive.submission(row["id"])["evaluations"][0]["message"]
    assert FORGERIES[name][3] in message, message
    assert ("the worker died" if name not in PROTOCOL_BREAKS else "the worker broke the protocol") in message, message


def test_an_oversized_payload_is_refused_before_it_is_read(forged_run):
    """The forged payload announces 1 GiB (64 MiB of it written): refused on its length, with no wait for it."""
    _, archive, elapsed = forged_run
    row = next(r for r in archive.submissions() if r["solution_name"] == "payload")
    message = archive.submission(row["id"])["evaluations"][0]["message"]
    assert f"payload of {1 << 30} bytes is larger than allowed" in message, message
    assert elapsed < 300


# -- the bounds themselves ------------------------------------------------------------------------------


@pytest.mark.parametrize("header, words", [
    (b"[" * 100_000 + b"]" * 100_000, "RecursionError"),
    (b'{"a": ' + b"9" * 5000 + b"}", "ValueError"),
    (b'{"a": ' + b'{"b": ' * 40 + b"1" + b"}" * 40 + b"}", "nested more than"),
])
def test_a_header_the_harness_cannot_hold_is_a_protocol_error(header, words):
    r, w = os.pipe()
    try:
        data = struct.pack(">Q", len(header)) + header + struct.pack(">Q", 0)
        writer = os.fork() if len(data) > 60_000 else None
        if writer == 0:
            os.write(w, data)
            os._exit(0)
        if writer is None:
            os.write(w, data)
        with pytest.raises(protocol.ProtocolError, match=words):
            protocol.read_message(r, deadline=time.monotonic() + 10)
        if writer:
            os.waitpid(writer, 0)
    finally:
        os.close(r)
        os.close(w)


def test_the_payload_bound_of_each_reply(tiny_dataset_root):
    dataset = Dataset(tiny_dataset_root)
    definition = dataset.definition(KV8_PS1)
    workload = next(w for w in dataset.workloads[KV8_PS1] if w.axes["batch_size"] == 2)
    outputs = 2 * 32 * 128 + 2 * 32  # output [2, 32, 128] and lse [2, 32], 8 bytes an element at most
    run = RunRequest(workload=workload, seed=1, dataset_root="d")
    assert reply_payload_limit(run, definition, 32 << 30) == outputs * 8 + PAYLOAD_SLACK
    recheck = RecheckRequest(workload=workload, dataset_root="d",
                             steps=[RecheckStep(kind="fresh", seed=s) for s in range(3)])
    assert reply_payload_limit(recheck, definition, 32 << 30) == 3 * outputs * 8 + PAYLOAD_SLACK
    solution = forging_solution("nested")
    assert reply_payload_limit(BuildRequest(solution=solution, definition=definition), None, 32 << 30) == (
        EXTENSION_BYTES + PAYLOAD_SLACK)
    for tensorless in (HelloRequest(), ExitRequest(), SassRequest()):
        assert reply_payload_limit(tensorless, definition, 32 << 30) == 0
    assert reply_payload_limit(run, None, 3 << 30) == 3 << 30  # nothing built yet: what the worker can hold


@pytest.mark.parametrize("call", ["os.writev(fd, [b'forged'])", "os.pwrite(fd, b'forged', 0)",
                                  "os.sendfile(fd, 0, 0, 1)", "os.dup2(0, fd)", "os.close(fd)", "os.read(fd, 8)",
                                  "os.splice(0, fd, 1)"])
def test_reaching_the_channel_by_descriptor_is_a_static_gate_error(policy, call):
    """The forgeries above need a descriptor call; each way of making one is an error of the gate (os.write was
    one already), found without the /proc probe the forgeries here also use (a loop over numbers finds the fd)."""
    from harness.audits.static_gate import scan_sources

    source = f"import os\n\ndef run(q):\n    for fd in range(3, 64):\n        {call}\n    return q\n"
    errors = [f for f in scan_sources({"kernel.py": source}, "triton", policy) if f.severity == "error"]
    assert [f.rule for f in errors] == ["harness_internals"], errors


@pytest.mark.parametrize("call", ['write(fd, "forged", 6);', "dup2(0, fd);", "::close(fd);",
                                  'syscall(SYS_write, fd, "forged", 6);', "writev(fd, nullptr, 0);", "kill(1, 9);"])
def test_reaching_the_channel_from_native_code_is_a_static_gate_error(policy, call):
    """The same from C++ (a load_inline extension runs on a CPU host too); a method of that name is not a call of it."""
    from harness.audits.static_gate import scan_sources

    source = ("#include <unistd.h>\n#include <sys/syscall.h>\n#include <torch/extension.h>\n"
              f"void run(int fd, std::ostream& out) {{ {call} out.write(\"x\", 1); }}\n")
    errors = [f for f in scan_sources({"ext.cpp": source}, "cuda", policy) if f.severity == "error"]
    assert [f.rule for f in errors] == ["harness_internals"], errors
