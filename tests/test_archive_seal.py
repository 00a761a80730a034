"""Tamper evidence: the archive trusts only the harness. A finished submission's rows are sealed (HMAC under
the archive's seal.key); a row changed, added or deleted with a plain sqlite3 connection reads as modified in
the archive, in `harness show/list` and in the report."""

from __future__ import annotations

import json
import sqlite3
import stat

import pytest
from click.testing import CliRunner

import harness.archive.database as archive_mod
from harness.archive.database import ARCHIVE_DB, Archive
from harness.archive.seal import MODIFIED_WARNING, SEAL_KEY, SealCheck, canonical, classify, seal_value
from harness.archive.views import add_artifact

SOLUTION = {"name": "cand", "definition": "defn", "author": "tests",
            "spec": {"language": "python", "entry_point": "kernel.py::run"},
            "sources": [{"path": "kernel.py", "content": "def run(): pass\n"}]}
KEY = bytes(range(32))


# -- the pure part: canonical text, HMAC and the verdict on it ---------------------------------------------------


def record(**changes) -> dict:
    base = {"submission": {"id": 7, "solution_hash": "h", "solution_name": "s", "definition": "d", "author": "a",
                           "status": "PASSED", "message": "", "options": "{}", "scores": '{"vs_reference": 1.5}',
                           "environment_id": "e", "created_at": "t0", "finished_at": "t1", "seal": "ignored"},
            "evaluations": [{"id": 1, "submission_id": 7, "status": "PASSED", "latency_ms": 0.1 + 0.2},
                            {"id": 2, "submission_id": 7, "status": "PASSED", "latency_ms": 1.25}],
            "timing_samples": [{"id": 1, "evaluation_id": 1, "median_ms": 0.3}],
            "artifacts": [{"id": 1, "submission_id": 7, "kind": "sass", "blob": "b"}],
            "first_sealed_id": 1}
    for path, value in changes.items():
        table, _, rest = path.partition("__")
        if not rest:
            base[table] = value
            continue
        index, _, column = rest.partition("__")
        target = base[table] if not index.isdigit() else base[table][int(index)]
        target[column if index.isdigit() else index] = value
    return base


SAME = [
    ("the stored seal column is not sealed", {"submission__seal": "other"}),
    ("a NULL column equals a missing one (a later migration's new column)", {"evaluations__0__new_column": None}),
    ("rows are sealed in id order whatever order they are given in",
     {"evaluations": list(reversed(record()["evaluations"]))}),
]
CHANGED = [
    ("status", {"submission__status": "INCORRECT_NUMERICAL"}),
    ("scores", {"submission__scores": '{"vs_reference": 9.5}'}),
    ("an evaluation's latency", {"evaluations__1__latency_ms": 1.2500001}),
    ("an evaluation's status", {"evaluations__0__status": "RUNTIME_ERROR"}),
    ("a value set to NULL", {"evaluations__1__latency_ms": None}),
    ("an evaluation deleted", {"evaluations": record()["evaluations"][:1]}),
    ("an evaluation added", {"evaluations": [*record()["evaluations"], {"id": 3, "status": "PASSED"}]}),
    ("a timing sample", {"timing_samples__0__median_ms": 0.01}),
    ("an artifact removed", {"artifacts": []}),
    ("where sealing began", {"first_sealed_id": 99}),
]


@pytest.mark.parametrize("why,changes", SAME, ids=[c[0] for c in SAME])
def test_canonical_text_ignores(why, changes):
    assert canonical(record(**changes)) == canonical(record())
    assert seal_value(KEY, record(**changes)) == seal_value(KEY, record())


@pytest.mark.parametrize("what,changes", CHANGED, ids=[c[0] for c in CHANGED])
def test_the_seal_covers(what, changes):
    assert seal_value(KEY, record(**changes)) != seal_value(KEY, record())


def test_canonical_text_is_sorted_compact_json():
    text = canonical(record()).decode()
    assert json.loads(text)["submission"]["status"] == "PASSED"
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    assert seal_value(KEY, record()).startswith("v1:") and seal_value(bytes(32), record()) != seal_value(KEY, record())


GOOD = seal_value(KEY, record())
CLASSIFY = [
    ("sealed", record(), GOOD, KEY, "sealed"),
    ("changed after sealing", record(submission__status="FAILED"), GOOD, KEY, "modified"),
    ("another key", record(), GOOD, bytes(32), "modified"),
    ("a garbage seal", record(), "v1:00", KEY, "modified"),
    ("running, no seal yet", record(submission__status="RUNNING"), None, KEY, "unsealed"),
    ("running but sealed (status set back)", record(submission__status="RUNNING"), GOOD, KEY, "modified"),
    ("archived before seals existed", record(first_sealed_id=8), None, KEY, "unsealed"),
    ("finished after seals began, seal removed", record(), None, KEY, "modified"),
    ("seal epoch row deleted", record(first_sealed_id=None), None, KEY, "modified"),
    ("key missing", record(), GOOD, None, "unverifiable"),
    ("key missing, no seal", record(), None, None, "unverifiable"),
]


