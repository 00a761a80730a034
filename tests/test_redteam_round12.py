"""Red team round 12 (benchmarks/results/2026-12-07_cpu_redteam_round12/): what got through, now stopped.

- a01: K and V printed by a kernel's `tl.device_print`, Python's stdout taken back with `contextlib.redirect_stdout`,
  attention in plain Python: "no library compute".
- a08, a10, a11: `torch._utils._import_dotted_name` (and other library helpers that import by a string) gave back
  every banned name: the count's modes stepped past, the nonce of the worker's loop read, the reply descriptor
  redirected (tests/test_channel_guard.py, tests/test_sandbox_channel.py for the channel itself).
- the gate let files be written through logging's handlers, compressors and storages.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from harness.audits.static_gate import scan_sources
from harness.audits.static_gate.policy import load_policy
from support import ROOT

POLICY = load_policy(definition="gqa_paged_decode_h32_kv8_d128_ps1", op_type="gqa_paged")


def _errors(source: str) -> set[str]:
    # the path is computed, as the attacks built theirs (a path in a literal is a finding of its own)
    findings = scan_sources({"main.py": "import torch\nP = chr(120) * 3\n" + textwrap.dedent(source)}, "triton",
                            POLICY)
    return {f.rule for f in findings if str(f.severity).endswith("error")}


@pytest.mark.parametrize("source, rule", [
    ('S = torch._utils._import_dotted_name("sys._getframe")', "dynamic_code"),
    ('from torch._utils import _import_dotted_name as get\nS = get("sys.modules")', "dynamic_code"),
    ('S = torch.ops.import_module("sys")', "dynamic_code"),
    ('S = torch._ops.import_module("sys")', "dynamic_code"),
    ('import torch.fx.graph_module as g\ng._forward_from_src("x = 1", {}, None)', "dynamic_code"),
    ('import numpy\nM = numpy.core._ufunc_reconstruct("sys", "modules")', "dynamic_code"),
    ('from torch.utils import _pytree\n_pytree.treespec_loads("{}")', "dynamic_code"),
    ('import logging\nlogging.FileHandler(P, mode="ab")', "file_cache"),
    ('import logging\nlogging.basicConfig(filename=P)', "file_cache"),
    ('import gzip\ngzip.GzipFile(P, "wb")', "file_cache"),
    ('import fileinput\nfileinput.input(P, inplace=True)', "file_cache"),
    ('t = torch.zeros(4)\nt.untyped_storage()._write_file(P, True, True, 4)', "file_cache"),
    ('import contextlib, io\nwith contextlib.redirect_stdout(io.StringIO()):\n    pass', "harness_internals"),
    ("with torch._C.DisableTorchFunction():\n    pass", "monkeypatch"),
    ("g = torch._C._SetExcludeDispatchKeyGuard(torch._C.DispatchKey.Python, True)", "monkeypatch"),
])
def test_the_gate_refuses_what_got_through(source, rule):
    assert rule in _errors(source), source


@pytest.mark.parametrize("source", [
    'import logging\nlogging.basicConfig(level=logging.INFO)\nlogging.getLogger(__name__).info("x")',
    'import logging\nlogging.getLogger(__name__).addHandler(logging.NullHandler())',
    "x = torch.ops.aten.add.Tensor",
])
def test_honest_twins_stay_clean(source):
    assert not _errors(source) & {"file_cache", "dynamic_code", "harness_internals"}, source


PRINTING = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    from harness.sandbox import triton_interp
    triton_interp.apply()
    import torch, triton, triton.language as tl
    from harness.sandbox import library_ops

    @triton.jit
    def show(x_ptr, N: tl.constexpr):
        tl.device_print("v", tl.load(x_ptr + tl.arange(0, N)))

    k = torch.randn(64, 128)
    with library_ops.Counter({"k_cache": k}) as counter:
        show[(4,)](k, 128)
    print("COUNTED", dict(counter.host.ops))
""")


