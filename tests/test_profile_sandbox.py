"""The profiler runs the candidate, so it runs in the candidate's sandbox (harness.profiling.wall): a profile
works there end to end (the fake ncu runs the real target process), and a hostile candidate under the profiler
sees no archive, writes nothing outside, and gets no file of the host handed back through the outbox."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import pytest

from harness.profiling import NO_KERNELS, OK, NcuProfiler, profile_workloads
from harness.sandbox.isolation import FULL, MountPlan, init_script, probe
from harness.sandbox.outbox import CONSOLE, MANIFEST, outbox_run_lines, read_outbox
from profile_support import METRICS
from support import TORCH_CANDIDATE, solution_dict

needs_sandbox = pytest.mark.skipif(not probe()[0], reason="this host gives no namespaces: the sandbox is reduced")


def _hostile(steps: str) -> str:
    """The torch candidate whose every call first runs ``steps`` (what they print reaches the profile's log)."""
    body = "".join(f"    {line}\n" for line in steps.strip().splitlines())
    call = "    batch, heads, dim = q.shape"
    assert call in TORCH_CANDIDATE
    return "import os\n\n\ndef _steps():\n" + body + TORCH_CANDIDATE.replace(call, "    _steps()\n" + call)


@needs_sandbox
def test_a_profile_runs_inside_the_sandbox_end_to_end(fake_ncu, request_for, tmp_path):
    keep = tmp_path / "kept"
    summary = NcuProfiler(fake_ncu("ok")).profile(request_for(sandbox=True, isolate_network=True, keep_workdir=keep))
    assert summary.status == OK, summary.reason + summary.log
    assert summary.sandbox == FULL
    assert [k.name for k in summary.kernels] == ["_gqa_decode_kernel"]
    assert summary.report and summary.report.startswith(b"NVIDIA Nsight Compute report")
    assert "profiled one call" in summary.log
    # the command as it ran: inside, in the candidate's work folder, on the inbox's copy of the solution
    cmd = summary.command
    assert cmd[cmd.index("--log-file") + 1] == "/tmp/work/out/ncu.log"
    assert cmd[cmd.index("--solution") + 1].startswith("/tmp/crucible-profile-in-")
    assert (keep / "profile.ncu-rep").read_bytes() == summary.report  # what was handed back, kept for ncu-ui
    assert json.loads((keep / "target_status.json").read_text())["ok"] is True


@needs_sandbox
def test_a_hostile_candidate_under_the_profiler_sees_and_leaves_nothing(fake_ncu, request_for, tmp_path):
    archive = tmp_path / "archive"
    archive.mkdir()
    (archive / "seal.key").write_text("SECRET-SEAL-KEY")
    escape = tmp_path / "escaped.txt"
    steps = f'''
for path in [{str(archive / "seal.key")!r}, "/etc/shadow"]:
    try:
        print("SAW", path, open(path).read()[:40], flush=True)
    except OSError as err:
        print("BLOCKED read", path, type(err).__name__, flush=True)
try:
    open({str(escape)!r}, "w").write("out")
    print("SAW write", flush=True)
except OSError as err:
    print("BLOCKED write", type(err).__name__, flush=True)
pids = [p for p in os.listdir("/proc") if p.isdigit()]
print("PROCS", len(pids), flush=True)
os.makedirs("/tmp/work/out", exist_ok=True)
for name in ("ncu.log", "target_status.json"):
    try:
        os.unlink("/tmp/work/out/" + name)
    except OSError:
        pass
if not os.path.lexists("/tmp/work/out/profile.ncu-rep"):  # handed back as the report, if links were followed
    os.symlink("/etc/shadow", "/tmp/work/out/profile.ncu-rep")
'''
    ncu = fake_ncu("nokernels")
    summary = NcuProfiler(ncu).profile(request_for(_hostile(steps), sandbox=True, isolate_network=True,
                                                   hidden=(str(archive),)))
    assert summary.sandbox == FULL
    assert "SECRET-SEAL-KEY" not in summary.log and "BLOCKED read" in summary.log, summary.log
    assert not escape.exists() and "BLOCKED write" in summary.log
    procs = int(summary.log.split("PROCS ")[1].split()[0])
    assert procs <= 6  # its own namespace: the init, prlimit/setpriv's child (ncu), the target; no host process
    assert summary.report is None and summary.status == NO_KERNELS
    shadow = open("/etc/shadow").read() if subprocess.run(["id", "-u"], capture_output=True,
                                                            text=True).stdout.strip() == "0" else ""
    assert not shadow or shadow[:20] not in summary.log


@needs_sandbox
def test_profile_workloads_passes_the_sandbox_and_the_hidden_folders_on(fake_ncu, tmp_path, tiny_dataset_root):
    profiler = NcuProfiler(fake_ncu("ok"))
    out = profile_workloads(profiler, solution_dict(TORCH_CANDIDATE), "h" * 64, ["tiny_b2_t40"], tiny_dataset_root,
                            list(METRICS), isolate_network=True, hidden=[str(tmp_path)])
    assert [s.status for s in out] == [OK] and out[0].sandbox == FULL
    off = profile_workloads(profiler, solution_dict(TORCH_CANDIDATE), "h" * 64, ["tiny_b2_t40"], tiny_dataset_root,
                            list(METRICS), isolate_network=False, sandbox=False)
    assert off[0].status == OK and off[0].sandbox.startswith("reduced (switched off")


def test_an_unknown_workload_is_a_failed_profile_not_a_crash(fake_ncu, request_for):
    summary = NcuProfiler(fake_ncu("ok")).profile(dataclasses.replace(request_for(), workload_uuid="no-such-one"))
    assert summary.status == "failed" and "profile not prepared" in summary.reason


# -- the hand-over, as data ---------------------------------------------------------------------------------


def test_the_outbox_is_covered_before_the_pivot_and_opened_only_after_the_kill():
    plan = MountPlan(root="/tmp/r", readonly=["/usr"], uid=1_200_001, outbox="/tmp/box", outbox_patterns=["a.txt"])
    lines = init_script(plan).splitlines()
    cover = next(i for i, line in enumerate(lines) if "crucible-cover" in line)
    bind = next(i for i, line in enumerate(lines) if line.startswith("mount --bind /tmp/box"))
    assert bind < cover < lines.index("pivot_root . .old")
    run = next(i for i, line in enumerate(lines) if '"$@"' in line)
    assert run < lines.index("kill -9 -1 2>/dev/null || true") < lines.index("umount /.crucible-outbox")
    assert "chown 1200001:1200001 ./tmp/work/out" in lines
    assert lines[-1] == "exit $rc"
    without = init_script(MountPlan(root="/tmp/r")).splitlines()
    assert without[-1] == '"$@" || exit $?' and not any("crucible-cover" in line for line in without)


@pytest.mark.parametrize("pattern", ["/etc/shadow", "../x", "a b", "x;rm", "$(id)", "a`b`", ""])
def test_outbox_patterns_are_plain_relative_names(pattern):
    with pytest.raises(ValueError):
        outbox_run_lines("/tmp/box", [pattern], 1024)


def test_read_outbox_keeps_only_listed_files_within_the_bound(tmp_path):
    (tmp_path / "small.bin").write_bytes(b"x" * 10)
    (tmp_path / "big.bin").write_bytes(b"y" * 8)
    (tmp_path / "unlisted.bin").write_bytes(b"z")
    (tmp_path / CONSOLE).write_text("console tail")
    (tmp_path / MANIFEST).write_text("10 small.bin\n5000 big.bin\n3 ../escape\nnot-a-size x\n")
    files, console, notes = read_outbox(tmp_path, max_bytes=100)
    assert files == {"small.bin": b"x" * 10}
    assert console == "console tail" and len(notes) == 1 and "big.bin" in notes[0]


@needs_sandbox
@pytest.mark.parametrize("swap", [
    "rm -rf /tmp/work/out && ln -s {secret} /tmp/work/out",  # out/ made a link to a folder it cannot read
    "mkdir /tmp/w2 && ln -s {secret} /tmp/w2/out && cd / && mv /tmp/work /tmp/w3 && mv /tmp/w2 /tmp/work",
    "mkdir -p /tmp/work/out && ln -s {secret} /tmp/work/out/sub",  # a pattern's folder made a link
])
def test_the_init_never_reads_through_a_link_the_candidate_planted(tmp_path, swap):
    import os
    import subprocess as sp

    from harness.sandbox.isolation import SandboxPolicy, make_sandbox

    secret = tmp_path / "secret"
    secret.mkdir()
    for name in ("ncu.log", "x.rep"):
        (secret / name).write_text("ROOT-ONLY")
        os.chmod(secret / name, 0o600)
    box = make_sandbox(SandboxPolicy(), "candidate", [str(secret)], [], "", gpu=False,
                       outbox=["ncu.log", "sub/*.rep"])
    try:
        if box.mode != "root":
            pytest.skip("the candidate is its own user only in root mode")
        command = box.command(["sh", "-c", swap.format(secret=secret) + "; cat /tmp/work/out/ncu.log"])
        run = sp.run(command, capture_output=True, text=True, timeout=60, cwd=box.folder)
        files, console, _ = read_outbox(box.folder / "outbox", 1 << 20)
        assert files == {} and "ROOT-ONLY" not in console, (files, console, run.stderr)
    finally:
        box.close()


def test_a_request_that_cannot_be_prepared_leaves_no_inbox(request_for):
    import glob
    import tempfile

    from harness.profiling.wall import Wall

    before = set(glob.glob(f"{tempfile.gettempdir()}/crucible-profile-in-*"))
    with pytest.raises(ValueError):
        Wall(dataclasses.replace(request_for(), workload_uuid="no-such-one"))
    assert set(glob.glob(f"{tempfile.gettempdir()}/crucible-profile-in-*")) == before
