"""`harness export` writes a trace set the official flashinfer_bench package loads; `harness import` reads it."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.pipeline.evaluate import Session, SubmitOptions
from harness.archive.export import export_trace_set, import_trace_set
from harness.data.schema import SchemaError, Solution
from support import KV8_PS1, TORCH_CANDIDATE, solution_dict


@pytest.fixture(scope="module")
def filled_archive(tiny_dataset_root, tmp_path_factory):
    archive = Archive(tmp_path_factory.mktemp("archive"))
    with Session(Dataset(tiny_dataset_root), archive, SubmitOptions()) as s:
        s.submit(Solution.model_validate(solution_dict(TORCH_CANDIDATE, name="honest")))
        s.submit(Solution.model_validate(solution_dict(TORCH_CANDIDATE.replace("* sm_scale", "* 3.0"), name="wrong")))
        s.submit(Solution.model_validate(solution_dict("def run(a):\n    pass\n", name="broken")))
    return archive


def test_export_loads_with_the_official_trace_set(filled_archive, tiny_dataset_root, tmp_path):
    fib = pytest.importorskip("flashinfer_bench.data")
    report = export_trace_set(filled_archive, Dataset(tiny_dataset_root), tmp_path / "export")
    ts = fib.TraceSet.from_path(str(tmp_path / "export"))
    assert set(ts.definitions) == {KV8_PS1, "gqa_paged_decode_h32_kv8_d128_ps64"}
    assert len(ts.workloads[KV8_PS1]) == 2
    assert {s.name for s in ts.solutions[KV8_PS1]} == {"honest", "wrong", "broken"}
    statuses = sorted(t.evaluation.status.value for t in ts.traces[KV8_PS1] if t.evaluation is not None)
    # PASSED on CPU has no official performance, so it stays out of the traces (and the report says so).
    assert statuses == ["COMPILE_ERROR", "COMPILE_ERROR", "INCORRECT_NUMERICAL", "INCORRECT_NUMERICAL"]
    assert report.traces == 4 and any("no aligned timing" in n for n in report.notices)


def test_exported_index_tensors_are_valid_blobs(filled_archive, tiny_dataset_root, tmp_path):
    from safetensors.torch import load_file

    export_trace_set(filled_archive, Dataset(tiny_dataset_root), tmp_path / "export")
    line = (tmp_path / "export" / "workloads" / "gqa_paged" / f"{KV8_PS1}.jsonl").read_text().splitlines()[0]
    wl = json.loads(line)["workload"]
    spec = wl["inputs"]["kv_indices"]
    assert spec["type"] == "safetensors"
    tensors = load_file(str(tmp_path / "export" / spec["path"]))
    idx, indptr = tensors["kv_indices"], tensors["kv_indptr"]
    assert idx.numel() == wl["axes"]["num_kv_indices"] and int(indptr[-1]) == idx.numel()
    assert torch.unique(idx).numel() == idx.numel() and int(idx.max()) < wl["axes"]["num_pages"]


def test_import_round_trip(filled_archive, tiny_dataset_root, tmp_path):
    export_trace_set(filled_archive, Dataset(tiny_dataset_root), tmp_path / "export")
    fresh = Archive(tmp_path / "fresh")
    report = import_trace_set(fresh, tmp_path / "export")
    assert report.solutions == 3 and report.traces == 4
    rows = fresh.submissions()
    assert sorted(r["status"] for r in rows) == ["COMPILE_ERROR", "INCORRECT_NUMERICAL"]
    wrong = next(r for r in rows if r["solution_name"] == "wrong")
    evals = fresh.submission(wrong["id"])["evaluations"]
    assert all(e["max_absolute_error"] > 1e-2 for e in evals)
    # another harness's verdicts: listed, never promoted here (no gate, audit or timing of this harness ran)
    from harness.review.candidates import load_candidate

    for row in rows:
        candidate = load_candidate(fresh, row["id"])
        assert not candidate.promotable and any("imported from a trace set" in b for b in candidate.blockers)


def test_the_contests_definitions_export_byte_for_byte_and_their_absent_blobs_are_named(tmp_path):
    """MoE and DSA: definitions and workload lines as the official files have them; blobs the dataset does not
    hold stay referenced (never written from the stand-ins drawn for them), and the report says which."""
    shipped = Dataset()
    names = shipped.resolve("moe") + shipped.resolve("dsa")
    report = export_trace_set(Archive(tmp_path / "archive"), shipped, tmp_path / "export", definitions=names)
    assert report.definitions == len(names) == 3 and report.workloads == 19 + 23 + 128
    for name in names:
        op_type = shipped.definitions[name].op_type
        for kind, suffix in (("definitions", ".json"), ("workloads", ".jsonl")):
            exported = tmp_path / "export" / kind / op_type / f"{name}{suffix}"
            original = shipped.root / kind / op_type / f"{name}{suffix}"
            assert exported.read_bytes() == original.read_bytes(), exported
    assert not (tmp_path / "export" / "blob").exists()
    assert any("sparse_indices" in n and "does not hold" in n for n in report.notices), report.notices
    fib = pytest.importorskip("flashinfer_bench.data")
    ts = fib.TraceSet.from_path(str(tmp_path / "export"))
    assert set(names) <= set(ts.definitions) and len(ts.workloads[names[0]]) == 19


@pytest.mark.parametrize("name, expected", [
    ("honest", "honest"),
    ("r2 split/kv", "r2_split_kv-"),  # changed: a digest of the original follows
])
def test_a_solution_name_becomes_one_file_name_component(name, expected):
    from harness.archive.export import _safe

    assert _safe(name) == expected if not expected.endswith("-") else _safe(name).startswith(expected)


def test_a_name_longer_than_a_file_name_allows_ends_in_a_digest_of_the_whole():
    """A loop names a solution after its parameters (the fused template's run past 255 bytes): the export must still
    write it, and two such names that differ only at the end must not collide."""
    from harness.archive.export import _safe

    a, b = "r3_split-kv-fused" + "_param1" * 60, "r3_split-kv-fused" + "_param1" * 59 + "_param2"
    assert len(_safe(a)) == len(_safe(b)) == 200 and _safe(a) != _safe(b)
    assert _safe(a).startswith("r3_split-kv-fused_param1")


@pytest.mark.parametrize("names", [("same name", "same_name"), ("..", "x"), (".", "y")])
def test_export_file_names_never_meet_or_climb(names):
    from harness.archive.export import _safe

    safe = [_safe(n) for n in names]
    assert len(set(safe)) == len(safe) and all(s.strip(".") and "/" not in s for s in safe)


def test_a_trace_set_that_fails_leaves_the_archive_as_it_was(filled_archive, tiny_dataset_root, tmp_path):
    export_trace_set(filled_archive, Dataset(tiny_dataset_root), tmp_path / "export")
    extra = tmp_path / "export" / "traces" / "zz" / "orphan.jsonl"
    extra.parent.mkdir(parents=True)
    line = next((tmp_path / "export" / "traces").rglob("*.jsonl")).read_text().splitlines()[0]
    extra.write_text(line.replace('"solution": "', '"solution": "not-there-', 1) + "\n")
    fresh = Archive(tmp_path / "fresh")
    with pytest.raises(SchemaError, match="not-there-"):
        import_trace_set(fresh, tmp_path / "export")
    assert fresh.submissions() == [] and fresh.db.execute("select count(*) from evaluations").fetchone()[0] == 0


def counts(archive) -> tuple[int, ...]:
    return tuple(archive.db.execute(f"select count(*) from {t}").fetchone()[0]
                 for t in ("solutions", "submissions", "evaluations"))


def test_a_second_import_of_the_same_trace_set_adds_nothing_and_says_so(filled_archive, tiny_dataset_root, tmp_path):
    """Importing a trace set twice duplicated every submission and evaluation; now the second adds nothing."""
    from click.testing import CliRunner

    from harness.cli import main

    export_trace_set(filled_archive, Dataset(tiny_dataset_root), tmp_path / "export")
    fresh = Archive(tmp_path / "fresh")
    first = import_trace_set(fresh, tmp_path / "export")
    after_first = counts(fresh)
    again = import_trace_set(fresh, tmp_path / "export")
    assert again.nothing_new and (again.solutions_present, again.traces_present) == (3, 4)
    assert counts(fresh) == after_first and (first.solutions, first.traces) == (3, 4)
    shutil.copytree(tmp_path / "export", tmp_path / "copy")  # the same content from another folder
    result = CliRunner().invoke(main, ["import", str(tmp_path / "copy"), "--archive", str(fresh.folder)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 0 and len(lines) == 1 and lines[0].startswith("nothing new in "), result.output
    assert "3 solutions and 4 traces already in the archive" in lines[0] and counts(fresh) == after_first
    # one new trace among known ones: only it is added
    traces = next((tmp_path / "copy" / "traces").rglob("*.jsonl"))
    line = json.loads(traces.read_text().splitlines()[0])
    line["evaluation"]["timestamp"] = "2030-01-01T00:00:00"
    traces.write_text(traces.read_text() + json.dumps(line) + "\n")
    more = import_trace_set(fresh, tmp_path / "copy")
    assert (more.solutions, more.traces, more.traces_present) == (0, 1, 4)
    assert counts(fresh) == (after_first[0], after_first[1] + 1, after_first[2] + 1)


def test_an_import_that_fails_while_writing_leaves_the_archive_as_it_was(filled_archive, tiny_dataset_root, tmp_path,
                                                                       monkeypatch):
    export_trace_set(filled_archive, Dataset(tiny_dataset_root), tmp_path / "export")
    fresh = Archive(tmp_path / "fresh")
    real, calls = fresh.add_evaluation, []

    def second_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(fresh, "add_evaluation", second_fails)
    with pytest.raises(OSError):
        import_trace_set(fresh, tmp_path / "export")
    assert counts(fresh) == (0, 0, 0)


def test_import_onto_a_full_disk_is_one_line_and_imports_nothing(filled_archive, tiny_dataset_root, tmp_path,
                                                                monkeypatch):
    from click.testing import CliRunner

    from harness.cli import main

    export_trace_set(filled_archive, Dataset(tiny_dataset_root), tmp_path / "export")
    (tmp_path / "fresh").mkdir()

    def full(self, *args, **kwargs):
        raise OSError(28, "No space left on device", str(self.folder / "archive.db"))

    monkeypatch.setattr(Archive, "add_evaluation", full)
    result = CliRunner().invoke(main, ["import", str(tmp_path / "export"), "--archive", str(tmp_path / "fresh")])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("error: the disk is full: cannot write ") and "nothing was imported" in lines[0]
    assert counts(Archive(tmp_path / "fresh")) == (0, 0, 0)


TRACE = {"definition": "d", "solution": "s", "workload": {"uuid": "u"}, "evaluation": {"status": "PASSED"}}


@pytest.mark.parametrize("a, b, same", [
    (("h1", TRACE), ("h1", json.loads(json.dumps(TRACE, sort_keys=True))), True),  # key order does not matter
    (("h1", TRACE), ("h2", TRACE), False),  # the same trace of other code
    (("h1", TRACE), ("h1", {**TRACE, "evaluation": {"status": "PASSED", "timestamp": "t"}}), False),  # a re-run
    (("h1", TRACE), ("h1", {**TRACE, "solution": "renamed"}), False),  # the name is part of the trace
])
def test_the_identity_of_an_imported_trace(a, b, same):
    from harness.archive.export import import_digest

    assert (import_digest(*a) == import_digest(*b)) is same


def _solution_files(root) -> dict:
    return {p: json.loads(p.read_text()) for p in (root / "solutions").rglob("*.json")}


def _imported_pairs(archive) -> set:
    """(submission definition, its solution's definition, solution name, solution hash) of every imported row."""
    return set(archive.db.execute(
        "select s.definition, o.definition, s.solution_name, s.solution_hash from submissions s "
        "join solutions o on o.hash = s.solution_hash").fetchall())


def test_a_name_two_definitions_give_to_their_solutions_imports_both_and_each_trace_keeps_its_code(
        filled_archive, tiny_dataset_root, tmp_path):
    """Solutions were keyed by name alone: a second definition's solution of the same name replaced the first, and
    the first's traces were archived under the other definition's code."""
    from support import KV8_PS64

    export_trace_set(filled_archive, Dataset(tiny_dataset_root), tmp_path / "export")
    wrong = next(d for d in _solution_files(tmp_path / "export").values() if d["name"] == "wrong")
    other = {**wrong, "definition": KV8_PS64, "sources": [{**wrong["sources"][0],
                                                           "content": wrong["sources"][0]["content"] + "# ps64\n"}]}
    (tmp_path / "export" / "solutions" / "zz").mkdir()
    (tmp_path / "export" / "solutions" / "zz" / "wrong.json").write_text(json.dumps(other))
    fresh = Archive(tmp_path / "fresh")
    report = import_trace_set(fresh, tmp_path / "export")
    assert (report.solutions, report.traces) == (4, 4)
    pairs = _imported_pairs(fresh)
    assert pairs and all(sub_def == sol_def for sub_def, sol_def, _, _ in pairs), pairs
    assert Solution.model_validate(wrong).content_hash in {h for _, _, n, h in pairs if n == "wrong"}


def test_one_name_given_to_two_codes_of_a_definition_exports_apart_and_round_trips(filled_archive, tiny_dataset_root,
                                                                                   tmp_path):
    """Two codes of one definition under one name (a solution edited and submitted again): the export named both
    alike, so its traces could not say which code they were of, and an import put them all under one."""
    export_trace_set(filled_archive, Dataset(tiny_dataset_root), tmp_path / "first")
    shutil.copytree(tmp_path / "first", tmp_path / "second")
    path, wrong = next((p, d) for p, d in _solution_files(tmp_path / "second").items() if d["name"] == "wrong")
    wrong["sources"][0]["content"] += "# edited\n"
    path.write_text(json.dumps(wrong))
    for traces in (tmp_path / "second" / "traces").rglob("*.jsonl"):  # the edited code's own runs
        lines = [json.loads(line) for line in traces.read_text().splitlines()]
        for line in lines:
            line["evaluation"]["timestamp"] = "2030-01-01T00:00:00"
        traces.write_text("".join(json.dumps(line) + "\n" for line in lines))
    both = Archive(tmp_path / "both")
    import_trace_set(both, tmp_path / "first")
    import_trace_set(both, tmp_path / "second")
    expected = _imported_pairs(both)
    assert len({h for _, _, n, h in expected if n == "wrong"}) == 2
    export_trace_set(both, Dataset(tiny_dataset_root), tmp_path / "again")
    names = sorted(d["name"] for d in _solution_files(tmp_path / "again").values() if d["name"].startswith("wrong"))
    assert names[0] == "wrong" and names[1].startswith("wrong-") and len(names) == 2
    fresh = Archive(tmp_path / "fresh")
    report = import_trace_set(fresh, tmp_path / "again")
    assert report.traces == both.db.execute("select count(*) from evaluations").fetchone()[0]
    got = {(row[0], row[1], row[3]) for row in _imported_pairs(fresh)}
    assert got == {(row[0], row[1], row[3]) for row in expected}

    def evals(a):
        return sorted(a.db.execute("select s.solution_hash, e.finished_at from evaluations e join submissions s "
                                   "on s.id = e.submission_id").fetchall())

    assert evals(fresh) == evals(both)


def test_a_trace_naming_a_name_two_codes_share_is_refused_on_one_line(filled_archive, tiny_dataset_root, tmp_path):
    from click.testing import CliRunner

    from harness.cli import main

    export_trace_set(filled_archive, Dataset(tiny_dataset_root), tmp_path / "export")
    wrong = next(d for d in _solution_files(tmp_path / "export").values() if d["name"] == "wrong")
    wrong["sources"][0]["content"] += "# other code, same name\n"
    (tmp_path / "export" / "solutions" / "zz").mkdir()
    (tmp_path / "export" / "solutions" / "zz" / "wrong.json").write_text(json.dumps(wrong))
    (tmp_path / "fresh").mkdir()
    result = CliRunner().invoke(main, ["import", str(tmp_path / "export"), "--archive", str(tmp_path / "fresh")])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "zz/wrong.json" in lines[0], result.output
    assert counts(Archive(tmp_path / "fresh")) == (0, 0, 0)


def test_an_import_the_archive_database_refuses_is_one_line_and_imports_nothing(filled_archive, tiny_dataset_root,
                                                                                 tmp_path):
    """A trigger that aborts an insert ended the import with a traceback; a trigger not the archive's own is now
    refused before anything is written (harness/archive/schema_guard.py), the file left as it is."""
    import sqlite3

    from click.testing import CliRunner

    from harness.cli import main

    export_trace_set(filled_archive, Dataset(tiny_dataset_root), tmp_path / "export")
    Archive(tmp_path / "guarded").db.conn.close()
    conn = sqlite3.connect(tmp_path / "guarded" / "archive.db")
    conn.execute("create trigger frozen before insert on evaluations begin select raise(abort, 'frozen'); end")
    conn.commit()
    conn.close()
    result = CliRunner().invoke(main, ["import", str(tmp_path / "export"), "--archive", str(tmp_path / "guarded")])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "frozen on evaluations" in lines[0], result.output
    assert "left as it is" in lines[0]
    conn = sqlite3.connect(tmp_path / "guarded" / "archive.db")
    assert counts(type("Raw", (), {"db": conn})) == (0, 0, 0)


def test_the_full_size_gqa_workloads_export_their_page_tables_without_drawing_the_caches(tmp_path, monkeypatch):
    """b256 x 8192 tokens is an 8 GiB KV cache: the export writes page tables only, drawn on their own."""
    import harness.data.inputs as inputs

    def no_wide_draw(shape, *args, **kwargs):
        raise AssertionError(f"a {shape} tensor drawn to export page tables")

    monkeypatch.setattr(inputs, "random_tensor", no_wide_draw)
    shipped = Dataset()
    name = "gqa_paged_decode_h32_kv8_d128_ps1"
    report = export_trace_set(Archive(tmp_path / "archive"), shipped, tmp_path / "export", definitions=[name])
    assert report.workloads == len(shipped.workloads[name]) == 14
    from safetensors.torch import load_file

    for line in (tmp_path / "export" / "workloads" / "gqa_paged" / f"{name}.jsonl").read_text().splitlines():
        wl = json.loads(line)["workload"]
        indices, indptr = (load_file(str(tmp_path / "export" / wl["inputs"][n]["path"]))[n]
                           for n in ("kv_indices", "kv_indptr"))
        assert indices.numel() == wl["axes"]["num_kv_indices"] == int(indptr[-1])


@pytest.mark.parametrize("definition", ["gqa_paged_decode_h32_kv4_d128_ps64",
                                        "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"])
def test_a_narrowed_draw_gives_each_input_what_the_whole_draw_gives_it(definition):
    from harness.data.inputs import generate_inputs

    shipped = Dataset()
    d = shipped.definitions[definition]
    workload = min(shipped.workloads[definition], key=lambda w: sum(w.axes.values()))
    whole = generate_inputs(d, workload, 11, "cpu", shipped.root)
    wanted = [n for n in d.inputs if n.endswith(("indices", "indptr", "last_page_len", "seq_lens", "block_table"))]
    assert wanted
    part = generate_inputs(d, workload, 11, "cpu", shipped.root, names=wanted)
    assert list(part) == wanted
    for n in wanted:
        assert torch.equal(part[n], whole[n]) if isinstance(whole[n], torch.Tensor) else part[n] == whole[n], n
