"""Coding agents (Claude Code, Codex) run non-interactively in a private workspace (agent_workspace.py).

Each candidate gets a fresh workspace: REQUEST.md, the skills where the agent looks for them, AGENTS.md
(Codex), the editable files and ./crucible-check, which runs the harness's own `harness submit` on the
candidate with the request's workloads and limits. The agent may read, edit and search files and run that
wrapper; nothing else. No user settings, hooks or MCP servers reach it: Claude Code loads only the
workspace's own settings source (its skills) and an empty, strict MCP config; Codex gets a private CODEX_HOME
with no config.toml whose auth.json links to the user's. Credentials stay where they are (environment
variables pass through; nothing is copied into the workspace).

Bounds: the request's wall time (past it the process group is killed), the cost budget passed to the CLI
where it has a flag (Claude Code: --max-budget-usd) and checked after every run from the agent's usage
report, the token budget checked likewise. A cost is known from the agent's own report (Claude Code) or the
price table by model; an unknown cost is recorded as unknown, never as 0, and a request with a cost budget
that cannot be priced is refused before anything runs. Command lines are data (AGENTS): a changed CLI flag
is a one-line edit; tests run fake executables.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, Optional

from harness.data.generation_request import GenerationRequest, GenerationResponse, Rejection, render_prompt

from .agent_process import run_agent
from .agent_workspace import (CHECK_SCRIPT, build_workspace, changed_paths, is_debris, judge_changes,
                              outside_entries, read_edited, snapshot)
from .api_errors import mask, redact
from .base import (PRICES_FILE, ProviderError, add, candidate_name, candidate_slots, cost_usd, normalise, price_of,
                   proposal_from_files)

__all__ = ["AGENTS", "CLIAgentProvider", "changed_paths", "require_executable", "snapshot", "usage_from_output"]

# The tools Claude Code gets, all pre-approved; in dontAsk mode every other tool call is denied, never asked.
# Skill lets it load the workspace's skills.
CLAUDE_TOOLS = f"Read,Edit,Write,Glob,Grep,Skill,Bash(./{CHECK_SCRIPT}:*)"

AGENTS: dict[str, dict[str, Any]] = {
    "claude-code": {
        "command": ["claude", "-p", "{prompt}", "--output-format", "json",
                    # only the workspace's own .claude/ (the skills' copy): no user settings, hooks or CLAUDE.md
                    "--setting-sources", "project",
                    "--strict-mcp-config", "--mcp-config", '{"mcpServers": {}}',
                    "--allowedTools", CLAUDE_TOOLS, "--permission-mode", "dontAsk",
                    "--max-turns", "{max_turns}"],
        "model_args": ["--model", "{model}"],
        "budget_args": ["--max-budget-usd", "{max_cost_usd}"],  # the CLI stops itself at the cost budget
        "skills_dirs": [".claude/skills"],
        "instructions": None,
        "private_home": None,  # settings are cut by flags; its login (~/.claude) must stay reachable
        "output": "claude-json",
        "reports_cost": True,  # total_cost_usd in its JSON result
    },
    "codex": {
        "command": ["codex", "exec", "--json", "--color", "never", "--skip-git-repo-check", "--ephemeral",
                    "--sandbox", "workspace-write", "-c", 'approval_policy="never"', "{prompt}"],
        "model_args": ["--model", "{model}"],
        "budget_args": [],  # no cost flag: enforced from the usage report and the price table
        # the archive the wrapper's `harness submit` writes to, outside the workspace sandbox
        "writable_args": ["-c", 'sandbox_workspace_write.writable_roots=["{archive}"]'],
        "skills_dirs": [".agents/skills", ".codex/skills"],
        "instructions": "AGENTS.md",
        # CODEX_HOME holds config.toml (MCP servers, hooks, profiles) and a global AGENTS.md: a private one with
        # only a link to the login keeps all of that out; OPENAI_API_KEY/CODEX_API_KEY pass through as they are.
        "private_home": {"env": "CODEX_HOME", "default": "~/.codex", "link": ["auth.json"]},
        "output": "codex-jsonl",
        "reports_cost": False,
    },
}
PROMPT = ("Read REQUEST.md in the current folder and do what it asks. Edit only {files} in place; create, "
          "change or delete no other file (anything else rejects your candidate). Check your candidate with "
          "./crucible-check before you stop. Stop when done.")
MAX_CAPTURE = 200_000
# What Claude Code and Codex say when their login or key is refused (or the account has no quota left).
REFUSED_LOGIN = re.compile(r"invalid api key|invalid x-api-key|401 unauthorized|authentication_error|please run "
                           r"/login|not logged in|insufficient_quota|credit balance is too low", re.I)


def usage_from_output(kind: str, stdout: str) -> dict[str, Any]:
    """tokens_in, tokens_out, cost_usd (None: unknown) and the agent's own error flag, from its output."""
    out: dict[str, Any] = {"tokens_in": 0, "tokens_out": 0, "cost_usd": None, "is_error": False, "text": "",
                           "reported": False}
    if kind == "claude-json":
        data = _last_json(stdout)
        if data is None:
            return out
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        out["reported"] = bool(usage)
        out["tokens_in"] = sum(_count(usage.get(k)) for k in
                               ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
        out["tokens_out"] = _count(usage.get("output_tokens"))
        cost = data.get("total_cost_usd")
        finite = isinstance(cost, (int, float)) and not isinstance(cost, bool) and 0 <= cost < float("inf")
        out["cost_usd"] = float(cost) if finite else None  # NaN, a negative or a string: unknown, never free
        out["is_error"] = bool(data.get("is_error"))
        # Out of turns is how a long session ends, not a failure: what the agent wrote is still its candidate.
        out["out_of_turns"] = data.get("subtype") == "error_max_turns"
        out["text"] = str(data.get("result") or "")
    elif kind == "codex-jsonl":
        for line in stdout.splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(event, dict):
                continue
            if event.get("type") == "turn.completed":
                usage = event.get("usage") if isinstance(event.get("usage"), dict) else {}
                out["reported"] = out["reported"] or bool(usage)
                out["tokens_in"] += _count(usage.get("input_tokens"))
                out["tokens_out"] += _count(usage.get("output_tokens"))
            elif event.get("type") in ("turn.failed", "error"):
                out["is_error"] = True
            elif event.get("type") == "item.completed" and isinstance(event.get("item"), dict) \
                    and event["item"].get("type") == "agent_message":
                out["text"] = str(event["item"].get("text") or "")
    return out


def _last_json(stdout: str) -> Optional[dict[str, Any]]:
    """The agent's JSON result: the whole output, else its last line (warnings may come before it)."""
    text = stdout.strip()
    for candidate in (text, text.splitlines()[-1] if text else ""):
        try:
            data = json.loads(candidate)
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(data, dict):
            return data
    return None


def _count(value: Any) -> int:
    """A token count as reported; anything that is not a count (null, text, a negative number) is 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def fill(parts: list[str], values: dict[str, str]) -> list[str]:
    """Put the values in for their {name}; other braces (a JSON argument) stay as they are."""
    out = []
    for part in parts:
        for name, value in values.items():
            part = part.replace("{" + name + "}", value)
        out.append(part)
    return out


def require_executable(agent: str, command: list[str] | None = None) -> str:
    """The agent's executable, found on PATH, else ProviderError naming it (the preflight of a CLI agent)."""
    if agent not in AGENTS:
        raise ProviderError(f"unknown agent {agent!r}; known: {', '.join(AGENTS)}")
    exe = (command or AGENTS[agent]["command"])[0]
    path = shutil.which(exe)
    if path is None:
        raise ProviderError(f"the {agent} provider runs `{exe}`, which is not on PATH (install it or add its "
                            "folder to PATH)")
    return path


class CLIAgentProvider:
    """``check``: what ./crucible-check submits with (archive, dataset, workloads, timeout_s; python and module
    for tests); without an archive the wrapper says it is unavailable."""

    def __init__(self, agent: str, skills_root: str | Path, model: Optional[str] = None, max_turns: int = 40,
                 command: Optional[list[str]] = None, prices: Optional[dict[str, tuple[float, float]]] = None,
                 keep_workspace: bool = False, check: Optional[dict[str, Any]] = None):
        if agent not in AGENTS:
            raise ValueError(f"unknown agent {agent!r}; known: {', '.join(AGENTS)}")
        self.name = agent
        self.spec = {**AGENTS[agent], **({"command": command} if command else {})}
        self.skills_root = Path(skills_root)
        self.model, self.max_turns, self.prices, self.keep_workspace = model, max_turns, prices, keep_workspace
        self.check = dict(check) if check else None

    def preflight(self) -> None:
        require_executable(self.name, self.spec["command"])

    def command_line(self, files: list[str], cost_left: Optional[float] = None) -> list[str]:
        values = {"prompt": PROMPT.format(files=", ".join(files)), "max_turns": str(self.max_turns),
                  "model": self.model or "", "max_cost_usd": f"{cost_left:.4f}" if cost_left is not None else "",
                  "archive": str((self.check or {}).get("archive") or "")}
        argv = fill(self.spec["command"], values)
        if self.model:
            argv += fill(self.spec["model_args"], values)
        if cost_left is not None:
            argv += fill(self.spec.get("budget_args", []), values)
        if values["archive"]:
            argv += fill(self.spec.get("writable_args", []), values)
        return argv

    def price(self) -> Optional[tuple[float, float]]:
        return price_of(self.model, self.prices) if self.model else None

    def cost_refusal(self, request: GenerationRequest) -> Optional[str]:
        """Why a request with a cost budget cannot be run (its cost could not be known), else None."""
        if request.budget.max_cost_usd is None or self.spec.get("reports_cost") or self.price() is not None:
            return None
        table = PRICES_FILE.relative_to(PRICES_FILE.parents[2])
        if self.model:
            return f"cost budget set but model {self.model!r} has no price: add it to {table} or to $CRUCIBLE_PRICES"
        return (f"cost budget set but no --model given, so {self.name}'s default model has no price: pass --model "
                f"with a price in {table} or in $CRUCIBLE_PRICES")

    def workspace(self, request: GenerationRequest):
        """(parent, workspace, private home, editable path -> starting content); the failed candidate on repair."""
        source = request.repair.solution if request.repair is not None else request.incumbent.solution
        contents = {s["path"]: s["content"] for s in source.get("sources", [])}
        files = {normalise(p): contents.get(p, "") for p in request.constraints.editable_files}
        # What ./crucible-check submits: the proposal this workspace would give, the agent's files put in at run.
        start = proposal_from_files(request, files, request.constraints.entry_point,
                                    candidate_name(request, self.name, 0), f"controller/{self.name}", {})
        solution = getattr(start, "solution", None)
        # Harness evaluations the request allows (a budget field of tool conversations; absent: no count).
        max_checks = getattr(request.budget, "max_evaluations", None)
        parent, root, home = build_workspace(self.name, self.spec, self.skills_root, render_prompt(request), files,
                                             solution, self.check, max_checks)
        return parent, root, home, files

    def environment(self, home) -> dict[str, str]:
        env = dict(os.environ)
        spec = self.spec.get("private_home")
        if spec and home is not None:
            env[spec["env"]] = str(home)
        return env

    def run_once(self, request: GenerationRequest, wall_s: float, cost_left: Optional[float]) -> dict[str, Any]:
        parent, root, home, files = self.workspace(request)
        editable = list(files)
        # The skills the controller itself reads (prompts, the promotion rules) live outside the workspace: an agent
        # that reached them through the wrapper's paths must not change what judges it.
        before, around, skills = snapshot(root), outside_entries(parent), snapshot(self.skills_root)
        argv = self.command_line(editable, cost_left)
        try:
            run = run_agent(argv, root, self.environment(home), wall_s, MAX_CAPTURE)
        except OSError as err:
            shutil.rmtree(parent, ignore_errors=True)
            return {"error": f"cannot run {argv[0]}: {err}", "argv": argv}
        forbidden, ignored = judge_changes(before, snapshot(root), editable)
        forbidden += [f"../{name}" for name in sorted(outside_entries(parent) - around)]  # beside the workspace
        forbidden += [f"{self.skills_root}/{p}" for p in changed_paths(skills, snapshot(self.skills_root))
                      if not is_debris(p)]
        edited, not_files = read_edited(root, editable)
        if not self.keep_workspace:
            shutil.rmtree(parent, ignore_errors=True)
        return {"argv": argv, "workspace": str(root), "exit": run.exit, "timed_out": run.timed_out,
                "wall_s": run.wall_s, "stdout": mask(run.stdout), "stderr": mask(run.stderr),
                "left_running": run.killed,
                "forbidden": forbidden, "not_files": not_files, "ignored": ignored, "editable": editable,
                "edited": edited, "unchanged": all(edited.get(p) == c for p, c in files.items())}

    def generate(self, request: GenerationRequest) -> GenerationResponse:
        b = request.budget
        response = GenerationResponse(provider=self.name, model=self.model or "")
        exe = self.spec["command"][0]
        if shutil.which(exe) is None:
            response.error = f"{exe} not found on PATH"
            return response
        refusal = self.cost_refusal(request)
        if refusal:
            response.error = refusal
            return response
        price = self.price()
        cost_unknown = False
        raws: list[str] = []
        started = time.monotonic()
        for index, left in candidate_slots(b, response, started):
            cost_left = b.max_cost_usd - response.cost_usd if b.max_cost_usd is not None else None
            run = self.run_once(request, left, cost_left)
            if "error" in run:
                raws.append(json.dumps(run))
                response.error = run["error"]
                break
            usage = usage_from_output(self.spec["output"], run["stdout"])
            cost = usage["cost_usd"]
            if cost is None and price is not None:
                cost = cost_usd(usage["tokens_in"], usage["tokens_out"], price)
            raws.append(json.dumps({**{k: v for k, v in run.items() if k != "edited"}, "cost_usd": cost}))
            response.tokens_in += usage["tokens_in"]
            response.tokens_out += usage["tokens_out"]
            if cost is None:
                cost_unknown = True  # recorded in the model field and the raw record, never as a spend of 0
            else:
                response.cost_usd += cost
            name = candidate_name(request, self.name, index)
            if run["timed_out"]:
                response.stopped = f"wall time: {exe} killed after {left:.0f} s"
                break
            if b.max_total_tokens is not None and not usage["reported"]:
                response.stopped = ("token budget: the run's token use is unknown (no usage report in the agent's "
                                    "output); candidate discarded")
                break
            if b.max_total_tokens is not None and response.tokens_in + response.tokens_out > b.max_total_tokens:
                response.stopped = (f"token budget: {response.tokens_in + response.tokens_out} tokens > "
                                    f"{b.max_total_tokens}; candidate discarded")
                break
            if b.max_cost_usd is not None and (cost is None or response.cost_usd > b.max_cost_usd):
                response.stopped = ("cost budget: the run's cost is unknown (no usage report); candidate discarded"
                                    if cost is None else f"cost budget: ${response.cost_usd:.4f} > "
                                    f"${b.max_cost_usd:.4f}; candidate discarded")
                break
            if usage.get("out_of_turns"):
                note = f"{exe} used its {self.max_turns} turns; its files as they were are the candidate"
                response.stopped = f"{response.stopped}; {note}" if response.stopped else note
            elif run["exit"] != 0 or usage["is_error"]:
                said = run["stderr"][-500:] or usage["text"][-500:] or run["stdout"][-500:] or "(no output)"
                response.error = redact(f"{exe} exited with {run['exit']}: {said}")
                if REFUSED_LOGIN.search(f"{run['stderr']}\n{usage['text']}\n{run['stdout'][-2000:]}"):
                    # every later run would fail the same way: the run stops here, on one line
                    raise ProviderError(f"the {self.name} agent's credential was refused, so the run cannot go on: "
                                        f"{response.error}")
                break
            if run["not_files"]:
                response.rejected.append(Rejection(
                    name=name, files=sorted(run["not_files"]),
                    reason="; ".join(f"{p}: {why}" for p, why in sorted(run["not_files"].items())) + "; not read"))
                continue
            if run["forbidden"]:
                response.rejected.append(Rejection(
                    name=name, files=run["forbidden"],
                    reason=f"edits files it may not touch: {', '.join(run['forbidden'])} "
                           f"(allowed: {', '.join(run['editable'])})"))
                continue
            if run["unchanged"]:
                response.rejected.append(Rejection(name=name, reason="the agent changed no editable file"))
                continue
            add(response, proposal_from_files(request, run["edited"], request.constraints.entry_point, name,
                                              f"controller/{self.name}", {"provider": self.name, "model": self.model},
                                              usage["text"][-2000:]))
        if cost_unknown:
            response.model = f"{self.model or 'default model'} (no price: cost unknown, not counted)"
        response.raw_text = "\n".join(raws)
        response.wall_s = time.monotonic() - started
        return response
