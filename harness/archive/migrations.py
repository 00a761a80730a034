"""The archive's migrations: small functions, applied once each, in order (harness/archive/database.py: MIGRATIONS).

They depend on sqlite-utils only, so the modules that own a table (harness/profiling/archive.py,
harness/archive/views.py) can
use them without importing the archive. The review views' migration, m005_review_views, lives with the views
it creates (harness/archive/views.py).
"""

from __future__ import annotations

import datetime as dt

import sqlite_utils


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


# -- migrations: a list of small functions, applied once each, in order -------------------------------


def m001_core(db: sqlite_utils.Database) -> None:
    db["blobs"].create({"sha256": str, "size": int, "kind": str, "created_at": str}, pk="sha256")
    db["environments"].create({"id": str, "host": str, "hardware": str, "data": str, "created_at": str}, pk="id")
    db["solutions"].create({"hash": str, "name": str, "definition": str, "author": str, "language": str,
                            "entry_point": str, "blob": str, "created_at": str}, pk="hash")
    db["submissions"].create({"id": int, "solution_hash": str, "solution_name": str, "definition": str,
                              "author": str, "status": str, "message": str, "options": str,
                              "environment_id": str, "created_at": str, "finished_at": str},
                             pk="id", foreign_keys=[("solution_hash", "solutions", "hash")])
    db["evaluations"].create({"id": int, "submission_id": int, "definition": str, "workload_uuid": str,
                              "workload_label": str, "status": str, "max_absolute_error": float,
                              "max_relative_error": float, "matched_ratio": float, "latency_ms": float,
                              "reference_latency_ms": float, "speedup_factor": float, "aligned": int,
                              "timing_note": str, "message": str, "log_blob": str, "trace": str, "extra": str,
                              "environment_id": str, "started_at": str, "finished_at": str},
                             pk="id", foreign_keys=[("submission_id", "submissions", "id")])
    db["evaluations"].create_index(["submission_id"])
    db["evaluations"].create_index(["definition", "workload_uuid"])
    db["timing_samples"].create({"id": int, "evaluation_id": int, "role": str, "trial": int, "backend": str,
                                 "aligned": int, "median_ms": float, "samples": str},
                                pk="id", foreign_keys=[("evaluation_id", "evaluations", "id")])


def m002_baselines_and_scores(db: sqlite_utils.Database) -> None:
    # FlashInfer baseline latencies, measured once per GPU, toolchain and workload and reused.
    db["baseline_runs"].create({"id": int, "gpu_key": str, "toolchain": str, "definition": str, "workload_uuid": str,
                                "solution_hash": str, "solution_name": str, "status": str, "official_ms": float,
                                "kernel_ms": float, "created_at": str}, pk="id")
    db["baseline_runs"].create_index(["gpu_key", "toolchain", "definition", "workload_uuid", "solution_hash"])
    # The reference's official latency per GPU, toolchain, definition (content hash) and workload.
    db["reference_latency"].create({"key": str, "latency_ms": float, "created_at": str}, pk="key")
    db["submissions"].add_column("scores", str)