@pytest.mark.parametrize("case,rec,seal,key,state", CLASSIFY, ids=[c[0] for c in CLASSIFY])
def test_classify(case, rec, seal, key, state):
    check = classify(rec, seal, key, "seal.key missing")
    assert isinstance(check, SealCheck) and check.state == state and check.detail
    if state == "unverifiable":
        assert check.detail == "cannot verify: seal.key missing"


# -- the archive ---------------------------------------------------------------------------------------------------


def sample(trial: int) -> dict:
    return {"role": "candidate", "trial": trial, "backend": "cuda_event", "aligned": 1, "median_ms": 0.1 + 0.2 * trial,
            "samples": [0.1, 0.7]}


def finished_submission(archive: Archive, status: str = "PASSED", score: float = 1.5, name: str = "cand") -> int:
    sol = {**SOLUTION, "name": name}
    archive.put_solution(sol, f"hash-{name}")
    env = archive.put_environment({"host": "box", "hardware": "cpu"})
    sid = archive.start_submission(f"hash-{name}", name, "defn", "tests", {"workloads": ["u0", "u1"]}, env)
    for i in range(2):
        archive.add_evaluation({"submission_id": sid, "definition": "defn", "workload_uuid": f"u{i}",
                                "workload_label": f"w{i}", "status": "PASSED", "latency_ms": 0.1 + 0.2 * (i + 1),
                                "speedup_factor": 1 / 3, "max_absolute_error": 1e-7, "extra": {"audits": []}},
                               [sample(0), sample(1)])
    add_artifact(archive, sid, "build_log", "[build] ok\n")
    archive.finish_submission(sid, status, "", {"vs_reference": score, "promotable": True})
    return sid


def raw(archive: Archive, sql: str, params=()) -> None:
    """What someone does behind the harness's back: a separate connection."""
    conn = sqlite3.connect(archive.folder / ARCHIVE_DB)
    with conn:
        conn.execute(sql, params)
    conn.close()


def state(archive: Archive, sid: int) -> str:
    return Archive(archive.folder, create=False).verify_seal(sid).state  # a fresh reader


def test_a_finished_submission_is_sealed_with_a_private_key(archive):
    sid = finished_submission(archive)
    check = archive.verify_seal(sid)
    assert check.state == "sealed", check.detail
    assert state(archive, sid) == "sealed"
    key = archive.folder / SEAL_KEY
    assert len(key.read_bytes()) == 32
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert archive.db.execute("select seal from submissions where id = ?", [sid]).fetchone()[0].startswith("v1:")


TAMPERING = [
    ("status", "update submissions set status = 'PASSED' where id = ?", "FAILED"),
    ("scores", "update submissions set scores = '{\"vs_reference\": 99.0, \"promotable\": true}' where id = ?", None),
    ("an evaluation's latency", ("update evaluations set latency_ms = latency_ms / 10 "
                                 "where id = (select min(id) from evaluations where submission_id = ?)"), None),
    ("an evaluation's status", ("update evaluations set status = 'INCORRECT_NUMERICAL' "
                                "where id = (select max(id) from evaluations where submission_id = ?)"), None),
    ("an evaluation deleted", ("delete from evaluations "
                               "where id = (select max(id) from evaluations where submission_id = ?)"), None),
    ("a fake evaluation inserted", ("insert into evaluations (submission_id, definition, workload_uuid, status, "
                                    "latency_ms) values (?, 'defn', 'u9', 'PASSED', 0.001)"), None),
    ("a timing sample", ("update timing_samples set median_ms = 0.001 where evaluation_id in "
                         "(select id from evaluations where submission_id = ?)"), None),
    ("an artifact deleted", "delete from artifacts where submission_id = ?", None),
    ("the seal removed", "update submissions set seal = NULL where id = ?", None),
]


@pytest.mark.parametrize("what,sql,status", TAMPERING, ids=[t[0] for t in TAMPERING])
def test_a_change_behind_the_harness_reads_as_modified(archive, what, sql, status):
    sid = finished_submission(archive, status=status or "PASSED")
    raw(archive, sql, [sid])
    check = Archive(archive.folder, create=False).verify_seal(sid)
    assert check.state == "modified", (what, check)
    assert archive.verify_seal(sid).state == "modified"


def test_moving_where_sealing_began_breaks_every_seal(archive):
    a, b = finished_submission(archive, name="a"), finished_submission(archive, name="b")
    raw(archive, "update seal_epoch set first_sealed_id = 100")
    assert [state(archive, a), state(archive, b)] == ["modified", "modified"]


def test_an_honest_artifact_after_the_verdict_is_sealed_too(archive):
    sid = finished_submission(archive)
    before = archive.db.execute("select seal from submissions where id = ?", [sid]).fetchone()[0]
    add_artifact(archive, sid, "sass", "HMMA.16816.F32.BF16 64\n")
    after = archive.db.execute("select seal from submissions where id = ?", [sid]).fetchone()[0]
    assert after != before
    assert state(archive, sid) == "sealed"


