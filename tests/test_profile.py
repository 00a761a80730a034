"""harness.profiling on CPU: ncu's CSV layouts, error statuses, backend selection, and the whole subprocess path
(ncu -> harness.profiling.target -> report -> CSV -> archive) driven by a fake `ncu` executable on PATH."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import harness.archive as archive_mod
import harness.profiling.backends as backends
from harness.archive import Archive
from harness.profiling import (FAILED, NO_KERNELS, NO_PERMISSION, NVTX_INCLUDE, OK, TIMEOUT, UNAVAILABLE,
                               KernelProfile, NcuProfiler, NsightPythonProfiler, ProfileRequest, ProfileSummary,
                               UnavailableProfiler, arch_from_cc, archived_profiles, choose_backend, diagnose,
                               ensure_profiles_table, failed_metric_names, finish_summary, parse_long_csv,
                               parse_ncu_csv, parse_ncu_version, parse_number, parse_raw_csv, record_profile,
                               select_backend, to_base_unit)

from support import KV8_PS1, ROOT, TORCH_CANDIDATE, solution_dict

FIXTURES = ROOT / "tests" / "fixtures" / "ncu"
TRITON_CSV = FIXTURES / "synthetic_triton_example_sm90.csv"
CUDA_CORES_CSV = FIXTURES / "synthetic_flashinfer_cuda_cores_sm90.csv"
METRICS = ["gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
           "l1tex__t_sector_hit_rate.pct", "dram__bytes_read.sum"]
PERMISSION_TEXT = ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
                   "Counters on the target device 0. For instructions on enabling permissions and to get more "
                   "information see https://developer.nvidia.com/ERR_NVGPUCTRPERM")

# ---------------------------------------------------------------------------------------------
# Numbers and units


@pytest.mark.parametrize("text, value", [
    ("1,980,000", 1980000.0), ("66.72", 66.72), ("0", 0.0), ("n/a", None), ("", None), ("  12.5 ", 12.5),
    ("(256, 1, 1)", None), ("NVIDIA H200", None), (3, 3.0),
])
def test_parse_number(text, value):
    assert parse_number(text) == value


@pytest.mark.parametrize("value, unit, expected", [
    (14.85, "usecond", (14850.0, "ns")), (2.0, "msecond", (2e6, "ns")), (689344.0, "nsecond", (689344.0, "ns")),
    (4.23, "Mbyte", (4.23e6, "byte")), (81.92, "Kbyte", (81920.0, "byte")), (2.15, "Gbyte", (2.15e9, "byte")),
    (3.1, "Tbyte/second", (3.1e12, "byte/second")), (16.8, "Minst", (16.8e6, "inst")), (66.7, "%", (66.7, "%")),
    (91.0, "register/thread", (91.0, "register/thread")), (5.0, "block", (5.0, "block")), (2.3, "", (2.3, "")),
    (None, "usecond", (None, "ns")), (1.0, "byte/usecond", (1e6, "byte/second")),
])
def test_to_base_unit(value, unit, expected):
    got = to_base_unit(value, unit)
    assert got[1] == expected[1]
    assert got[0] == pytest.approx(expected[0]) if expected[0] is not None else got[0] is None


@pytest.mark.parametrize("cc, arch", [("9.0", "sm_90"), ("10.0", "sm_100"), ("8.9", "sm_89"), ("", None),
                                      (None, None), ("NVIDIA", None)])
def test_arch_from_cc(cc, arch):
    assert arch_from_cc(cc) == arch


# ---------------------------------------------------------------------------------------------
# CSV layouts


def _independent_read(path: Path) -> tuple[list[str], list[str], list[list[str]]]:
    import csv

    rows = list(csv.reader(path.read_text().splitlines()))
    return rows[0], rows[1], rows[2:]


def test_raw_page_parses_header_units_and_one_row_per_launch():
    kernels = parse_raw_csv(CUDA_CORES_CSV.read_text())
    header, units, rows = _independent_read(CUDA_CORES_CSV)
    assert [k.id for k in kernels] == [0, 1]
    assert kernels[0].name.startswith("void flashinfer::BatchDecodeWithPagedKVCacheKernel<")
    assert kernels[1].name.startswith("void flashinfer::VariableLengthMergeStatesKernel<")
    assert {k.cc for k in kernels} == {"9.0"} and kernels[0].block_size == "(16, 4, 1)"
    col = header.index("gpu__time_duration.sum")
    assert units[col] == "usecond" and rows[0][col] == "14.85"
    assert kernels[0].metrics["gpu__time_duration.sum"] == (pytest.approx(14850.0), "ns")
    col = header.index("dram__bytes_read.sum")
    assert units[col] == "Mbyte" and kernels[0].value("dram__bytes_read.sum") == pytest.approx(4.23e6)
    # "n/a" is a missing value, not zero; a text attribute is not a metric
    assert kernels[0].value("l1tex__t_sector_hit_rate.pct") is None
    assert "device__attribute_display_name" not in kernels[0].metrics
    assert kernels[0].value("launch__grid_size") == 128.0


def test_raw_page_skips_prof_lines_and_program_output():
    text = ("==PROF== Connected to process 4242 (/usr/bin/python3.12)\nprofile_target: profiled one call\n"
            + TRITON_CSV.read_text() + "==PROF== Disconnected from process 4242\n")
    kernels = parse_raw_csv(text)
    assert len(kernels) == 1 and kernels[0].name == "_gqa_decode_kernel"
    assert kernels[0].value("gpu__time_duration.sum") == 689344.0  # "689,344": thousands separators stripped
    assert kernels[0].value("dram__bytes_read.sum") == 2151677952.0


def test_raw_page_without_units_row_and_garbage():
    text = ('"ID","Process ID","Process Name","Host Name","Kernel Name","gpu__time_duration.sum"\n'
            '"0","1","python","h","k","1,000"\n')
    kernels = parse_raw_csv(text)
    assert kernels[0].value("gpu__time_duration.sum") == 1000.0
    assert parse_raw_csv("==ERROR== something\n") == []
    with pytest.raises(ValueError, match="Kernel Name"):
        parse_raw_csv('"a","b"\n"1","2"\n')


def test_details_page_and_nsight_python_long_format():
    kernels = parse_ncu_csv((FIXTURES / "synthetic_details_page_sm90.csv").read_text())
    assert len(kernels) == 1 and kernels[0].cc == "9.0"
    assert kernels[0].value("gpu__time_duration.sum") == pytest.approx(689340.0)
    assert kernels[0].value("dram__bytes_read.sum") == pytest.approx(2.15e9)
    nsight = ("Annotation,Value,Metric,Unit,Kernel,GPU,Host,ComputeClock,MemoryClock\n"
              "crucible_candidate,512128,gpu__time_duration.sum,nsecond,flash_kernel,NVIDIA H200,h,1980,3201\n"
              "crucible_candidate,93.12,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,%,"
              "flash_kernel,NVIDIA H200,h,1980,3201\n")
    ks = parse_long_csv(nsight)
    assert [k.name for k in ks] == ["flash_kernel"]
    assert ks[0].value("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed") == 93.12


def test_finish_summary_lists_missing_metrics_and_arch():
    s = ProfileSummary(backend="ncu", status=OK, raw_csv=CUDA_CORES_CSV.read_text(),
                       requested_metrics=METRICS + ["sm__not_a_metric.sum"])
    s = finish_summary(s, parse_raw_csv)
    assert s.status == OK and s.arch == "sm_90" and len(s.kernels) == 2
    assert s.missing_metrics == ["l1tex__t_sector_hit_rate.pct", "sm__not_a_metric.sum"]
    empty = finish_summary(ProfileSummary(backend="ncu", status=OK, raw_csv="==PROF== nothing\n"), parse_raw_csv)
    assert empty.status == NO_KERNELS and NVTX_INCLUDE in empty.reason
    broken = finish_summary(ProfileSummary(backend="ncu", status=OK, raw_csv='"x","y"\n"1","2"\n'), parse_raw_csv)
    assert broken.status == FAILED and "parse" in broken.reason


def test_summary_json_round_trip_leaves_raw_bytes_out():
    s = finish_summary(ProfileSummary(backend="ncu", status=OK, raw_csv=TRITON_CSV.read_text(), report=b"\x00rep",
                                      workload_uuid="u1"), parse_raw_csv)
    data = json.loads(json.dumps(s.to_json()))
    assert "report" not in data and "raw_csv" not in data
    back = ProfileSummary.from_json(data)
    assert back.kernels[0].metrics == s.kernels[0].metrics and back.arch == "sm_90" and back.report is None
    assert KernelProfile.from_json(s.kernels[0].to_json()) == s.kernels[0]


# ---------------------------------------------------------------------------------------------
# What went wrong


@pytest.mark.parametrize("rc, text, status, words", [
    (1, PERMISSION_TEXT, NO_PERMISSION, "ERR_NVGPUCTRPERM"),
    (127, "ncu: command not found", UNAVAILABLE, "not found"),
    (1, "/bin/sh: 1: ncu: not found", UNAVAILABLE, "not found"),
    (1, "==ERROR== Failed to initialize the profiler: LibraryNotLoaded", UNAVAILABLE, "LibraryNotLoaded"),
    (0, "==PROF== Connected\n==WARNING== No kernels were profiled.\n", NO_KERNELS, "NVTX"),
    (2, "==ERROR== The application returned an error code (2).", FAILED, "error code (2)"),
    (1, "", FAILED, "exit code 1"),
    (0, "==PROF== Report: /tmp/x.ncu-rep", OK, ""),
    (1, "==ERROR== Failed to find metric sm__nope.sum", FAILED, "exit code 1"),
])
def test_diagnose(rc, text, status, words):
    got, reason = diagnose(rc, text)
    assert got == status and words in reason


def test_failed_metric_names_match_plain_and_regex_forms():
    requested = ["l1tex__t_sector_hit_rate.pct", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
                 "sm__inst_executed_pipe_tensor_op_gmma.sum"]
    text = ("==ERROR== Failed to find metric regex:^l1tex__t_sector_hit_rate\\.(pct|ratio)$\n"
            "==ERROR== Failed to find metric sm__inst_executed_pipe_tensor_op_gmma.sum\n")
    assert failed_metric_names(text, requested) == ["l1tex__t_sector_hit_rate.pct",
                                                    "sm__inst_executed_pipe_tensor_op_gmma.sum"]
    assert failed_metric_names("all fine", requested) == []


def test_parse_ncu_version():
    text = ("NVIDIA (R) Nsight Compute Command Line Profiler\nCopyright (c) 2018-2025 NVIDIA Corporation\n"
            "Version 2025.3.1.0 (build 36398880) (public-release)\n")
    assert parse_ncu_version(text) == (2025, 3, 1, 0)
    assert parse_ncu_version("garbage") is None


# ---------------------------------------------------------------------------------------------
# Backend selection (pure)

OLD_NCU, NEW_NCU = (2025, 3, 1, 0), (2026, 2, 1, 0)


@pytest.mark.parametrize("preference, ncu, nsight, chosen, words", [
    ("auto", OLD_NCU, None, "ncu", "not installed"),
    ("auto", NEW_NCU, (1, 1, 0), "nsight", "nsight-python 1.1.0"),
    ("auto", OLD_NCU, (1, 1, 0), "ncu", "2026.2.1"),
    ("auto", NEW_NCU, (0, 9, 1), "ncu", "older than 1.0"),
    ("auto", None, (1, 1, 0), None, "ncu not found"),
    ("auto", None, None, None, "ncu not found"),
    ("nsight", OLD_NCU, (1, 0, 0), None, "needs ncu >= 2026.2.1"),
    ("nsight", NEW_NCU, (1, 0, 0), "nsight", "nsight-python 1.0.0"),
    ("nsight", NEW_NCU, None, None, "not installed"),
    ("ncu", NEW_NCU, (1, 1, 0), "ncu", "ncu 2026.2.1"),
    ("ncu", None, None, None, "ncu not found"),
])
def test_choose_backend(preference, ncu, nsight, chosen, words):
    name, why = choose_backend(preference, ncu, nsight)
    assert name == chosen and words in why


def test_choose_backend_rejects_unknown_names():
    with pytest.raises(ValueError, match="auto, ncu or nsight"):
        choose_backend("perf", OLD_NCU, None)


# ---------------------------------------------------------------------------------------------
# A fake ncu on PATH

FAKE_NCU = r'''#!{python}
import json, os, subprocess, sys, time
MODE, FIXTURE, STATE, VERSION = {mode!r}, {fixture!r}, {state!r}, {version!r}
args = sys.argv[1:]

def record(kind, **kw):
    with open(os.path.join(STATE, "calls.jsonl"), "a") as f:
        f.write(json.dumps(dict(kind=kind, args=args, **kw)) + "\n")

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
    sys.stdout.write(open(FIXTURE).read())
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
    emit(open(FIXTURE).read())
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
        path.write_text(FAKE_NCU.format(python=sys.executable, mode=mode, fixture=str(fixture), state=str(state),
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
                        isolate_network=False, allow_cpu=False)
        return ProfileRequest(solution_path=sol, workload_uuid=uuid, dataset_root=tiny_dataset_root,
                              **{**defaults, **kw})

    return build


def test_ncu_backend_end_to_end_with_report(fake_ncu, request_for):
    ncu = fake_ncu("ok")
    profiler = select_backend("auto", ncu=ncu)
    assert isinstance(profiler, NcuProfiler) and profiler.available()[0] and profiler.version == "2025.3.1.0"
    summary = profiler.profile(request_for())
    assert summary.status == OK, summary.reason + summary.log
    assert summary.backend == "ncu" and summary.arch == "sm_90" and summary.workload_uuid.endswith("000")
    assert [k.name for k in summary.kernels] == ["_gqa_decode_kernel"]
    assert summary.report and summary.report.startswith(b"NVIDIA Nsight Compute report")
    assert summary.missing_metrics == []
    cmd = summary.command
    assert cmd[0] == ncu and cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--nvtx-include") + 1] == "crucible_candidate/" and "--nvtx" in cmd
    assert cmd[cmd.index("--metrics") + 1] == ",".join(METRICS)
    assert cmd[cmd.index("-m") + 1] == "harness.profiling.target"
    calls = fake_ncu.calls()
    assert [c["kind"] for c in calls] == ["collect", "target", "import"]
    imported = calls[2]["args"]
    assert imported[imported.index("--page") + 1] == "raw" and "--csv" in imported and "--print-units" in imported
    collect = calls[0]
    # the scrubbed worker environment: no secrets, a private HOME that is also the working folder
    assert "ANTHROPIC_API_KEY" not in collect["env"] and collect["home"] == collect["cwd"]
    assert "crucible-profile-" in collect["home"] and not Path(collect["home"]).exists()  # cleaned up
    assert calls[1]["rc"] == 0 and "profiled one call" in summary.log


def test_ncu_backend_csv_into_log_file(fake_ncu, request_for, tmp_path):
    ncu = fake_ncu("ok", fixture=CUDA_CORES_CSV)
    keep = tmp_path / "kept"
    summary = NcuProfiler(ncu, export_report=False).profile(request_for(keep_workdir=keep))
    assert summary.status == OK and len(summary.kernels) == 2 and summary.report is None
    assert "--export" not in summary.command and "--page" in summary.command
    assert summary.missing_metrics == ["l1tex__t_sector_hit_rate.pct"]  # n/a in the CSV
    assert (keep / "ncu.log").exists() and (keep / "target_status.json").exists()
    assert json.loads((keep / "target_status.json").read_text())["ok"] is True


def test_permission_error_is_a_status(fake_ncu, request_for):
    summary = NcuProfiler(fake_ncu("perm")).profile(request_for())
    assert summary.status == NO_PERMISSION and "ERR_NVGPUCTRPERM" in summary.reason
    assert "NVreg_RestrictProfilingToAdminUsers" in summary.reason and summary.kernels == []


def test_missing_ncu_is_a_status_not_a_crash(fake_ncu, request_for, tmp_path):
    broken = fake_ncu("notfound")
    profiler = select_backend("auto", ncu=broken)
    assert isinstance(profiler, UnavailableProfiler)
    ok, why = profiler.available()
    assert not ok and "not found" in why
    assert profiler.profile(request_for()).status == UNAVAILABLE
    absent = select_backend("ncu", ncu=str(tmp_path / "no" / "ncu"))
    summary = absent.profile(request_for())
    assert summary.status == UNAVAILABLE and summary.backend == "none" and summary.reason
    direct = NcuProfiler(str(tmp_path / "no" / "ncu")).profile(request_for())
    assert direct.status == UNAVAILABLE


def test_unknown_metric_is_dropped_and_the_profile_retried(fake_ncu, request_for):
    summary = NcuProfiler(fake_ncu("badmetric")).profile(request_for())
    assert summary.status == OK, summary.reason
    assert "l1tex__t_sector_hit_rate.pct" in summary.missing_metrics
    collects = [c for c in fake_ncu.calls() if c["kind"] == "collect"]
    assert len(collects) == 2
    second = collects[1]["args"]
    assert "l1tex__t_sector_hit_rate.pct" not in second[second.index("--metrics") + 1]


def test_no_kernels_in_the_range(fake_ncu, request_for):
    summary = NcuProfiler(fake_ncu("nokernels")).profile(request_for())
    assert summary.status == NO_KERNELS and "crucible_candidate/" in summary.reason


def test_a_hanging_target_is_killed_at_the_deadline(fake_ncu, request_for):
    import time

    started = time.monotonic()
    summary = NcuProfiler(fake_ncu("hang")).profile(request_for(timeout_s=3))
    assert summary.status == TIMEOUT and time.monotonic() - started < 30


def test_a_failing_candidate_is_failed_with_its_error(fake_ncu, request_for):
    bad = ("def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):\n"
           "    raise RuntimeError('boom')\n")
    summary = NcuProfiler(fake_ncu("ok")).profile(request_for(bad))
    assert summary.status == FAILED and "RuntimeError: boom" in summary.reason
    assert "Traceback" in summary.log


def test_nsight_backend_selection_only(fake_ncu, monkeypatch):
    monkeypatch.setattr(backends, "nsight_python_version", lambda: (1, 1, 0))
    new = fake_ncu("ok", version="2026.2.1.0")
    chosen = select_backend("auto", ncu=new)
    assert isinstance(chosen, NsightPythonProfiler) and chosen.available()[0]
    old = fake_ncu("ok", version="2025.3.1.0")
    assert isinstance(select_backend("auto", ncu=old), NcuProfiler)
    refused = select_backend("nsight", ncu=old)
    assert isinstance(refused, UnavailableProfiler) and "2026.2.1" in refused.available()[1]
    monkeypatch.setattr(backends, "nsight_python_version", lambda: None)
    assert not NsightPythonProfiler(new).available()[0]


# ---------------------------------------------------------------------------------------------
# The target process


def _target(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    from harness.runner import scrubbed_environment

    return subprocess.run([sys.executable, "-m", "harness.profiling.target", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=scrubbed_environment({"TRITON_INTERPRET": "1"}, home=tmp_path))


def test_profile_target_runs_one_call_and_reports(tmp_path, tiny_dataset_root):
    sol = tmp_path / "s.json"
    sol.write_text(json.dumps(solution_dict(TORCH_CANDIDATE)))
    status = tmp_path / "status.json"
    common = ["--solution", str(sol), "--workload", "tiny_b3_t96", "--seed", "3", "--dataset", str(tiny_dataset_root),
              "--status-file", str(status)]
    no_gpu = _target(common, tmp_path)
    assert no_gpu.returncode == 3 and json.loads(status.read_text())["error"] == "no GPU in this process"
    ran = _target(common + ["--allow-cpu", "--warmup", "2"], tmp_path)
    assert ran.returncode == 0, ran.stderr
    data = json.loads(status.read_text())
    assert data["ok"] and data["label"] == "tiny_b3_t96" and data["definition"] == KV8_PS1
    assert "NVTX unavailable" in ran.stderr  # CPU torch: the range is a no-op, said so
    missing = _target(["--solution", str(sol), "--workload", "nope", "--dataset", str(tiny_dataset_root),
                       "--status-file", str(status), "--allow-cpu"], tmp_path)
    assert missing.returncode == 2 and "no workload 'nope'" in json.loads(status.read_text())["error"]


# ---------------------------------------------------------------------------------------------
# Archive


def test_profiles_table_migration_and_records(tmp_path):
    archive = Archive(tmp_path / "a")
    assert "profiles" in archive.db.table_names()  # harness.archive.MIGRATIONS carries m004_profiles
    ensure_profiles_table(archive)
    ensure_profiles_table(archive)  # idempotent
    assert "profiles" in archive.db.table_names()
    assert "m004_profiles" in {r["name"] for r in archive.db["_migrations"].rows}
    cols = set(archive.db["profiles"].columns_dict)
    assert cols == {"id", "submission_id", "solution_hash", "workload_uuid", "backend", "status", "raw_blob",
                    "digest", "created_at"}
    s = finish_summary(ProfileSummary(backend="ncu", status=OK, raw_csv=TRITON_CSV.read_text(), report=b"REPORT",
                                      workload_uuid="w1", solution_hash="abc", log="==PROF== x"), parse_raw_csv)
    row_id = record_profile(archive, s, {"digests": [{"kernel": "_gqa_decode_kernel"}]}, submission_id=None)
    unavailable = ProfileSummary(backend="none", status=UNAVAILABLE, reason="ncu not found", workload_uuid="w2",
                                 solution_hash="abc")
    record_profile(archive, unavailable, {"digests": []})
    rows = archived_profiles(archive, solution_hash="abc")
    assert [r["status"] for r in rows] == [UNAVAILABLE, OK]
    ok_row = next(r for r in rows if r["id"] == row_id)
    assert archive.get_blob(ok_row["raw_blob"]) == b"REPORT"
    assert archive.get_blob(ok_row["digest"]["csv_blob"]).decode() == TRITON_CSV.read_text()
    assert ok_row["digest"]["digests"][0]["kernel"] == "_gqa_decode_kernel" and ok_row["digest"]["arch"] == "sm_90"
    assert rows[0]["raw_blob"] is None and rows[0]["digest"]["reason"] == "ncu not found"


def test_migration_appended_by_the_lead_runs_once(tmp_path):
    assert "m004_profiles" in [m.__name__ for m in archive_mod.MIGRATIONS]
    archive = Archive(tmp_path / "a")
    assert "profiles" in archive.db.table_names()
    ensure_profiles_table(archive)
    Archive(tmp_path / "a")  # reopening applies nothing twice
    assert [r["name"] for r in archive.db["_migrations"].rows].count("m004_profiles") == 1


# ---------------------------------------------------------------------------------------------
# `harness profile`


def _invoke(args: list[str]):
    from controller.profile_cli import profile

    return CliRunner().invoke(profile, args, catch_exceptions=False)


def test_cli_profiles_a_solution_file_and_archives_it(fake_ncu, tmp_path, tiny_dataset_root, monkeypatch):
    ncu = fake_ncu("ok")
    monkeypatch.setattr(backends, "find_ncu", lambda env_path=None: ncu)
    sol = tmp_path / "sol.json"
    sol.write_text(json.dumps(solution_dict(TORCH_CANDIDATE)))
    (tmp_path / "arch").mkdir()
    result = _invoke([str(sol), "--dataset", str(tiny_dataset_root), "--archive", str(tmp_path / "arch"),
                      "--arch", "sm_90", "--no-net-isolation", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["backend"] == "ncu" and data["submission_id"] is None
    # default selection: one representative per regime (the tiny ps1 workloads are one regime without timing)
    assert len(data["profiles"]) == 1 and data["profiles"][0]["status"] == OK
    assert data["profiles"][0]["digests"][0]["kernel"] == "_gqa_decode_kernel"
    assert data["evidence"]["kind"] == "profile" and len(data["markdown"].encode()) <= 4096
    assert "`_gqa_decode_kernel`" in data["markdown"]
    rows = archived_profiles(Archive(tmp_path / "arch"))
    assert len(rows) == 1 and rows[0]["backend"] == "ncu" and rows[0]["raw_blob"]


def test_cli_without_ncu_says_so_and_exits_3(tmp_path, tiny_dataset_root, monkeypatch):
    monkeypatch.setattr(backends, "find_ncu", lambda env_path=None: None)
    sol = tmp_path / "sol.json"
    sol.write_text(json.dumps(solution_dict(TORCH_CANDIDATE)))
    (tmp_path / "arch").mkdir()
    result = _invoke([str(sol), "--dataset", str(tiny_dataset_root), "--archive", str(tmp_path / "arch"),
                      "-w", "tiny_b2_t40", "-w", "tiny_b3_t96", "--arch", "sm_90"])
    assert result.exit_code == 3
    assert "Not profiled" not in result.stdout  # profiles exist, each saying why
    assert "not profiled (unavailable: ncu not found" in result.stdout
    assert len(archived_profiles(Archive(tmp_path / "arch"))) == 2


def test_cli_profiles_a_submission_by_id_using_its_measurements(fake_ncu, tmp_path, tiny_dataset_root, monkeypatch):
    from harness.schema import Solution, dump_json

    ncu = fake_ncu("ok")
    monkeypatch.setattr(backends, "find_ncu", lambda env_path=None: ncu)
    archive = Archive(tmp_path / "arch")
    solution = Solution.model_validate(solution_dict(TORCH_CANDIDATE))
    archive.put_solution(dump_json(solution), solution.content_hash)
    env_id = archive.put_environment({"hardware": "NVIDIA H200"})
    sub = archive.start_submission(solution.content_hash, solution.name, KV8_PS1, "tests", {}, env_id)
    # tiny_b2_t40: 10 us over a 2 us floor; tiny_b3_t96: 5 us over 2 us (both small-batch, latency-bound)
    for i, (lat, floor) in enumerate([(0.010, 0.002), (0.005, 0.002)]):
        archive.add_evaluation({"submission_id": sub, "definition": KV8_PS1,
                                "workload_uuid": f"00000000-0000-4000-8000-{i:012d}", "status": "PASSED",
                                "latency_ms": lat, "extra": {"floor_ms": floor, "fraction_of_floor": floor / lat,
                                                             "speedup_vs_flashinfer_kernel": 1.5,
                                                             "kernel_latency_ms": lat}})
    archive.finish_submission(sub, "PASSED")
    result = _invoke([str(sub), "--dataset", str(tiny_dataset_root), "--archive", str(tmp_path / "arch"),
                      "--arch", "sm_90", "--no-net-isolation", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["submission_id"] == sub
    # the representative of the regime is the workload with the most time above the floor
    assert [p["label"] for p in data["profiles"]] == ["tiny_b2_t40"]
    assert data["profiles"][0]["regime"] == "small-batch latency-bound"
    ev = data["evidence"]
    assert ev["hardware"] == "NVIDIA H200" and ev["gaps"][0]["label"] == "tiny_b2_t40"
    assert ev["regimes"][0]["share"] == pytest.approx(1.0)
    assert archived_profiles(Archive(tmp_path / "arch"), submission_id=sub)[0]["status"] == OK
    # the same solution as a file finds that submission's measurements
    sol = tmp_path / "sol.json"
    sol.write_text(json.dumps(solution_dict(TORCH_CANDIDATE)))
    again = _invoke([str(sol), "--dataset", str(tiny_dataset_root), "--archive", str(tmp_path / "arch"),
                     "--arch", "sm_90", "--no-net-isolation", "--json"])
    assert json.loads(again.stdout)["submission_id"] == sub


def test_cli_rejects_what_is_neither_file_nor_id(tmp_path, tiny_dataset_root):
    from controller.profile_cli import profile

    (tmp_path / "a").mkdir()
    result = CliRunner().invoke(profile, ["not-a-thing", "--dataset", str(tiny_dataset_root),
                                          "--archive", str(tmp_path / "a")])
    assert result.exit_code == 2 and "neither a solution file nor a submission id" in result.output