def test_what_a_kernel_prints_under_the_interpreter_counts_as_values_on_the_host():
    out = subprocess.run([sys.executable, "-c", PRINTING, str(ROOT)], capture_output=True, text=True, timeout=300,
                         env={"TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    counted = eval(out.stdout.split("COUNTED ", 1)[1])
    assert counted == {"host: tl.device_print": ("host", 4 * 128)}, counted


# -- the command line (round 12's third part) ------------------------------------------------------------------


def test_export_never_writes_into_a_folder_that_holds_files_or_links(tmp_path, monkeypatch, capsys):
    """V5: an export over a person's file replaced it, and one through a link planted in the folder wrote outside."""
    from harness.archive.database import Archive
    from harness.cli import main
    from harness.cli_common import invoke

    Archive(tmp_path / "archive")
    for name, plant in [("notes", lambda d: (d / "notes.txt").write_text("mine")),
                        ("link", lambda d: (d / "solutions").symlink_to(tmp_path / "elsewhere"))]:
        folder = tmp_path / name
        folder.mkdir()
        plant(folder)
        before = sorted(p.name for p in folder.iterdir())
        monkeypatch.setattr(sys, "argv", ["harness", "export", str(folder), "--archive", str(tmp_path / "archive")])
        with pytest.raises(SystemExit) as done:
            invoke(main)
        assert done.value.code == 2
        assert "it holds files already" in capsys.readouterr().err
        assert sorted(p.name for p in folder.iterdir()) == before
    assert not (tmp_path / "elsewhere").exists()


def test_a_locked_archive_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    """V2/V4: a database another process held past the busy timeout was a 61-line traceback."""
    import sqlite3

    import click

    from harness.cli_common import invoke

    @click.command()
    def locked() -> None:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(sys, "argv", ["harness"])
    assert invoke(locked) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "the archive is locked by another process" in lines[0], lines


@pytest.mark.parametrize("front, said", [
    ("---\nname: [gqa-decode\n", "front matter"),  # YAML that does not parse
    ("", "front matter"),  # none at all
    ("---\nname: gqa-decode\n---\n", "description"),  # parses, but says nothing a model could pick it by
])
def test_a_skill_whose_front_matter_is_broken_stops_the_run_before_it_starts(tmp_path, front, said):
    """V11: the loop ran, and its requests listed the skill with an empty description, without a word."""
    import shutil

    from controller.skills import SkillError, load_skills, require_indexable

    shutil.copytree(ROOT / "skills", tmp_path / "skills")
    require_indexable(load_skills(tmp_path / "skills"))  # the shipped ones are clean
    skill = tmp_path / "skills" / "gqa-decode" / "SKILL.md"
    text = skill.read_text()
    body = text.split("\n---\n", 1)[1]  # past the front matter
    skill.write_text(front + ("---\n" if front.startswith("---\nname: [") else "") + body)
    with pytest.raises(SkillError, match=said) as raised:
        require_indexable(load_skills(tmp_path / "skills"))
    assert "gqa-decode" in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize("err, said", [
    (KeyboardInterrupt(), "interrupted (Ctrl-C)"),
    (SystemExit(143), "terminated (SIGTERM)"),
    (ValueError("no such workload"), "ValueError: no such workload"),
])
def test_a_runs_stop_reason_is_said_in_words(err, said):
    """V14: Ctrl-C was archived as the run's stop reason `KeyboardInterrupt: `."""
    from controller.loop import _stop_reason

    assert _stop_reason(err).startswith(said)


def test_a_reference_that_cannot_run_is_one_line(tmp_path, tiny_dataset_root, monkeypatch, capsys):
    """V8: a dataset's workload the reference cannot hold (axes of 10^8: 819 GB) was a 78-line traceback."""
    from harness.cli import main
    from harness.cli_common import invoke
    from harness.pipeline import parallel
    from harness.pipeline.trusted import ReferenceFailed
    from support import TORCH_CANDIDATE, solution_dict

    def refuses(*args, **kwargs):
        raise ReferenceFailed("the reference failed on workload w: RuntimeError: can't allocate memory", "Traceback")

    monkeypatch.setattr(parallel, "submit_all", refuses)
    solution = tmp_path / "s.json"
    solution.write_text(json.dumps(solution_dict(TORCH_CANDIDATE)))
    monkeypatch.setattr(sys, "argv", ["harness", "submit", str(solution), "--archive", str(tmp_path / "a"),
                                      "--dataset", str(tiny_dataset_root), "-w", "tiny_b2_t40", "--no-baselines"])
    (tmp_path / "a").mkdir()
    with pytest.raises(SystemExit) as done:
        invoke(main)
    lines = capsys.readouterr().err.strip().splitlines()
    assert done.value.code == 2 and len(lines) == 1, lines
    assert "the reference failed on workload w" in lines[0] and "HARNESS_ERROR" in lines[0]


def test_a_reference_that_dies_is_not_the_candidates_runtime_error(tmp_path, tiny_dataset_root):
    """F3: the reference worker out of memory at MoE's full size (33.8 GB on a 23 GB host) was charged to the
    candidate, whose call never ran, as RUNTIME_ERROR "the worker died"."""
    import shutil

    from harness.archive.database import Archive
    from support import KV8_PS1, TORCH_CANDIDATE, solution_dict

    root = tmp_path / "dataset"
    shutil.copytree(tiny_dataset_root, root)
    path = root / "definitions" / "gqa_paged" / f"{KV8_PS1}.json"
    definition = json.loads(path.read_text())
    definition["reference"] = "import os\nos._exit(9)  # as the kernel's OOM killer ends it\n" + definition["reference"]
    path.write_text(json.dumps(definition))
    solution = tmp_path / "s.json"
    solution.write_text(json.dumps(solution_dict(TORCH_CANDIDATE)))
    (tmp_path / "a").mkdir()
    done = subprocess.run([sys.executable, "-m", "harness", "submit", str(solution), "--archive", str(tmp_path / "a"),
                           "--dataset", str(root), "-w", "tiny_b2_t40", "--no-baselines"], capture_output=True,
                          text=True, timeout=600, cwd=ROOT)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    [evaluation] = Archive(tmp_path / "a").submission(1)["evaluations"]
    assert evaluation["status"] == "SKIPPED", evaluation
    assert "not judged: the reference could not run" in evaluation["message"], evaluation["message"]


def test_a_report_of_a_definition_nobody_knows_is_refused(tmp_path, monkeypatch, capsys):
    """V13: `harness report --definition nope` wrote an empty report with a notice."""
    from harness.archive.database import Archive
    from harness.cli import main
    from harness.cli_common import invoke

    Archive(tmp_path / "archive")
    monkeypatch.setattr(sys, "argv", ["harness", "report", "--definition", "nope", "--archive",
                                      str(tmp_path / "archive"), "--out", str(tmp_path / "report")])
    with pytest.raises(SystemExit) as done:
        invoke(main)
    assert done.value.code == 2 and "unknown definition 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "report").exists()


def test_a_hint_that_names_a_folder_is_refused(tmp_path):
    """V14: `--hint DIR` sent the folder's path as the hint's text."""
    from controller.startcheck import read_hint
    from harness.data.schema import SchemaError

    (tmp_path / "notes.md").write_text("try split-KV\n")
    assert read_hint(str(tmp_path / "notes.md")) == "try split-KV"
    assert read_hint("use tensor cores") == "use tensor cores"
    with pytest.raises(SchemaError, match="is a folder"):
        read_hint(str(tmp_path))


STEPPING = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    import torch
    from harness.sandbox import library_ops, mode_guard
    from harness.audits.cpu_attribution import call_verdict
    mode_guard.apply()
    sys.path.insert(0, sys.argv[2])
    import candidate  # a file outside PyTorch and the harness, as a solution's module is

    k = torch.randn(64, 128)
    for name in ("exclude_python_key", "disable_torch_function", "disable_current_modes", "honest"):
        with library_ops.Counter({"k_cache": k}) as counter:
            getattr(candidate, name)(k)
        report = counter.report({"k_cache": k})
        ops = {n: (o["kind"], o["elements"]) for n, o in report["ops"].items()}
        verdict = call_verdict((report["input_elements"], ops))[2]
        print(name, "|", sorted(n for n in ops if n.startswith("stepped past")), "|", verdict.passed)
""")

CANDIDATE = textwrap.dedent("""
    import torch
    import torch.utils._python_dispatch as pd

    def exclude_python_key(k):
        with torch._C._SetExcludeDispatchKeyGuard(torch._C.DispatchKey.Python, True):
            return (k @ k.T).sum()

    def disable_torch_function(k):
        with torch._C.DisableTorchFunction():
            return k.numpy().sum()

    def disable_current_modes(k):
        with pd._disable_current_modes():
            return torch.softmax(k @ k.T, -1)

    def honest(k):  # PyTorch's own use of the same functions (a library op, a subclass's default) is not counted
        return torch.nn.functional.scaled_dot_product_attention(k[None, None, :4], k[None, None], k[None, None])
""")


def test_stepping_past_the_count_is_seen_whatever_name_reached_it(tmp_path):
    """Round 12: `_SetExcludeDispatchKeyGuard(DispatchKey.Python, True)` hid a matmul and `DisableTorchFunction()` a
    `.numpy()` from the CPU's count, both with no gate finding; `_disable_current_modes()` hid attention (a08)."""
    (tmp_path / "candidate.py").write_text(CANDIDATE)
    out = subprocess.run([sys.executable, "-c", STEPPING, str(ROOT), str(tmp_path)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {line.split(" | ")[0]: line.split(" | ")[1:] for line in out.stdout.splitlines() if " | " in line}
    assert rows["exclude_python_key"] == ["['stepped past the count: torch._C._SetExcludeDispatchKeyGuard']", "False"]
    assert rows["disable_torch_function"] == ["['stepped past the count: torch._C.DisableTorchFunction']", "False"]
    assert rows["disable_current_modes"] == [
        "['stepped past the count: torch.utils._python_dispatch._disable_current_modes']", "False"]
    assert rows["honest"][0] == "[]", rows