def test_the_harness_never_reseals_a_modified_submission(archive):
    sid = finished_submission(archive, status="FAILED")
    raw(archive, "update submissions set status = 'PASSED' where id = ?", [sid])
    add_artifact(archive, sid, "sass", "x\n")  # a later honest write must not bless the change
    assert state(archive, sid) == "modified"


def test_interrupted_and_re_finished_submissions_are_sealed(archive):
    sid = finished_submission(archive, status="INTERRUPTED")
    archive.finish_submission(sid, "INTERRUPTED", "evaluated again as another submission")
    assert state(archive, sid) == "sealed"


def test_running_submissions_are_unsealed(archive):
    archive.put_solution(SOLUTION, "h")
    sid = archive.start_submission("h", "cand", "defn", "tests", {}, None)
    archive.add_evaluation({"submission_id": sid, "definition": "defn", "status": "PASSED"})
    check = archive.verify_seal(sid)
    assert check.state == "unsealed" and "running" in check.detail


def test_a_missing_key_is_unverifiable_and_not_replaced(archive):
    sid = finished_submission(archive)
    (archive.folder / SEAL_KEY).unlink()
    check = Archive(archive.folder, create=False).verify_seal(sid)
    assert check.state == "unverifiable" and check.detail == "cannot verify: seal.key missing"
    # A new key would turn every honest seal into "modified": the next verdict goes unsealed instead.
    other = finished_submission(archive, name="other")
    assert not (archive.folder / SEAL_KEY).exists()
    assert archive.verify_seal(other).state == "unverifiable"


def test_rows_archived_before_seals_existed_are_unsealed(tmp_path, monkeypatch):
    folder = tmp_path / "old"
    with monkeypatch.context() as m:
        m.setattr(archive_mod, "MIGRATIONS", [f for f in archive_mod.MIGRATIONS if f.__name__ != "m006_seals"])
        old = Archive(folder)
        old.put_solution(SOLUTION, "h")
        sid = old.start_submission("h", "cand", "defn", "tests", {}, None)
        old.db["submissions"].update(sid, {"status": "PASSED", "finished_at": "2026-01-01"})
        old.db.close()
    upgraded = Archive(folder)
    check = upgraded.verify_seal(sid)
    assert check.state == "unsealed" and "before seals existed" in check.detail
    assert finished_submission(upgraded, name="new") and state(upgraded, sid + 1) == "sealed"


# -- harness show / list / report ----------------------------------------------------------------------------------


def cli(*args: str):
    from harness.cli import main

    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_show_and_list_carry_the_seal(archive):
    good = finished_submission(archive, name="good")
    bad = finished_submission(archive, name="bad", status="FAILED")
    raw(archive, "update submissions set status = 'PASSED' where id = ?", [bad])
    folder = str(archive.folder)

    assert json.loads(cli("show", str(good), "--archive", folder, "--json"))["seal"]["state"] == "sealed"
    shown = json.loads(cli("show", str(bad), "--archive", folder, "--json"))["seal"]
    assert shown["state"] == "modified" and shown["detail"]
    assert MODIFIED_WARNING in cli("show", str(bad), "--archive", folder)
    assert MODIFIED_WARNING not in cli("show", str(good), "--archive", folder)

    rows = {r["id"]: r for r in json.loads(cli("list", "--archive", folder, "--json"))}
    assert rows[good]["seal_state"] == "sealed" and rows[bad]["seal_state"] == "modified"
    table = cli("list", "--archive", folder).splitlines()
    assert any(MODIFIED_WARNING in line for line in table if "bad" in line)
    assert not any(MODIFIED_WARNING in line for line in table if "good" in line)


def test_the_report_warns_and_never_ranks_a_modified_submission_first(archive, tmp_path):
    from harness.review import gather_report, write_report

    honest = finished_submission(archive, name="honest", score=1.5)
    forged = finished_submission(archive, name="forged", score=0.5)
    raw(archive, "update submissions set scores = '{\"vs_reference\": 50.0, \"promotable\": true}' where id = ?",
        [forged])
    data = gather_report(archive)
    section = data.sections[0]
    assert section.best.submission_id == honest
    assert [c.submission_id for c in section.leaderboard] == [honest, forged]
    assert any(MODIFIED_WARNING in n for n in data.notices)
    index = write_report(archive, tmp_path / "report", data=data, backend="builtin")
    html = index.read_text()
    assert MODIFIED_WARNING in html
    row = next(r for r in html.split("<tr") if f'sub-{forged}.html' in r and "leaderboard" not in r)
    assert MODIFIED_WARNING in row
    assert MODIFIED_WARNING in (tmp_path / "report" / f"candidates/sub-{forged}.html").read_text()
    assert MODIFIED_WARNING not in (tmp_path / "report" / f"candidates/sub-{honest}.html").read_text()
