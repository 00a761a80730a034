"""`harness diff A B`: the source diff between two solutions and their per-workload latency change."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from harness.archive.database import ArchiveError
from harness.review import diff_submissions, resolve_submission, source_diff
from harness.review.diff import pick_submission
from harness.report_cli import diff

from support import KV8_PS1
from report_archive import KV4_PS1, SPLIT_K, build_h200_archive, ensure_review_migration


@pytest.fixture
def h200(tmp_path, monkeypatch):
    ensure_review_migration(monkeypatch)
    return build_h200_archive(tmp_path / "archive")


def test_source_diff_and_latency_change(h200):
    archive, ids = h200["archive"], h200["ids"]
    d = diff_submissions(archive, ids["triton"], "ctl_r3_splitk")
    assert (d.a.submission_id, d.b.submission_id) == (ids["triton"], ids["ctl_r3_splitk"])
    assert not d.same_source
    (f,) = d.files
    assert (f.path, f.change, f.added, f.removed) == ("kernel.py", "changed", 1, 1)
    assert any(l.startswith("-") and "BLOCK_N=64," in l for l in f.lines)
    assert any(l.startswith("+") and "SPLIT_K=8" in l for l in f.lines)
    assert f.lines[0].startswith("--- triton_gqa_decode#") and f.lines[1].startswith("+++ ctl_r3_splitk#")
    by_label = {w.label: w for w in d.workloads}
    assert len(by_label) == 14
    w = by_label["uniform_b1_kv8192"]
    assert (w.a_ms, w.a_status, w.b_status) == (0.2999, "PASSED", "PASSED")
    assert w.speedup == pytest.approx(1 / SPLIT_K["uniform_b1_kv8192"])  # B is 10.9x faster here
    assert w.change == pytest.approx(SPLIT_K["uniform_b1_kv8192"] - 1)
    assert by_label["uniform_b256_kv8192"].speedup == pytest.approx(1 / 0.995)
    assert 1.5 < d.geomean_speedup < 3


def test_failed_workloads_have_no_latency_change(h200):
    d = diff_submissions(h200["archive"], "ctl_r3_splitk", "ctl_r4_exp2_fastmath")
    b1 = next(w for w in d.workloads if w.label == "uniform_b1_kv512")
    assert b1.b_status == "INCORRECT_NUMERICAL" and b1.b_ms is None and b1.speedup is None and b1.change is None
    assert sum(1 for w in d.workloads if w.speedup) == 11
    crash = diff_submissions(h200["archive"], "triton_gqa_decode", "example_illegal_address", definition=KV8_PS1)
    assert len(crash.workloads) == 14  # the union of both sides' workloads
    only_a = [w for w in crash.workloads if w.b_status is None]
    assert len(only_a) == 12 and all(w.speedup is None for w in only_a)


def test_same_solution_is_identical(h200):
    ids = h200["ids"]
    d = diff_submissions(h200["archive"], ids["ctl_r3_splitk"], ids["ctl_r3_splitk"])
    assert d.same_source and all(f.lines == [] for f in d.files)
    assert d.geomean_speedup == pytest.approx(1.0)


def test_resolving_references(h200):
    archive, ids = h200["archive"], h200["ids"]
    assert resolve_submission(archive, str(ids["illegal"])) == ids["illegal"]
    assert resolve_submission(archive, "ctl_r2_block128") == ids["ctl_r2_block128"]
    h = archive.db.execute("select solution_hash from submissions where id = ?", [ids["ctl_r3_splitk"]]).fetchone()[0]
    assert resolve_submission(archive, h[:10]) == ids["ctl_r3_splitk"]
    # the Triton example was submitted for two definitions: a name alone is ambiguous
    with pytest.raises(ArchiveError, match="2 definitions"):
        resolve_submission(archive, "triton_gqa_decode")
    assert resolve_submission(archive, "triton_gqa_decode", definition=KV4_PS1) == ids["triton_kv4"]
    with pytest.raises(ArchiveError, match="no submission"):
        resolve_submission(archive, "no_such_solution")
    with pytest.raises(ArchiveError, match="no submission"):
        resolve_submission(archive, "99999")


A_HASH, B_HASH = "ab12cd" + "0" * 58, "ff" * 32


@pytest.mark.parametrize("ref, by_id, named, prefixed, expected", [
    ("7", 7, [], [], 7),  # a submission id
    ("7", 7, [(9, KV8_PS1, B_HASH)], [], 7),  # an id wins over a solution named "7"
    (A_HASH, None, [(9, KV8_PS1, B_HASH)], [(4, A_HASH, "a")], 4),  # a whole hash wins over a name
    ("fast", None, [(9, KV8_PS1, B_HASH), (5, KV8_PS1, A_HASH)], [], 9),  # a name: its latest submission
    ("ab12cd", None, [], [(6, A_HASH, "a"), (4, A_HASH, "a")], 6),  # a hash prefix: its latest submission
    ("ab12cd", None, [(9, KV8_PS1, A_HASH)], [(9, A_HASH, "ab12cd")], 9),  # name and prefix: one solution
    ("ab12cd", None, [(9, KV8_PS1, B_HASH)], [(4, A_HASH, "a")], "is ambiguous: solution named 'ab12cd' "
     "(submission 9, hash ffffffffffff); hash prefix of 'a' (submission 4, hash ab12cd000000)"),
    ("ab12cd", None, [], [(6, A_HASH, "a"), (5, "ab12cd" + "1" * 58, "b")], "matches 2 solutions: 'a' "
     "(submission 6"),
    ("x", None, [(9, KV8_PS1, B_HASH), (8, "other_definition", B_HASH)], [], "2 definitions"),
    ("x", None, [], [], "no submission, solution name or solution hash 'x'"),
])
def test_which_submission_a_reference_means(ref, by_id, named, prefixed, expected):
    if isinstance(expected, int):
        assert pick_submission(ref, by_id, named, prefixed) == expected
    else:
        with pytest.raises(ArchiveError, match=re.escape(expected)):
            pick_submission(ref, by_id, named, prefixed)


def test_a_name_that_looks_like_another_solutions_hash_prefix_is_ambiguous(h200):
    """A solution named after another one's hash prefix took the lookup silently; now both are listed, exit 2."""
    archive, ids = h200["archive"], h200["ids"]
    hashes = {i: archive.submission(i)["solution_hash"] for i in (ids["illegal"], ids["ctl_r3_splitk"])}
    impostor = archive.start_submission(hashes[ids["illegal"]], hashes[ids["ctl_r3_splitk"]][:8], KV8_PS1, "x", {},
                                        None)
    result = CliRunner().invoke(diff, [hashes[ids["ctl_r3_splitk"]][:8], str(ids["illegal"]),
                                       "--archive", str(archive.folder)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "is ambiguous" in lines[0], result.output
    assert f"submission {impostor}" in lines[0] and f"submission {ids['ctl_r3_splitk']}" in lines[0]
    assert resolve_submission(archive, hashes[ids["ctl_r3_splitk"]]) == ids["ctl_r3_splitk"]  # the whole hash


def test_added_and_removed_files():
    a = [{"path": "kernel.py", "content": "x = 1\n"}, {"path": "old.py", "content": "gone\n"}]
    b = [{"path": "kernel.py", "content": "x = 1\n"}, {"path": "helpers.cuh", "content": "#pragma once\n"}]
    files = {f.path: f for f in source_diff(a, b)}
    assert files["kernel.py"].change == "unchanged" and files["kernel.py"].lines == []
    assert files["old.py"].change == "removed" and files["old.py"].removed == 1
    assert files["helpers.cuh"].change == "added" and files["helpers.cuh"].added == 1


def test_diff_command(h200):
    folder = str(h200["archive"].folder)
    runner = CliRunner()
    result = runner.invoke(diff, ["triton_gqa_decode", "ctl_r3_splitk", "--archive", folder, "--definition", KV8_PS1])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "kernel.py: changed, +1 -1" in out and "SPLIT_K=8" in out
    assert "uniform_b1_kv8192" in out and "-90.8%" in out and "10.9x" in out
    assert "geometric mean speedup of B over A on 14 workloads" in out

    stat = runner.invoke(diff, ["triton_gqa_decode", "ctl_r3_splitk", "--archive", folder, "--definition", KV8_PS1,
                                "--stat"])
    assert stat.exit_code == 0 and "kernel.py: changed" in stat.output and "SPLIT_K=8" not in stat.output

    js = runner.invoke(diff, [str(h200["ids"]["ctl_r2_block128"]), "ctl_r3_splitk", "--archive", folder, "--json"])
    assert js.exit_code == 0, js.output
    data = json.loads(js.output)
    assert data["a"]["solution"] == "ctl_r2_block128" and data["b"]["solution"] == "ctl_r3_splitk"
    assert data["files"][0]["change"] == "changed" and "+" in data["files"][0]["diff"]
    assert len(data["workloads"]) == 14 and data["geomean_speedup_b_over_a"] > 1

    bad = runner.invoke(diff, ["triton_gqa_decode", "ctl_r3_splitk", "--archive", folder])
    assert bad.exit_code == 2 and "2 definitions" in bad.output
    for context in ("-5", "10001"):  # difflib took a negative context as given
        bad = runner.invoke(diff, ["triton_gqa_decode", "ctl_r3_splitk", "--archive", folder, "-U", context])
        assert bad.exit_code == 2 and "-U" in bad.output and "0<=x<=10000" in bad.output, bad.output


@pytest.mark.parametrize("ref", ["²", "٣", "99999999999999999999", "9223372036854775808"])
def test_a_reference_of_digits_no_submission_id_can_be_is_one_line(h200, ref):
    """"²" passes str.isdigit and failed int(); a run of digits past SQLite's integers overflowed the query: both
    were tracebacks (harness show ID too)."""
    from harness.cli import main

    folder = str(h200["archive"].folder)
    result = CliRunner().invoke(diff, [ref, "1", "--archive", folder])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "no submission, solution name" in lines[0], result.output
    if ref.isascii():
        shown = CliRunner().invoke(main, ["show", ref, "--archive", folder])
        assert shown.exit_code == 2 and f"no submission {ref}" in shown.output, shown.output
