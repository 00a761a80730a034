"""Coding agents (Claude Code, Codex) run non-interactively in a private workspace.

The workspace holds REQUEST.md (the request as Markdown), a copy of the skills where each agent looks
for them, and only the files the candidate may edit. After the run every file is compared with its
state before: a file created, changed or deleted outside the allowed set rejects the candidate, with
the paths in the reason. The agent gets the request's wall time; past it the process group is killed.
Command lines are data (AGENTS) so a changed CLI flag is a one-line edit; tests run a fake executable.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from harness.generation_request import GenerationRequest, GenerationResponse, Rejection, render_prompt

from .base import (ProviderError, add, candidate_name, candidate_slots, cost_usd, normalise, price_of,
                   proposal_from_files)

AGENTS: dict[str, dict[str, Any]] = {
    "claude-code": {
        "command": ["claude", "-p", "{prompt}", "--output-format", "json", "--permission-mode", "acceptEdits",
                    "--max-turns", "{max_turns}"],
        "model_args": ["--model", "{model}"],
        "skills_dirs": [".claude/skills"],
        "output": "claude-json",
    },
    "codex": {
        "command": ["codex", "exec", "--json", "--color", "never", "--skip-git-repo-check", "--sandbox",
                    "workspace-write", "--ephemeral", "{prompt}"],
        "model_args": ["--model", "{model}"],
        "skills_dirs": [".agents/skills", ".codex/skills"],
        "output": "codex-jsonl",
    },
}
PROMPT = ("Read REQUEST.md in the current folder and do what it asks. Edit only {files} in place; create, "
          "change or delete no other file (anything else rejects your candidate). Stop when done.")
REQUEST_FILE = "REQUEST.md"
MAX_CAPTURE = 200_000


def snapshot(root: Path) -> dict[str, str]:
    """relative path -> content hash (symlinks by target) for every file under root."""
    state: dict[str, str] = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in files + [d for d in dirs if (Path(folder) / d).is_symlink()]:
            path = Path(folder) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                state[rel] = "link:" + os.readlink(path)
            else:
                state[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state


def changed_paths(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def usage_from_output(kind: str, stdout: str) -> dict[str, Any]:
    """tokens_in, tokens_out, cost_usd (None: unknown) and the agent's own error flag, from its output."""
    out: dict[str, Any] = {"tokens_in": 0, "tokens_out": 0, "cost_usd": None, "is_error": False, "text": ""}
    if kind == "claude-json":
        try:
            data = json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else {}
        except json.JSONDecodeError:
            return out
        usage = data.get("usage") or {}
        out["tokens_in"] = sum(int(usage.get(k) or 0) for k in
                               ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
        out["tokens_out"] = int(usage.get("output_tokens") or 0)
        out["cost_usd"] = data.get("total_cost_usd")
        out["is_error"] = bool(data.get("is_error"))
        out["text"] = str(data.get("result") or "")
    elif kind == "codex-jsonl":
        for line in stdout.splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("type") == "turn.completed":
                usage = event.get("usage") or {}
                out["tokens_in"] += int(usage.get("input_tokens") or 0)
                out["tokens_out"] += int(usage.get("output_tokens") or 0)
            elif event.get("type") in ("turn.failed", "error"):
                out["is_error"] = True
            elif event.get("type") == "item.completed" and (event.get("item") or {}).get("type") == "agent_message":
                out["text"] = str(event["item"].get("text") or "")
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
    def __init__(self, agent: str, skills_root: str | Path, model: Optional[str] = None, max_turns: int = 40,
                 command: Optional[list[str]] = None, prices: Optional[dict[str, tuple[float, float]]] = None,
                 keep_workspace: bool = False):
        if agent not in AGENTS:
            raise ValueError(f"unknown agent {agent!r}; known: {', '.join(AGENTS)}")
        self.name = agent
        self.spec = {**AGENTS[agent], **({"command": command} if command else {})}
        self.skills_root = Path(skills_root)
        self.model, self.max_turns, self.prices, self.keep_workspace = model, max_turns, prices, keep_workspace

    def preflight(self) -> None:
        require_executable(self.name, self.spec["command"])

    def command_line(self, files: list[str]) -> list[str]:
        values = {"prompt": PROMPT.format(files=", ".join(files)), "max_turns": str(self.max_turns),
                  "model": self.model or ""}
        argv = [part.format(**values) for part in self.spec["command"]]
        if self.model:
            argv += [part.format(**values) for part in self.spec["model_args"]]
        return argv

    def workspace(self, request: GenerationRequest) -> tuple[Path, dict[str, str]]:
        """A private folder: REQUEST.md, the skills, and the editable files (the failed candidate's on repair)."""
        root = Path(tempfile.mkdtemp(prefix=f"crucible-{self.name}-"))
        (root / REQUEST_FILE).write_text(render_prompt(request))
        for folder in self.spec["skills_dirs"]:
            # A copy, not a link: an agent that edits a skill must not change the repository's skills.
            shutil.copytree(self.skills_root, root / folder, symlinks=False,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        source = request.repair.solution if request.repair is not None else request.incumbent.solution
        files = {s["path"]: s["content"] for s in source.get("sources", [])}
        editable = {}
        for path in request.constraints.editable_files:
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(files.get(path, ""))
            editable[normalise(path)] = files.get(path, "")
        return root, editable

    def run_once(self, request: GenerationRequest, index: int, wall_s: float) -> dict[str, Any]:
        root, editable = self.workspace(request)
        before = snapshot(root)
        argv = self.command_line(list(editable))
        started = time.monotonic()
        timed_out = False
        try:
            proc = subprocess.Popen(argv, cwd=root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True, text=True, errors="replace")
        except OSError as err:
            shutil.rmtree(root, ignore_errors=True)
            return {"error": f"cannot run {argv[0]}: {err}", "argv": argv}
        try:
            stdout, stderr = proc.communicate(timeout=wall_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the agent and everything it started
            except ProcessLookupError:
                pass
            stdout, stderr = proc.communicate()
        elapsed = time.monotonic() - started
        after = snapshot(root)
        changed = changed_paths(before, after)
        edited = {p: (root / p).read_text(errors="replace") for p in editable if (root / p).is_file()}
        if not self.keep_workspace:
            shutil.rmtree(root, ignore_errors=True)
        return {"argv": argv, "exit": proc.returncode, "timed_out": timed_out, "wall_s": elapsed,
                "stdout": stdout[-MAX_CAPTURE:], "stderr": stderr[-20_000:], "changed": changed,
                "editable": list(editable), "edited": edited, "unchanged": all(edited.get(p) == c
                                                                                for p, c in editable.items())}

    def generate(self, request: GenerationRequest) -> GenerationResponse:
        b = request.budget
        response = GenerationResponse(provider=self.name, model=self.model or "")
        exe = self.spec["command"][0]
        if shutil.which(exe) is None:
            response.error = f"{exe} not found on PATH"
            return response
        price = price_of(self.model or "", self.prices) if self.model else None
        raws: list[str] = []
        started = time.monotonic()
        for index, left in candidate_slots(b, response, started):
            run = self.run_once(request, index, left)
            raws.append(json.dumps({k: v for k, v in run.items() if k != "edited"}))
            if "error" in run:
                response.error = run["error"]
                break
            usage = usage_from_output(self.spec["output"], run["stdout"])
            response.tokens_in += usage["tokens_in"]
            response.tokens_out += usage["tokens_out"]
            response.cost_usd += usage["cost_usd"] if usage["cost_usd"] is not None else cost_usd(
                usage["tokens_in"], usage["tokens_out"], price)
            name = candidate_name(request, self.name, index)
            if run["timed_out"]:
                response.stopped = f"wall time: {exe} killed after {left:.0f} s"
                break
            if b.max_total_tokens is not None and response.tokens_in + response.tokens_out > b.max_total_tokens:
                response.stopped = (f"token budget: {response.tokens_in + response.tokens_out} tokens > "
                                    f"{b.max_total_tokens}; candidate discarded")
                break
            if b.max_cost_usd is not None and response.cost_usd > b.max_cost_usd:
                response.stopped = f"cost budget: ${response.cost_usd:.4f} > ${b.max_cost_usd:.4f}; candidate discarded"
                break
            if run["exit"] != 0 or usage["is_error"]:
                response.error = f"{exe} exited with {run['exit']}: {run['stderr'][-500:] or usage['text'][-500:]}"
                break
            forbidden = [p for p in run["changed"] if p not in run["editable"]]
            if forbidden:
                response.rejected.append(Rejection(
                    name=name, files=forbidden,
                    reason=f"edits files it may not touch: {', '.join(forbidden)} "
                           f"(allowed: {', '.join(run['editable'])})"))
                continue
            if run["unchanged"]:
                response.rejected.append(Rejection(name=name, reason="the agent changed no editable file"))
                continue
            add(response, proposal_from_files(request, run["edited"], request.constraints.entry_point, name,
                                              f"controller/{self.name}", {"provider": self.name, "model": self.model},
                                              usage["text"][-2000:]))
        response.raw_text = "\n".join(raws)
        response.wall_s = time.monotonic() - started
        return response
