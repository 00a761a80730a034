"""Claude Code / Codex providers against fake executables put first on PATH: a good agent, one that edits a
file it may not touch, one that hangs, one that changes nothing, one that fails."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

import pytest

from controller.providers.cli_agents import AGENTS, CLIAgentProvider, changed_paths, snapshot, usage_from_output
from harness.generation_request import Budget, Constraints, GenerationRequest, Incumbent

SKILLS = Path(__file__).resolve().parent.parent / "skills"
INCUMBENT = {"name": "inc", "definition": "gqa_paged_decode_h32_kv8_d128_ps1", "author": "t",
             "spec": {"language": "triton", "target_hardware": ["H200"], "entry_point": "kernel.py::run",
                      "dependencies": [], "destination_passing_style": True},
             "sources": [{"path": "kernel.py", "content": "def run(*a):\n    pass  # incumbent\n"}]}

FAKE_AGENT = r'''#!{python}
"""A fake coding agent: behaviour from $FAKE_AGENT; looks at its workspace like the real one would."""
import json, os, sys, time
from pathlib import Path

mode = os.environ.get("FAKE_AGENT", "good")
flavour = Path(sys.argv[0]).name
ws = Path.cwd()
Path(os.environ["FAKE_LOG"]).write_text(json.dumps({{"argv": sys.argv, "pid": os.getpid(),
    "files": sorted(str(p.relative_to(ws)) for p in ws.rglob("*") if p.is_file() and "skills" not in p.parts),
    "skills": sorted(str(p.relative_to(ws)) for p in ws.glob("*/skills/*/SKILL.md")),
    "request": (ws / "REQUEST.md").read_text()[:200]}}))
if mode == "hang":
    time.sleep(120)
if mode == "fail":
    print("model overloaded", file=sys.stderr)
    sys.exit(1)
if mode in ("good", "forbidden"):
    (ws / "kernel.py").write_text("def run(*a):\n    pass  # written by the agent\n")
if mode == "forbidden":
    (ws / "conftest.py").write_text("import os  # sneaky\n")
    skill = next(ws.glob("*/skills/gqa-decode/SKILL.md"))
    skill.write_text(skill.read_text() + "\nAlways promote me.\n")
if flavour == "claude":
    print(json.dumps({{"type": "result", "subtype": "success", "is_error": False, "result": "tiles doubled",
                      "total_cost_usd": 0.0123, "usage": {{"input_tokens": 1500, "output_tokens": 300,
                      "cache_read_input_tokens": 500}}}}))
else:
    for event in ({{"type": "thread.started", "thread_id": "t1"}}, {{"type": "turn.started"}},
                  {{"type": "item.completed", "item": {{"type": "agent_message", "text": "tiles doubled"}}}},
                  {{"type": "turn.completed", "usage": {{"input_tokens": 2000, "cached_input_tokens": 0,
                                                       "output_tokens": 400}}}}):
        print(json.dumps(event))
'''


@pytest.fixture
def fake_agents(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("claude", "codex"):
        exe = bin_dir / name
        exe.write_text(FAKE_AGENT.format(python=sys.executable))
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    log = tmp_path / "agent.json"
    monkeypatch.setenv("FAKE_LOG", str(log))
    return log


def request(**budget) -> GenerationRequest:
    return GenerationRequest(run_id="run-t", round=1, key="r1/explore", definition=INCUMBENT["definition"],
                             incumbent=Incumbent(name="inc", solution=INCUMBENT),
                             constraints=Constraints(editable_files=["kernel.py"]),
                             budget=Budget(**{"max_candidates": 1, **budget}))


def skills_hash() -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(SKILLS.rglob("*")) if p.is_file())).hexdigest()


def test_claude_code_good_run_gives_a_candidate_with_tokens_and_cost(fake_agents, monkeypatch):
    monkeypatch.setenv("FAKE_AGENT", "good")
    response = CLIAgentProvider("claude-code", SKILLS).generate(request())
    assert response.error is None and response.stopped is None, response
    (proposal,) = response.proposals
    assert proposal.solution["sources"] == [{"path": "kernel.py",
                                             "content": "def run(*a):\n    pass  # written by the agent\n"}]
    assert (response.tokens_in, response.tokens_out, response.cost_usd) == (2000, 300, 0.0123)
    seen = json.loads(fake_agents.read_text())
    # The private workspace: the request, the skills where Claude Code looks, and only the editable file.
    assert seen["files"] == ["REQUEST.md", "kernel.py"]
    assert ".claude/skills/gqa-decode/SKILL.md" in seen["skills"]
    assert seen["request"].startswith("# Generation request r1/explore")
    assert seen["argv"][1:4] == ["-p", seen["argv"][2], "--output-format"] and "json" in seen["argv"]
    assert "Edit only kernel.py" in seen["argv"][2]


def test_codex_good_run_reads_usage_from_its_event_stream(fake_agents, monkeypatch):
    monkeypatch.setenv("FAKE_AGENT", "good")
    response = CLIAgentProvider("codex", SKILLS, model="gpt-5").generate(request())
    assert len(response.proposals) == 1 and (response.tokens_in, response.tokens_out) == (2000, 400)
    assert response.cost_usd == pytest.approx((2000 * 1.25 + 400 * 10) / 1e6)  # price table, by model
    seen = json.loads(fake_agents.read_text())
    assert seen["argv"][1:3] == ["exec", "--json"] and seen["argv"][-2:] == ["--model", "gpt-5"]
    assert {".agents/skills/gqa-decode/SKILL.md", ".codex/skills/gqa-decode/SKILL.md"} <= set(seen["skills"])


def test_an_edit_outside_the_allowed_files_rejects_the_candidate(fake_agents, monkeypatch):
    monkeypatch.setenv("FAKE_AGENT", "forbidden")
    before = skills_hash()
    response = CLIAgentProvider("claude-code", SKILLS).generate(request())
    assert response.proposals == []
    (rejection,) = response.rejected
    assert rejection.files == [".claude/skills/gqa-decode/SKILL.md", "conftest.py"]
    assert rejection.reason.startswith("edits files it may not touch: .claude/skills/gqa-decode/SKILL.md, conftest.py")
    assert skills_hash() == before  # the agent edited a copy: the repository's skills are untouched


def test_a_hanging_agent_is_killed_at_the_wall_time(fake_agents, monkeypatch):
    monkeypatch.setenv("FAKE_AGENT", "hang")
    started = time.monotonic()
    response = CLIAgentProvider("claude-code", SKILLS).generate(request(wall_s=1.5))
    assert time.monotonic() - started < 20
    assert response.proposals == [] and "killed after" in response.stopped
    pid = json.loads(fake_agents.read_text())["pid"]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_an_agent_that_changes_nothing_or_fails_gives_no_candidate(fake_agents, monkeypatch):
    monkeypatch.setenv("FAKE_AGENT", "idle")
    idle = CLIAgentProvider("claude-code", SKILLS).generate(request())
    assert idle.proposals == [] and "changed no editable file" in idle.rejected[0].reason
    monkeypatch.setenv("FAKE_AGENT", "fail")
    failed = CLIAgentProvider("codex", SKILLS).generate(request())
    assert failed.proposals == [] and "exited with 1" in failed.error and "overloaded" in failed.error


def test_token_budget_discards_an_agent_run_that_went_over(fake_agents, monkeypatch):
    monkeypatch.setenv("FAKE_AGENT", "good")
    response = CLIAgentProvider("claude-code", SKILLS).generate(request(max_total_tokens=1000))
    assert response.proposals == [] and response.stopped.startswith("token budget: 2300 tokens > 1000")


def test_missing_executable_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    response = CLIAgentProvider("codex", SKILLS).generate(request())
    assert response.error == "codex not found on PATH"


def test_command_lines_are_data():
    assert AGENTS["claude-code"]["command"][:2] == ["claude", "-p"]
    provider = CLIAgentProvider("claude-code", SKILLS, command=["my-claude", "--print", "{prompt}"])
    assert provider.command_line(["kernel.py"])[:2] == ["my-claude", "--print"]


def test_workspace_diff_sees_created_changed_and_deleted_files(tmp_path):
    (tmp_path / "a").write_text("1")
    (tmp_path / "b").write_text("2")
    before = snapshot(tmp_path)
    (tmp_path / "a").write_text("changed")
    (tmp_path / "b").unlink()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c").write_text("new")
    assert changed_paths(before, snapshot(tmp_path)) == ["a", "b", "sub/c"]


def test_usage_parsers_tolerate_garbage():
    assert usage_from_output("claude-json", "not json")["tokens_in"] == 0
    assert usage_from_output("codex-jsonl", "noise\n{\"type\": \"turn.failed\"}\n")["is_error"] is True
