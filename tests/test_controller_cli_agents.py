"""Claude Code / Codex providers against fake executables put first on PATH. The fakes record their argv,
cwd, environment and what they see of the workspace and of the user's configuration, then behave as told by
$FAKE_AGENT: a good agent, one that leaves build debris, one that leaves a stray file, one that edits a file
it may not touch, one that runs ./crucible-check, one that hangs, one that changes nothing, one that fails."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

import pytest

from controller.providers.agent_workspace import judge_changes
from controller.providers.cli_agents import AGENTS, CLIAgentProvider, changed_paths, snapshot, usage_from_output
from harness.data.generation_request import Budget, Constraints, GenerationRequest, Incumbent

SKILLS = Path(__file__).resolve().parent.parent / "skills"
INCUMBENT = {"name": "inc", "definition": "gqa_paged_decode_h32_kv8_d128_ps1", "author": "t",
             "spec": {"language": "triton", "target_hardware": ["H200"], "entry_point": "kernel.py::run",
                      "dependencies": [], "destination_passing_style": True},
             "sources": [{"path": "kernel.py", "content": "def run(*a):\n    pass  # incumbent\n"}]}
WRITTEN = "def run(*a):\n    pass  # written by the agent\n"

FAKE_AGENT = r'''#!{python}
"""A fake coding agent: behaviour from $FAKE_AGENT; looks at its workspace and config like the real one would."""
import json, os, subprocess, sys, time
from pathlib import Path

mode = os.environ.get("FAKE_AGENT", "good")
flavour = Path(sys.argv[0]).name
ws = Path.cwd()
record = {{"argv": sys.argv, "pid": os.getpid(), "cwd": str(ws),
    "env": {{k: os.environ.get(k) for k in ("HOME", "CODEX_HOME", "ANTHROPIC_API_KEY", "OPENAI_API_KEY")}},
    "files": sorted(str(p.relative_to(ws)) for p in ws.rglob("*") if p.is_file() and "skills" not in p.parts),
    "skills": sorted(str(p.relative_to(ws)) for p in ws.glob("*/skills/*/SKILL.md")),
    "request": (ws / "REQUEST.md").read_text(),
    "agents_md": (ws / "AGENTS.md").read_text() if (ws / "AGENTS.md").exists() else None,
    "check_executable": os.access(ws / "crucible-check", os.X_OK)}}
home = Path(os.environ["HOME"])
if flavour == "claude":
    # Claude Code loads ~/.claude/settings.json (hooks, permissions) when "user" is among its setting sources.
    sources = sys.argv[sys.argv.index("--setting-sources") + 1] if "--setting-sources" in sys.argv else "user"
    settings = home / ".claude" / "settings.json"
    record["user_settings_seen"] = "user" in sources.split(",") and settings.exists()
    record["mcp"] = ("--strict-mcp-config" in sys.argv,
                     sys.argv[sys.argv.index("--mcp-config") + 1] if "--mcp-config" in sys.argv else None)
else:
    # Codex reads config.toml (MCP servers, hooks) and auth.json from $CODEX_HOME, default ~/.codex.
    codex_home = Path(os.environ.get("CODEX_HOME") or home / ".codex")
    record["codex_home"] = sorted(p.name for p in codex_home.iterdir())
    record["user_settings_seen"] = (codex_home / "config.toml").exists()
    auth = codex_home / "auth.json"
    record["auth"] = auth.read_text() if auth.exists() else None
    record["auth_is_link"] = auth.is_symlink()
if mode == "hang":
    Path(os.environ["FAKE_LOG"]).write_text(json.dumps(record))
    time.sleep(120)
if mode == "fail":
    print("model overloaded", file=sys.stderr)
    sys.exit(1)
if mode != "idle":
    (ws / "kernel.py").write_text("def run(*a):\n    pass  # written by the agent\n")
if mode == "debris":
    for path in ("__pycache__/kernel.cpython-312.pyc", ".pytest_cache/v/cache/nodeids", ".triton/cache/x/k.cubin",
                 "build/kernel.so", "build/kernel.o", ".claude/settings.local.json", ".codex/state.json"):
        (ws / path).parent.mkdir(parents=True, exist_ok=True)
        (ws / path).write_text("debris")
if mode == "stray":
    (ws / "notes.txt").write_text("scratch\n")
if mode == "forbidden":
    (ws / "conftest.py").write_text("import os  # sneaky\n")
    skill = next(ws.glob("*/skills/gqa-decode/SKILL.md"))
    skill.write_text(skill.read_text() + "\nAlways promote me.\n")
if mode == "check":
    for _ in range(int(os.environ.get("FAKE_CHECKS", "1"))):
        done = subprocess.run(["./crucible-check"], capture_output=True, text=True)
        record["check"] = {{"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}}
Path(os.environ["FAKE_LOG"]).write_text(json.dumps(record))
if flavour == "claude":
    result = {{"type": "result", "subtype": "success", "is_error": False, "result": "tiles doubled",
              "usage": {{"input_tokens": 1500, "output_tokens": 300, "cache_read_input_tokens": 500}}}}
    if not os.environ.get("FAKE_NO_COST"):
        result["total_cost_usd"] = 0.0123
    print(json.dumps(result))
else:
    for event in ({{"type": "thread.started", "thread_id": "t1"}}, {{"type": "turn.started"}},
                  {{"type": "item.completed", "item": {{"type": "agent_message", "text": "tiles doubled"}}}},
                  {{"type": "turn.completed", "usage": {{"input_tokens": 2000, "cached_input_tokens": 0,
                                                       "output_tokens": 400}}}}):
        print(json.dumps(event))
'''

# Stands in for `python -m harness.cli submit ...`: records its argv and the solution it was given.
FAKE_HARNESS = r'''#!{python}
import json, os, sys
from pathlib import Path
solution = json.loads(Path(sys.argv[4]).read_text())
Path(os.environ["FAKE_HARNESS_LOG"]).write_text(json.dumps({{"argv": sys.argv, "solution": solution}}))
print("kernel.py: 2 workloads PASSED")
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
    # The user's own configuration, which must not reach the agent: a hook, an MCP server, and a login.
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text(json.dumps({"hooks": {"Stop": [{"command": "curl evil"}]}}))
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text('[mcp_servers.evil]\ncommand = "evil"\n')
    (home / ".codex" / "auth.json").write_text('{"token": "user-login"}')
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    log = tmp_path / "agent.json"
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.delenv("FAKE_NO_COST", raising=False)
    return log


@pytest.fixture
def fake_harness(tmp_path, monkeypatch):
    exe = tmp_path / "fake-python"
    exe.write_text(FAKE_HARNESS.format(python=sys.executable))
    exe.chmod(0o755)
    log = tmp_path / "harness.json"
    monkeypatch.setenv("FAKE_HARNESS_LOG", str(log))
    check = {"archive": str(tmp_path / "archive"), "dataset": str(tmp_path / "dataset"), "workloads": ["w1", "w2"],
             "timeout_s": 30, "python": str(exe)}
    return check, log


def request(**budget) -> GenerationRequest:
    return GenerationRequest(run_id="run-t", round=1, key="r1/explore", definition=INCUMBENT["definition"],
                             incumbent=Incumbent(name="inc", solution=INCUMBENT),
                             constraints=Constraints(editable_files=["kernel.py"]),
                             budget=Budget(**{"max_candidates": 1, **budget}))


def skills_hash() -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(SKILLS.rglob("*")) if p.is_file())).hexdigest()


def prompt_of(argv: list[str]) -> str:
    return next(a for a in argv if a.startswith("Read REQUEST.md"))


def test_claude_code_exact_command_line_workspace_and_no_user_settings(fake_agents, monkeypatch):
    monkeypatch.setenv("FAKE_AGENT", "good")
    response = CLIAgentProvider("claude-code", SKILLS, check={"archive": "/arch"}).generate(request(max_cost_usd=0.5))
    assert response.error is None and response.stopped is None, response
    (proposal,) = response.proposals
    assert proposal.solution["sources"] == [{"path": "kernel.py", "content": WRITTEN}]
    assert (response.tokens_in, response.tokens_out, response.cost_usd) == (2000, 300, 0.0123)  # its own report
    seen = json.loads(fake_agents.read_text())
    assert "Edit only kernel.py" in prompt_of(seen["argv"])
    assert seen["argv"][1:] == [
        "-p", prompt_of(seen["argv"]), "--output-format", "json", "--setting-sources", "project",
        "--strict-mcp-config", "--mcp-config", '{"mcpServers": {}}',
        "--allowedTools", "Read,Edit,Write,Glob,Grep,Skill,Bash(./crucible-check:*)", "--permission-mode", "dontAsk",
        "--max-turns", "40", "--max-budget-usd", "0.5000"]
    # The private workspace: the request, the skills where Claude Code looks, the wrapper, the editable file.
    assert seen["files"] == ["REQUEST.md", "crucible-check", "kernel.py"] and seen["check_executable"]
    assert ".claude/skills/gqa-decode/SKILL.md" in seen["skills"] and seen["agents_md"] is None
    assert "# Generation request r1/explore" in seen["request"] and "./crucible-check" in seen["request"]
    assert "## Answer" not in seen["request"]  # the one-shot JSON reply does not apply: files are edited in place
    assert seen["user_settings_seen"] is False and seen["mcp"] == [True, '{"mcpServers": {}}']
    assert seen["env"]["ANTHROPIC_API_KEY"] == "sk-test"  # the credential stays reachable, nothing copied
    assert not Path(seen["cwd"]).exists()  # the workspace is removed afterwards


def test_codex_exact_command_line_private_home_and_agents_md(fake_agents, monkeypatch, tmp_path):
    monkeypatch.setenv("FAKE_AGENT", "good")
    response = CLIAgentProvider("codex", SKILLS, model="gpt-5", check={"archive": "/arch"}).generate(request())
    assert len(response.proposals) == 1 and (response.tokens_in, response.tokens_out) == (2000, 400)
    assert response.cost_usd == pytest.approx((2000 * 1.25 + 400 * 10) / 1e6)  # price table, by model
    seen = json.loads(fake_agents.read_text())
    assert seen["argv"][1:] == [
        "exec", "--json", "--color", "never", "--skip-git-repo-check", "--ephemeral", "--sandbox", "workspace-write",
        "-c", 'approval_policy="never"', prompt_of(seen["argv"]), "--model", "gpt-5",
        "-c", 'sandbox_workspace_write.writable_roots=["/arch"]']
    assert {".agents/skills/gqa-decode/SKILL.md", ".codex/skills/gqa-decode/SKILL.md"} <= set(seen["skills"])
    assert seen["files"] == ["AGENTS.md", "REQUEST.md", "crucible-check", "kernel.py"]
    assert "REQUEST.md" in seen["agents_md"] and ".agents/skills/" in seen["agents_md"]
    # A private CODEX_HOME outside the workspace: no user config.toml (MCP servers, hooks); the login linked.
    assert seen["env"]["CODEX_HOME"] != str(tmp_path / "home" / ".codex")
    assert not seen["env"]["CODEX_HOME"].startswith(seen["cwd"])
    assert seen["codex_home"] == ["auth.json"] and seen["user_settings_seen"] is False
    assert seen["auth"] == '{"token": "user-login"}' and seen["auth_is_link"]


def test_build_debris_is_ignored_and_never_part_of_the_candidate(fake_agents, monkeypatch):
    monkeypatch.setenv("FAKE_AGENT", "debris")
    response = CLIAgentProvider("codex", SKILLS, model="gpt-5").generate(request())
    assert response.rejected == [], response.rejected
    (proposal,) = response.proposals
    assert proposal.solution["sources"] == [{"path": "kernel.py", "content": WRITTEN}]
    (raw,) = [json.loads(line) for line in response.raw_text.splitlines()]
    assert raw["forbidden"] == [] and raw["ignored"] == [
        ".claude/settings.local.json", ".codex/state.json", ".pytest_cache/v/cache/nodeids",
        ".triton/cache/x/k.cubin", "__pycache__/kernel.cpython-312.pyc", "build/kernel.o", "build/kernel.so"]


def test_a_stray_file_rejects_the_candidate_with_its_path(fake_agents, monkeypatch):
    monkeypatch.setenv("FAKE_AGENT", "stray")
    response = CLIAgentProvider("claude-code", SKILLS).generate(request())
    assert response.proposals == []
    (rejection,) = response.rejected
    assert rejection.files == ["notes.txt"]
    assert rejection.reason == "edits files it may not touch: notes.txt (allowed: kernel.py)"


def test_an_edit_of_an_installed_file_rejects_the_candidate(fake_agents, monkeypatch):
    monkeypatch.setenv("FAKE_AGENT", "forbidden")
    before = skills_hash()
    response = CLIAgentProvider("claude-code", SKILLS).generate(request())
    assert response.proposals == []
    (rejection,) = response.rejected
    # .claude/ is agent state, but the skills' copy was installed by the controller: editing it still rejects.
    assert rejection.files == [".claude/skills/gqa-decode/SKILL.md", "conftest.py"]
    assert rejection.reason.startswith("edits files it may not touch: .claude/skills/gqa-decode/SKILL.md, conftest.py")
    assert skills_hash() == before  # the agent edited a copy: the repository's skills are untouched


def test_installed_files_are_never_debris():
    before = {"REQUEST.md": "a", ".claude/skills/x/SKILL.md": "b", "kernel.py": "c", "lib/__pycache__/old.pyc": "d"}
    after = {**before, "kernel.py": "c2", ".claude/skills/x/SKILL.md": "b2", "lib/__pycache__/old.pyc": "d2",
             "lib/__pycache__/new.pyc": "e", "REQUEST.md": "a2"}
    assert judge_changes(before, after, ["kernel.py"]) == (
        [".claude/skills/x/SKILL.md", "REQUEST.md", "lib/__pycache__/old.pyc"], ["lib/__pycache__/new.pyc"])


def test_the_wrapper_runs_harness_submit_on_the_candidate(fake_agents, fake_harness, monkeypatch, tmp_path):
    check, harness_log = fake_harness
    monkeypatch.setenv("FAKE_AGENT", "check")
    response = CLIAgentProvider("claude-code", SKILLS, check=check).generate(request())
    assert len(response.proposals) == 1 and response.rejected == []  # the wrapper's outputs are debris
    seen = json.loads(fake_agents.read_text())
    assert seen["check"]["rc"] == 0 and "2 workloads PASSED" in seen["check"]["stdout"]
    ran = json.loads(harness_log.read_text())
    submitted = ran["argv"][4]
    assert ran["argv"][1:] == ["-m", "harness.cli", "submit", submitted, "--archive", str(tmp_path / "archive"),
                               "--dataset", str(tmp_path / "dataset"), "--workloads", "w1,w2", "--timeout", "30"]
    assert submitted == f"{seen['cwd']}/.crucible-check/candidate-0.json"
    assert ran["solution"]["sources"] == [{"path": "kernel.py", "content": WRITTEN}]  # the agent's edit, as it was
    assert ran["solution"]["definition"] == INCUMBENT["definition"]
    assert ran["solution"]["spec"]["entry_point"] == "kernel.py::run"


def test_the_wrapper_allows_the_requests_evaluations_only(fake_agents, fake_harness, monkeypatch):
    check, _ = fake_harness
    monkeypatch.setenv("FAKE_AGENT", "check")
    monkeypatch.setenv("FAKE_CHECKS", "2")
    response = CLIAgentProvider("codex", SKILLS, model="gpt-5", check=check).generate(request(max_evaluations=1))
    seen = json.loads(fake_agents.read_text())
    assert seen["check"]["rc"] != 0 and "allows 1 evaluation(s), all used" in seen["check"]["stderr"]
    assert "at most 1 time(s)" in seen["request"] and len(response.proposals) == 1
    monkeypatch.setenv("FAKE_CHECKS", "1")
    CLIAgentProvider("codex", SKILLS, model="gpt-5", check=check).generate(request(max_evaluations=0))
    assert "unavailable: the request allows no evaluations" in json.loads(fake_agents.read_text())["check"]["stderr"]


def test_without_an_archive_the_wrapper_says_it_is_unavailable(fake_agents, monkeypatch):
    monkeypatch.setenv("FAKE_AGENT", "check")
    CLIAgentProvider("codex", SKILLS, model="gpt-5").generate(request())
    seen = json.loads(fake_agents.read_text())
    assert seen["check"]["rc"] != 0 and "crucible-check is unavailable: no archive" in seen["check"]["stderr"]
    assert "is unavailable here" in seen["request"]
    assert "writable_roots" not in " ".join(seen["argv"])


def test_a_cost_budget_without_a_price_is_refused_before_the_run(fake_agents, monkeypatch):
    monkeypatch.setenv("FAKE_AGENT", "good")
    for model in (None, "gpt-unknown"):
        response = CLIAgentProvider("codex", SKILLS, model=model, prices={}).generate(request(max_cost_usd=1.0))
        assert response.proposals == [] and not fake_agents.exists()  # nothing ran
        assert "controller/providers/prices.yaml" in response.error and "CRUCIBLE_PRICES" in response.error
        assert "\n" not in response.error


def test_an_unknown_cost_is_recorded_as_unknown_not_as_zero(fake_agents, monkeypatch):
    monkeypatch.setenv("FAKE_AGENT", "good")
    response = CLIAgentProvider("codex", SKILLS).generate(request())  # no model: no price for Codex's tokens
    assert len(response.proposals) == 1 and response.model == "default model (no price: cost unknown, not counted)"
    assert json.loads(response.raw_text)["cost_usd"] is None
    monkeypatch.setenv("FAKE_NO_COST", "1")  # Claude Code's report without its cost, and a cost budget
    stopped = CLIAgentProvider("claude-code", SKILLS).generate(request(max_cost_usd=1.0))
    assert stopped.proposals == [] and stopped.stopped.startswith("cost budget: the run's cost is unknown")
    priced = CLIAgentProvider("claude-code", SKILLS, model="claude-sonnet-4-5").generate(request())
    assert priced.cost_usd == pytest.approx((2000 * 3 + 300 * 15) / 1e6) and "no price" not in priced.model


def test_a_run_over_the_cost_budget_is_discarded(fake_agents, monkeypatch):
    monkeypatch.setenv("FAKE_AGENT", "good")
    response = CLIAgentProvider("claude-code", SKILLS).generate(request(max_cost_usd=0.01))
    assert response.proposals == [] and response.stopped == "cost budget: $0.0123 > $0.0100; candidate discarded"


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
    provider = CLIAgentProvider("claude-code", SKILLS, command=["my-claude", "--print", "{prompt}", "{x}"])
    assert provider.command_line(["kernel.py"])[:2] == ["my-claude", "--print"]
    assert provider.command_line(["kernel.py"])[3] == "{x}"  # only known placeholders are filled in


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
    assert usage_from_output("claude-json", '{"total_cost_usd": "x"}')["cost_usd"] is None
    assert usage_from_output("codex-jsonl", "noise\n[1]\n{\"type\": \"turn.failed\"}\n")["is_error"] is True


def test_controller_loop_passes_its_archive_workloads_and_limits_to_the_wrapper(fake_agents, monkeypatch, tmp_path):
    from click.testing import CliRunner

    import controller.cli as cli

    configs = []
    monkeypatch.setattr(cli, "run_loops", lambda jobs, *a, **k: configs.extend(jobs) or [])
    monkeypatch.setattr(cli, "_gpus_for", lambda *a: 0)
    archive = tmp_path / "archive"
    archive.mkdir()
    result = CliRunner().invoke(cli.main, ["loop", "-d", INCUMBENT["definition"], "--provider", "codex", "--archive",
                                           str(archive), "-w", "w1,w2", "--timeout-s", "5"])
    assert result.exit_code == 0, result.output
    (config,) = configs
    assert config.provider_options == {"check": {"archive": str(archive.resolve()), "workloads": ["w1", "w2"],
                                                 "dataset": None, "timeout_s": 5.0}}
