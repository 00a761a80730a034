"""The ncu CSV fixtures and texts shared by the profiling tests, and a fake `ncu` (fixture ``fake_ncu``) that
runs the real target process the way ncu would, with a request builder (fixture ``request_for``)."""

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from harness.profiling import ProfileRequest
from support import ROOT, TORCH_CANDIDATE, solution_dict

FIXTURES = ROOT / "tests" / "fixtures" / "ncu"
TRITON_CSV = FIXTURES / "synthetic_triton_example_sm90.csv"
CUDA_CORES_CSV = FIXTURES / "synthetic_flashinfer_cuda_cores_sm90.csv"
METRICS = ["gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
           "l1tex__t_sector_hit_rate.pct", "dram__bytes_read.sum"]
PERMISSION_TEXT = ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
                   "Counters on the target device 0. For instructions on enabling permissions and to get more "
                   "information see https://developer.nvidia.com/ERR_NVGPUCTRPERM")


# ---------------------------------------------------------------------------------------------
# A fake ncu on PATH

FAKE_NCU = r'''#!{python}
import json, os, subprocess, sys, time
MODE, FIXTURE, STATE, VERSION = {mode!r}, {fixture!r}, {state!r}, {version!r}
args = sys.argv[1:]

def record(kind, **kw):
    try:  # the state folder is out of a sandbox's view: there the outcome alone tells
        with open(os.path.join(STATE, "calls.jsonl"), "a") as f:
            f.write(json.dumps(dict(kind=kind, args=args, **kw)) + "\n")
    except OSError:
        pass

def opt(name):
    return args[args.index(name) + 1] if name in args else None

if MODE == "notfound":
    print("ncu: command not found", file=sys.stderr)
    sys.exit(127)
if "--version" in args:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\nCopyright (c) 2018-2025 NVIDIA Corporation\n"
          "Version " + VERSION + " (build 36398880) (public-release)")
    sys.exit(0)
if "--import" in args:
    record("import")
    sys.stdout.write(FIXTURE)
    sys.exit(0)
log = opt("--log-file")

def emit(text):
    if log:
        with open(log, "a") as f:
            f.write(text + "\n")
    else:
        print(text, flush=True)

record("collect", env=sorted(os.environ), home=os.environ.get("HOME"), cwd=os.getcwd())
emit("==PROF== Connected to process 4242 (" + sys.executable + ")")
if MODE == "perm":
    emit({permission!r})
    sys.exit(1)
if MODE == "badmetric" and not os.path.exists(os.path.join(STATE, "retried")):
    open(os.path.join(STATE, "retried"), "w").close()
    emit("==ERROR== Failed to find metric regex:^l1tex__t_sector_hit_rate\\.(pct|ratio)$")
    sys.exit(1)
if MODE == "hang":
    time.sleep(120)
target = args[args.index("-m") - 1:] + ["--allow-cpu"]  # a CPU stands in for the GPU
proc = subprocess.run(target)
record("target", rc=proc.returncode, target=target)
if proc.returncode != 0:
    emit("==ERROR== The application returned an error code (%d)." % proc.returncode)
    sys.exit(proc.returncode)
if MODE == "nokernels":
    emit("==WARNING== No kernels were profiled.")
    sys.exit(0)
export = opt("--export")
if export:
    with open(export + ".ncu-rep", "wb") as f:
        f.write(b"NVIDIA Nsight Compute report (fake)\x00\x01")
    emit("==PROF== Report: " + export + ".ncu-rep")
else:
    emit(FIXTURE)
sys.exit(0)
'''


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    """make(mode, fixture=..., version=...) -> path of an `ncu` script first on PATH; calls() -> its log."""
    state = tmp_path / "ncu_state"
    state.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()

    def make(mode: str = "ok", fixture: Path = TRITON_CSV, version: str = "2025.3.1.0") -> str:
        path = bindir / "ncu"
        path.write_text(FAKE_NCU.format(python=sys.executable, mode=mode, fixture=fixture.read_text(), state=str(state),
                                        version=version, permission=PERMISSION_TEXT))
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
        return str(path)

    def calls() -> list[dict]:
        f = state / "calls.jsonl"
        return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []

    make.calls = calls
    return make


@pytest.fixture
def request_for(tmp_path, tiny_dataset_root):
    def build(source: str = TORCH_CANDIDATE, **kw) -> ProfileRequest:
        sol = tmp_path / "solution.json"
        sol.write_text(json.dumps(solution_dict(source)))
        uuid = "00000000-0000-4000-8000-000000000000"  # tiny_b2_t40
        defaults = dict(metrics=list(METRICS), seed=1, solution_hash="h" * 64, timeout_s=120,
                        isolate_network=False, allow_cpu=False, sandbox=False)  # the sandboxed runs: below
        return ProfileRequest(solution_path=sol, workload_uuid=uuid, dataset_root=tiny_dataset_root,
                              **{**defaults, **kw})

    return build