def m003_controller(db: sqlite_utils.Database) -> None:
    # The controller's own record (controller/store.py): runs of the loop, their rounds, every generation
    # request (archived before it is sent) and response (raw text blob, tokens, cost), every candidate (its
    # solution blob and the harness submission that judged it) and every promotion decision.
    db["runs"].create({"id": str, "definition": str, "provider": str, "config": str, "status": str,
                       "stop_reason": str, "created_at": str, "finished_at": str}, pk="id")
    db["rounds"].create({"id": int, "run_id": str, "round": int, "kind": str, "plan": str, "status": str,
                         "summary": str, "wall_s": float, "created_at": str, "finished_at": str},
                        pk="id", foreign_keys=[("run_id", "runs", "id")])
    db["rounds"].create_index(["run_id", "round"], unique=True)
    db["requests"].create({"id": int, "run_id": str, "round": int, "key": str, "kind": str, "hash": str,
                           "request": str, "created_at": str}, pk="id", foreign_keys=[("run_id", "runs", "id")])
    db["requests"].create_index(["run_id", "key"], unique=True)
    db["responses"].create({"id": int, "request_id": int, "provider": str, "model": str, "raw_blob": str,
                            "reply": str, "tokens_in": int, "tokens_out": int, "cost_usd": float, "wall_s": float,
                            "stopped": str, "error": str, "created_at": str},
                           pk="id", foreign_keys=[("request_id", "requests", "id")])
    db["responses"].create_index(["request_id"], unique=True)
    db["candidates"].create({"id": int, "run_id": str, "round": int, "request_id": int, "seq": int, "depth": int,
                             "parent_id": int, "solution_hash": str, "solution_name": str, "solution_blob": str,
                             "origin": str, "status": str, "reason": str, "submission_id": int,
                             "created_at": str, "finished_at": str},
                            pk="id", foreign_keys=[("run_id", "runs", "id")])
    db["candidates"].create_index(["run_id", "round"])
    db["decisions"].create({"id": int, "run_id": str, "round": int, "candidate_id": int, "incumbent_id": int,
                            "verdict": str, "rule": str, "reasons": str, "details": str, "exported": str,
                            "created_at": str}, pk="id", foreign_keys=[("run_id", "runs", "id")])
    db["decisions"].create_index(["run_id", "candidate_id"], unique=True)


def m004_profiles(db: sqlite_utils.Database) -> None:
    # Nsight Compute profiles (harness/profiling/archive.py): raw report + digest per (submission|solution, workload).
    db["profiles"].create({"id": int, "submission_id": int, "solution_hash": str, "workload_uuid": str,
                           "backend": str, "status": str, "raw_blob": str, "digest": str, "created_at": str}, pk="id")
    db["profiles"].create_index(["solution_hash", "workload_uuid"])
    db["profiles"].create_index(["submission_id"])


def m006_seals(db: sqlite_utils.Database) -> None:
    # The harness's HMAC over a finished submission's rows (harness/archive/seal.py), and where sealing began: rows
    # archived before this migration carry no seal and say so; a later one without a seal had it removed.
    db["submissions"].add_column("seal", str)
    first = (db.execute("select max(id) from submissions").fetchone()[0] or 0) + 1
    db["seal_epoch"].create({"id": int, "first_sealed_id": int, "created_at": str}, pk="id")
    db["seal_epoch"].insert({"id": 1, "first_sealed_id": first, "created_at": now()})


def m007_baseline_messages(db: sqlite_utils.Database) -> None:
    # A baseline that fails says why: its message and the content hash of its log (a blob), and the GPU memory
    # it held; and cached figures can be found by GPU model (not only by the one card they were measured on).
    db["baseline_runs"].add_column("message", str)
    db["baseline_runs"].add_column("log_blob", str)
    db["baseline_runs"].add_column("gpu_model", str)
    db["reference_latency"].add_column("gpu_model", str)


def m008_trusted_outputs(db: sqlite_utils.Database) -> None:
    # The reference's (and its float64 oracle's) outputs per GPU, toolchain, definition, workload, seed and
    # input code (harness/pipeline/reference_cache.py): read back by later sessions of the same archive.
    db["trusted_outputs"].create({"key": str, "header": str, "blob": str, "created_at": str}, pk="key")


def m009_agent_turns(db: sqlite_utils.Database) -> None:
    # The turns of a tool conversation (controller/agent): each model turn with its tool calls and their results,
    # written before the next call is sent, so a killed run resumes mid-conversation and a replay replays it.
    db["agent_turns"].create({"id": int, "run_id": str, "request_key": str, "turn": int, "payload": str,
                              "created_at": str}, pk="id", foreign_keys=[("run_id", "runs", "id")])
    db["agent_turns"].create_index(["run_id", "request_key", "turn"], unique=True)


def m010_baseline_busy(db: sqlite_utils.Database) -> None:
    # A baseline's GPU time per call beside its span: where they differ, the span is host work between kernels.
    db["baseline_runs"].add_column("busy_ms", float)
