"""harness.profiling on CPU: the whole subprocess path (ncu -> harness.profiling.target -> report -> CSV -> archive)
driven by a fake `ncu` executable on PATH, the profiles table, and the CLI. The parsing, statuses and backend
selection are in test_profile_parse.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import harness.archive.database as archive_mod
import harness.profiling.backends as backends
from harness.archive.database import Archive
from harness.profiling import (FAILED, NO_KERNELS, NO_PERMISSION, OK, TIMEOUT, UNAVAILABLE, NcuProfiler,
                               NsightPythonProfiler, ProfileSummary, UnavailableProfiler,
                               archived_profiles, ensure_profiles_table, finish_summary, parse_raw_csv, record_profile,
                               select_backend)

from support import KV8_PS1, TORCH_CANDIDATE, solution_dict
from profile_support import CUDA_CORES_CSV, METRICS, TRITON_CSV

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
    assert "crucible-candidate-" in collect["home"] and not Path(collect["home"]).exists()  # cleaned up
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
    from harness.sandbox.runner import scrubbed_environment

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
    assert "profiles" in archive.db.table_names()  # harness.archive.database.MIGRATIONS carries m004_profiles
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
    from harness.data.schema import Solution, dump_json

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
