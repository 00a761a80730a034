"""A tool conversation through the real harness on this host, then replayed, and the first requests as the API
providers would send them.

    python benchmarks/agent_conversation.py --out DIR [--workload uniform_b1_kv512]

1. `controller loop` (library) on one definition and one workload with a scripted tool-using model (no network, no
   key): it reads the family's skill, reads the split-KV template, evaluates the example kernel as a draft through
   the harness, and submits it; every turn is archived (``agent_turns``).
2. `controller loop --provider replay --replay-run RUN` (the CLI) replays that run: the same conversation is copied
   into the new run and the same candidate is evaluated again.
3. `controller loop --dry-run` for the gqa_decode definitions with the anthropic and openai providers: the first
   request as it would be sent (parameters, tools, limits, skills, size), nothing sent.
Writes conversation.json (the archived turns), replay.json, dry_run_<provider>.json and README-ready summary.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controller.agent.scripted import ScriptedChat  # noqa: E402
from controller.agent.tool_loop import run_tool_loop  # noqa: E402
from controller.agent.tools import ToolBox  # noqa: E402
from controller.agent.transcript import AssistantTurn, ToolCall  # noqa: E402
from controller.loop import LoopConfig, run_loop  # noqa: E402
from controller.store import Store  # noqa: E402
from harness.archive.database import Archive  # noqa: E402

DEFINITION = "gqa_paged_decode_h32_kv8_d128_ps1"
EXAMPLE = ROOT / "examples" / "triton_gqa_decode" / "solutions" / f"{DEFINITION}.json"


class ScriptedToolAgent:
    """A tool-using provider whose model is scripted (what a real model's turns look like in the archive)."""

    name, model = "scripted-agent", "scripted-1"

    def __init__(self, workload: str):
        self.workload, self.context = workload, None

    def bind(self, skills, journal, evaluate=None, profile=None):
        self.context = (skills, journal, evaluate)

    def generate(self, request):
        skills, journal, evaluate = self.context
        # The example kernel with a changed header: a candidate of its own (the same code would be a duplicate of
        # the incumbent and never evaluated again).
        files = [{"path": s["path"], "content": "# variant submitted after a draft evaluation\n" + s["content"]}
                 for s in json.loads(EXAMPLE.read_text())["sources"]]
        calls = [("read_skill", {"name": "gqa-decode"}),
                 ("read_reference", {"skill": "gqa-decode", "path": "references/triton_split_kv.py.tmpl"}),
                 ("evaluate", {"files": files, "workloads": [self.workload]}),
                 ("submit_kernel", {"files": files, "entry_point": "kernel.py::run",
                                    "notes": "the example kernel, evaluated as a draft first"})]
        script = [AssistantTurn(text=f"step {i}", tool_calls=[ToolCall(id=f"t{i}", name=n, arguments=a)],
                                tokens_in=4000 + 3000 * i, tokens_out=600) for i, (n, a) in enumerate(calls)]
        box = ToolBox(request, skills, self.name, evaluate=evaluate)
        return run_tool_loop(request, ScriptedChat(script), box, journal, (3.0, 15.0))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--workload", default="uniform_b1_kv512")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    archive_dir = out / "archive"
    started = time.perf_counter()
    config = LoopConfig(definition=DEFINITION, rounds=1, candidates=1, repairs=0, workloads=[args.workload],
                        incumbent=str(EXAMPLE), hint="start from the example kernel; check a draft before submitting",
                        profile=False)
    report = run_loop(config, archive_dir, provider=ScriptedToolAgent(args.workload))
    recorded_s = time.perf_counter() - started
    store = Store(Archive(archive_dir))
    run_id = report["run_id"]
    turns = store.agent_turns(run_id, "r1/explore")
    (out / "conversation.json").write_text(json.dumps(turns, indent=1))

    started = time.perf_counter()
    replay = subprocess.run([sys.executable, "-m", "controller.cli", "loop", "--definition", DEFINITION, "--provider",
                             "replay", "--replay-run", run_id, "--rounds", "1", "--candidates", "1", "--repairs", "0",
                             "--archive", str(archive_dir), "--workloads", args.workload, "--incumbent", str(EXAMPLE),
                             "--no-profile", "--json"], capture_output=True, text=True, cwd=ROOT)
    replay_s = time.perf_counter() - started
    replayed = json.loads(replay.stdout) if replay.returncode == 0 else {"error": replay.stderr[-2000:]}
    (out / "replay.json").write_text(json.dumps(replayed, indent=1, default=str))
    same = (store.agent_turns(replayed.get("run_id", ""), "r1/explore") == turns) if "run_id" in replayed else False

    dry = {}
    for provider in ("anthropic", "openai"):
        proc = subprocess.run([sys.executable, "-m", "controller.cli", "loop", "--definition", "gqa_decode",
                               "--provider", provider, "--dry-run"], capture_output=True, text=True, cwd=ROOT)
        (out / f"dry_run_{provider}.json").write_text(proc.stdout or proc.stderr)
        data = json.loads(proc.stdout) if proc.returncode == 0 else []
        dry[provider] = [{k: d.get(k) for k in ("definition", "model", "size_tokens_estimate", "skills_listed",
                                                 "skill_files_readable", "preflight")} for d in data]

    lines = [f"# Tool conversation on CPU ({time.strftime('%Y-%m-%d')})", "",
             f"Recorded run `{run_id}` ({recorded_s:.0f} s, workload {args.workload}): {len(turns)} turns; "
             f"tools called: {', '.join(c['name'] for t in turns for c in t['assistant']['tool_calls'])}.", ""]
    for t in turns:
        for r in t["results"]:
            shown = " / ".join(line for line in r["content"].splitlines()[:3] if line.strip()) if r["content"] else ""
            lines.append(f"- turn {t['index']} `{r['name']}` -> {'error: ' if r['is_error'] else ''}{shown[:240]}")
    rounds = report.get("rounds", [])
    lines += ["", f"Round 1 of the recorded run: {json.dumps(rounds[1] if len(rounds) > 1 else {}, default=str)[:400]}",
              "", f"Replay (`controller loop --provider replay`, {replay_s:.0f} s): run `{replayed.get('run_id')}`, "
              f"the same {len(turns)} turns archived: {same}; exit code {replay.returncode}.", "",
              "Dry runs (`controller loop --definition gqa_decode --provider P --dry-run`):", ""]
    for provider, rows in dry.items():
        for row in rows:
            lines.append(f"- {provider} {row['definition']}: model {row['model']}, about {row['size_tokens_estimate']} "
                         f"tokens, skills {row['skills_listed']} ({row['skill_files_readable']} files); "
                         f"preflight: {row['preflight']}")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
