"""`controller`: a thin command line over controller.loop. Parses, calls, prints."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Optional

import click
from rich.markup import escape
from rich.table import Table

from harness.archive.database import ARCHIVE_ENV, ArchiveMissing, archive_location
from harness.archive.storage import storage_message
from harness.cli_common import NOT_A_FOLDER, POSITIVE_SECONDS, FiniteRange, SafeConsole
from harness.data.dataset import Dataset
from harness.data.schema import SchemaError
from harness.data.statuses import RunStatus

from .loop import LoopConfig, resume_loop, run_loops
from .profile_cli import profile
from .providers.base import ProviderError
from .providers.registry import PROVIDERS, default_provider, preflight
from .skills import SkillError
from . import runlock
from .startcheck import check_new_runs, conflicting_options, read_hint

ARCHIVE_HELP = f"Archive folder (default: ${ARCHIVE_ENV}, else ./artifacts)."
out = SafeConsole(width=None if sys.stdout.isatty() else 200)
err = SafeConsole(stderr=True, width=None if sys.stderr.isatty() else 200)


def fail(message: str, code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    sys.exit(code)


def fmt(x: Optional[float], digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def round_table(rounds: list[dict[str, Any]], title: str = "rounds") -> Table:
    table = Table(title=title)
    for column in ("round", "kind", "candidates", "statuses", "best latency ms", "speedup vs FlashInfer",
                   "tokens", "cost $", "wall s", "decision"):
        table.add_column(column, overflow="fold")
    for r in rounds:
        statuses = ", ".join(f"{n} {s}" for s, n in sorted(r.get("statuses", {}).items()))
        decision = r.get("decision", "")
        if r.get("stopped"):
            decision += " | stopped: " + "; ".join(r["stopped"])
        if r.get("rejected"):
            decision += " | rejected: " + "; ".join(r["rejected"])
        table.add_row(str(r["round"]), escape(r["kind"]) + (f" +{r['repairs']} repair" if r.get("repairs") else ""),
                      str(r["candidates"]), statuses, fmt(r.get("best_latency_ms")),
                      fmt(r.get("speedup_vs_flashinfer"), 3), str(r.get("tokens", 0)), f"{r.get('cost_usd', 0):.4f}",
                      f"{r.get('wall_s', 0):.1f}", escape(decision))
    return table


def print_report(report: dict[str, Any]) -> None:
    out.print(round_table(report["rounds"], f"{report['run_id']}: {report['definition']} ({report['provider']})"))
    inc = report["incumbent"]
    t = report["totals"]
    out.print(f"run {report['run_id']}: {report['status']}, stopped because {report['stop_reason']}", highlight=False)
    out.print(f"timing: {report['timing']}", highlight=False)
    out.print(f"incumbent: {inc['name']} ({inc['status']}, {'promoted' if inc['promoted'] else 'not promoted'}"
              + (f", mean {fmt(inc['mean_latency_ms'])} ms" if inc["mean_latency_ms"] is not None else "")
              + (f", exported to {inc['exported']}" if inc["exported"] else "") + ")", highlight=False)
    verdicts: dict[str, int] = {}
    for d in report["decisions"]:
        verdicts[d["verdict"]] = verdicts.get(d["verdict"], 0) + 1
    out.print(f"candidates: {t['candidates']} ({t['evaluated']} evaluated by the harness); decisions: "
              + (", ".join(f"{n} {v}" for v, n in sorted(verdicts.items())) or "none")
              + f"; spend: {t['tokens']} tokens, ${t['cost_usd']:.4f}, {t['wall_s']:.1f} s", highlight=False)
    reasons = sorted({d["reasons"][0] for d in report["decisions"] if d["verdict"] == "REJECTED" and d["reasons"]})
    for reason in reasons[:5]:
        out.print(f"  not promoted: {reason}", highlight=False)


def live_printer(as_json: bool):
    # With --json, stdout is the JSON alone: the progress, round tables included, goes to stderr (logs keep it).
    tables = err if as_json else out

    def on_event(kind: str, data: dict[str, Any]) -> None:
        lane = f"{data['lane']}: " if data.get("lane") else ""  # runs side by side, one per GPU
        if kind == "run":
            err.print(f"{lane}[bold]{'resuming' if data['resumed'] else 'starting'} {data['run_id']}[/] "
                      f"({data['definition']}, provider {data['provider']})", highlight=False)
        elif kind == "lock_takeover":
            err.print(escape(data["note"]), highlight=False)
        elif kind == "lane_error":
            err.print(f"{lane}[bold red]failed:[/] {escape(data['error'])} (the other runs go on; this error ends the "
                      "command when they stop)", highlight=False)
        elif kind == "evidence":
            err.print(f"{lane}evidence for {data['incumbent']}: {data['source']} ({data['note']})", highlight=False,
                      markup=False)
        elif kind == "round_start":
            err.print(f"{lane}round {data['round']}: regime {data['regime']} ({data['reason']})", highlight=False)
        elif kind == "response" and (data["stopped"] or data["error"]):
            err.print(f"{lane}  {data['key']}: {data['proposals']} proposal(s); "
                      f"{'stopped: ' + data['stopped'] if data['stopped'] else 'error: ' + str(data['error'])}",
                      highlight=False, markup=False)  # a model's or a server's words: brackets are text
        elif kind == "candidate":
            err.print(f"{lane}  {data['name']}: {data['status']}" + (" (adopted)" if data.get("adopted") else "")
                      + (f" ({data['screened_out']})" if data.get("screened_out") else ""),
                      highlight=False, markup=False)
        elif kind == "screen":  # a rung of successive halving (controller/screening.py)
            err.print(f"{lane}  screening rung {data['rung']} ({data['iterations']} iterations): {data['entered']} -> "
                      f"{len(data['kept'])} kept", highlight=False)
        elif kind == "round":
            tables.print(round_table([data], title=f"{lane}round {data['round']}"))
    return on_event


@click.group()
@click.version_option("0.1.0", prog_name="controller")
def main() -> None:
    """Crucible controller: propose kernels within bounds; the harness judges them."""
    from harness.cli_common import dump_stacks_from_env
    from harness.sandbox.runner import exit_on_sigterm

    exit_on_sigterm()
    dump_stacks_from_env()  # a value the workers could not read either is one line here


def _split(values: tuple[str, ...]) -> Optional[list[str]]:
    items = [v.strip() for value in values for v in value.split(",") if v.strip()]
    if values and not items:  # `-w ''`: a selector that names nothing must not mean everything
        fail("the selection names nothing (an empty value)")
    return items or None


def _definitions(values: tuple[str, ...], dataset: Optional[str]) -> list[str]:
    """--definition values (names or aliases) -> definition names, each once, in the order given."""
    wanted = _split(values)
    if not wanted:
        fail("--definition is required (or --resume RUN_ID)")
    ds = Dataset(dataset)
    return list(dict.fromkeys(name for value in wanted for name in ds.resolve(value)))


def _resume_ids(values: tuple[str, ...], archive: Path) -> list[str]:
    """--resume values -> run ids, each once; 'unfinished' stands for every run cut short (Store.unfinished_runs)."""
    from harness.archive.database import Archive

    from .store import Store

    ids: list[str] = []
    store = Store(Archive.open_existing(archive))  # ArchiveMissing: no archive, so no run to resume (one line)
    for value in _split(values) or []:
        if value != "unfinished":
            if not value.isprintable() or store.run(value) is None:  # said before its lock is taken: nothing is made
                fail(f"--resume: no run {escape(repr(value[:200]))} in {escape(str(archive))} (`controller runs` lists "
                     "them)")  # for a run that is not (a name that is not text, undecodable bytes, is none)
            ids.append(value)
            continue
        found = store.unfinished_runs()
        if not found:
            fail(f"--resume unfinished: every run in {archive} has finished")
        for run_id in found:  # a RUNNING run another process drives is not cut short: left to it, said
            held = runlock.holder(archive, run_id)
            if held is None:
                ids.append(run_id)
            else:
                err.print(f"--resume unfinished: left out: {escape(runlock.describe_holder(run_id, held))}",
                          highlight=False)
        if not ids:
            fail(f"--resume unfinished: every unfinished run in {archive} is being driven by another process")
    return list(dict.fromkeys(ids))


def _lock_resumed(run_ids: list[str], archive: Path) -> None:
    """Each resumed run's lock, taken before the run is touched (limits, status) and held until the command
    ends (controller/runlock.py): a run another process drives is refused on one line."""
    for run_id in run_ids:
        left = runlock.acquire(archive, run_id)  # RunLocked (a ValueError): one line, exit 2
        if left:
            err.print(escape(runlock.describe_takeover(run_id, left)), highlight=False)


def _open_existing(archive_path: str | None) -> Any:
    """The archive of --archive, else $CRUCIBLE_ARCHIVE, else ./artifacts, for commands that only read it: one
    line and exit 2 when there is none (nothing is created)."""
    from harness.archive.database import Archive, ArchiveError

    folder, source = archive_location(archive_path)
    try:
        return Archive.open_existing(folder)
    except ArchiveMissing as e:
        hint = {"option": "", "env": f" (from {ARCHIVE_ENV})"}.get(source, f" (set --archive or {ARCHIVE_ENV})")
        fail(f"{e}{hint}")
    except ArchiveError as e:
        fail(str(e))
    except Exception as e:  # a file that is not a SQLite database
        fail(f"cannot open archive {folder}: {e}")
    raise AssertionError


def _extend(run_ids: list[str], archive: Path, rounds: int, budget_wall_s: Optional[float],
            budget_tokens: Optional[int], budget_cost: Optional[float]) -> None:
    """--resume with limits: each run given them (controller/extend.py), said on one line per run."""
    from .extend import describe, extend_run

    given = click.get_current_context().get_parameter_source("rounds") != click.core.ParameterSource.DEFAULT
    limits = {"rounds": rounds if given else None, "budget_wall_s": budget_wall_s, "budget_tokens": budget_tokens,
              "budget_cost_usd": budget_cost}
    if all(v is None for v in limits.values()):
        return
    for run_id in run_ids:
        record = extend_run(archive, run_id, limits)
        err.print(f"{escape(run_id)}: {escape(describe(record)) if record else 'already has these limits'}")


def _preflight_resumed(run_ids: list[str], archive: Path) -> None:
    """The provider check of each resumed run, with its stored settings; an unknown run is left to the loop."""
    from harness.archive.database import Archive

    from .store import Store

    store = Store(Archive.open_existing(archive))
    for run_id in run_ids:
        row = store.run(run_id)
        if row is not None:
            name, options = row["config"].get("provider", row["provider"]), row["config"].get("provider_options")
            preflight(name, options)
            if name == "replay":
                from .providers.replay import ReplayProvider

                ReplayProvider(store, (options or {}).get("run")).check_source(row["definition"], run_id)


def _provider_options(items: tuple[str, ...]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            fail(f"--provider-option {item!r}: expected KEY=VALUE")
        try:
            options[key.strip()] = json.loads(raw)
        except (json.JSONDecodeError, RecursionError):  # not JSON (or nested past reading): the text itself
            options[key.strip()] = raw
    return options


def _print_dry_runs(configs: list[Any], name: str, options: dict[str, Any]) -> None:
    """--dry-run: each definition's first request as it would be sent; nothing sent, nothing evaluated."""
    from .agent.dry_run import dry_run
    from .providers.registry import make_provider
    from .skills import load_skills

    results = []
    for config in configs:
        try:
            preflight(name, options)
            credential = "ok"
        except ProviderError as err:  # said, not fatal: a dry run sends nothing
            credential = str(err)
        provider = make_provider(name, options, skills=load_skills(config.skills), skills_root=config.skills,
                                 store=None, definition=None)
        results.append({**dry_run(config, provider), "preflight": credential})
    click.echo(json.dumps(results[0] if len(results) == 1 else results, indent=2, default=str))


def _gpus_for(jobs: int, dataset: Optional[str], archive: Path) -> int:
    """GPUs to spread several runs over (one run per GPU); 0 when there is a single run, which needs no probe."""
    if jobs < 2:
        return 0
    from harness.archive.database import Archive
    from harness.pipeline.evaluate import SubmitOptions
    from harness.pipeline.parallel import visible_gpu_count

    return visible_gpu_count(Dataset(dataset), Archive(archive), SubmitOptions())


@main.command()
@click.option("--definition", "-d", multiple=True,
              help="Definition name or alias (gqa_decode runs its four definitions); repeatable or comma-separated.")
@click.option("--provider", "-p", type=click.Choice(PROVIDERS),
              help="Default: offline, or anthropic/openai when ANTHROPIC_API_KEY/OPENAI_API_KEY is set.")
@click.option("--model", help="Model for anthropic/openai (or the CLI agents).")
@click.option("--rounds", type=click.IntRange(0), default=3, show_default=True)
@click.option("--candidates", type=click.IntRange(1), default=2, show_default=True, help="Candidates per round.")
@click.option("--repairs", type=click.IntRange(0), default=1, show_default=True, help="Repair rounds per failure.")
@click.option("--archive", "archive_path", type=click.Path(), help=ARCHIVE_HELP)
@click.option("--dataset", type=click.Path(), help="Trace-set folder with definitions and workloads.")
@click.option("--workloads", "-w", multiple=True, help="Workload uuid, label or index (repeatable or comma-separated).")
@click.option("--incumbent", type=click.Path(exists=True, dir_okay=False), help="Start from this solution JSON.")
@click.option("--target", "target_hardware", default="H200", show_default=True)
@click.option("--resume", "resume", metavar="RUN_ID", multiple=True,
              help="Continue a run from the archive (its stored settings); repeatable, side by side on several GPUs. "
                   "'unfinished': every run cut short (INTERRUPTED or still RUNNING), "
                   "e.g. all four of a killed gqa_decode loop. With --rounds or a --budget-* option: the run is "
                   "given those limits (totals from its start) and continues, a finished one too, its last "
                   "round's budget deferrals decided first.")
@click.option("--replay-run", metavar="RUN_ID", help="replay: the run whose responses to replay (default: latest).")
@click.option("--budget-tokens", type=click.IntRange(1), help="Stop after this many tokens (input + output).")
@click.option("--budget-cost", type=FiniteRange(0, min_open=True), help="Stop after this many US dollars.")
@click.option("--budget-wall-s", type=POSITIVE_SECONDS, help="Stop after this much wall time.")
@click.option("--max-output-tokens", type=click.IntRange(1), default=8192, show_default=True)
@click.option("--timeout-s", type=POSITIVE_SECONDS, help="Harness limit per workload.")
@click.option("--profile/--no-profile", "profile", default=None,
              help="ncu evidence for each incumbent. Default: when a GPU and ncu are here, else latency evidence.")
@click.option("--profile-timeout-s", type=POSITIVE_SECONDS, default=600.0, show_default=True,
              help="Profiler limit per workload.")
@click.option("--hint", metavar="TEXT|FILE",
              help="A person's hypothesis put into every request of the run (agent-assisted mode); a file's text if "
                   "it names a file.")
@click.option("--max-turns", type=click.IntRange(1), default=16, show_default=True,
              help="Model calls per request's tool conversation (API providers).")
@click.option("--max-evaluations", type=click.IntRange(0), default=3, show_default=True,
              help="Drafts a model may evaluate through the harness per request.")
@click.option("--provider-option", "provider_option", multiple=True, metavar="KEY=VALUE",
              help="A provider setting (e.g. effort=high, thinking_budget=16000); VALUE is read as JSON when it "
                   "parses, else as text. Repeatable.")
@click.option("--dry-run", is_flag=True,
              help="Print the first request as it would be sent (call parameters or request document, tools, "
                   "limits, skills, size in tokens) and send and evaluate nothing.")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="ray: each run evaluates on a lane of a Ray cluster (one GPU), runs side by side (extra `ray`).")
@click.option("--address", help="--executor ray: the cluster (HOST:PORT or auto); default: a new one on this host.")
@click.option("--json", "as_json", is_flag=True, help="Print the final report(s) as JSON.")
def loop(definition, provider, model, rounds, candidates, repairs, archive_path, dataset, workloads, incumbent,
         target_hardware, resume, replay_run, budget_tokens, budget_cost, budget_wall_s, max_output_tokens,
         timeout_s, profile, profile_timeout_s, hint, max_turns, max_evaluations, provider_option, dry_run,
         executor, address, as_json) -> None:
    """Run the loop: plan -> request -> candidates -> harness -> repair -> promotion, bounded and resumable."""
    ctx = click.get_current_context()
    given = {p.name for p in ctx.command.params
             if ctx.get_parameter_source(p.name) not in (None, click.core.ParameterSource.DEFAULT)}
    conflict = conflicting_options(given, bool(resume), provider, executor,
                                   [item.partition("=")[0].strip() for item in provider_option])
    if conflict:
        fail(conflict)
    archive, source = archive_location(archive_path)
    if source != "default" and not os.path.isdir(archive):  # False, never an error, for a name past the limit
        fail(f"archive folder {archive}{f' (from {ARCHIVE_ENV})' if source == 'env' else ''} "
             + ("is not a folder" if os.path.lexists(archive) else "does not exist (create it first)"))
    on_event = live_printer(as_json)
    reports, resume_ids = [], []
    lanes_for, new_runner, resumer = (lambda jobs: _gpus_for(jobs, dataset, archive)), None, resume_loop
    if executor == "ray" and not dry_run:
        try:
            from .ray_evaluator import ray_lanes, ray_runner
        except ImportError as e:
            fail(f"--executor ray needs Ray: pip install -e '.[ray]' ({e})")
        lanes_for, new_runner = (lambda jobs: ray_lanes(address, jobs)), ray_runner(address)
        resumer = new_runner
    try:
        if resume:
            run_ids = resume_ids = _resume_ids(resume, archive)
            _lock_resumed(run_ids, archive)
            _preflight_resumed(run_ids, archive)  # a missing credential or agent is said before any evaluation
            _extend(run_ids, archive, rounds, budget_wall_s, budget_tokens, budget_cost)
            reports.extend(run_loops(run_ids, archive, lanes_for(len(run_ids)), on_event=on_event, runner=resumer))
        else:
            names = _definitions(definition, dataset)
            name = provider or default_provider(dict(os.environ))
            options: dict[str, Any] = {}
            if model:
                options["model"] = model
            options.update(_provider_options(provider_option))
            if name == "replay" and replay_run:
                options["run"] = replay_run
            if name in ("claude-code", "codex"):  # what the agent's ./crucible-check submits with
                options["check"] = {"archive": str(archive.resolve()), "workloads": _split(workloads),
                                    "dataset": str(Path(dataset).resolve()) if dataset else None,
                                    "timeout_s": timeout_s}
            if not dry_run:
                preflight(name, options)  # a missing credential or agent is said before any evaluation
            configs = [LoopConfig(definition=d, provider=name, provider_options=options, rounds=rounds,
                                  candidates=candidates, repairs=repairs, workloads=_split(workloads),
                                  dataset=str(Path(dataset).resolve()) if dataset else None,
                                  incumbent=str(Path(incumbent).resolve()) if incumbent else None,
                                  target_hardware=target_hardware, timeout_s=timeout_s,
                                  max_output_tokens=max_output_tokens, budget_tokens=budget_tokens,
                                  budget_cost_usd=budget_cost, budget_wall_s=budget_wall_s, profile=profile,
                                  profile_timeout_s=profile_timeout_s, hint=read_hint(hint), max_turns=max_turns,
                                  max_evaluations=max_evaluations) for d in names]
            check_new_runs(configs, archive)  # incumbents, a replay's source: before any run row
            if dry_run:
                _print_dry_runs(configs, name, options)
                return
            reports.extend(run_loops(configs, archive, lanes_for(len(configs)), on_event=on_event,
                                     **({"runner": new_runner} if new_runner else {})))
    except (SchemaError, SkillError, ProviderError, ValueError) as e:
        fail(escape(str(e)))  # a server's message may hold brackets ("[redacted]"): text, not markup
    except Exception as e:  # a full disk under the archive in the controller's own writes: one line, as the harness's
        if storage_message(e, archive) is None:
            raise
        fail(escape(storage_message(e, archive) or ""))
    except KeyboardInterrupt:
        fail("interrupted: the archive holds everything finished; continue with --resume RUN_ID "
             "(or --resume unfinished)", 130)
    finally:
        for run_id in resume_ids:
            runlock.release(archive, run_id)
    if as_json:
        click.echo(json.dumps(reports[0] if len(reports) == 1 else reports, indent=2, default=str))
    else:
        for report in reports:
            print_report(report)
    # A run whose provider produced nothing in any round (no agent, no key, every reply refused) ran but did
    # nothing: exit 1, the reason on one line (exit 2 is for bad input).
    empty = [(f"{r['definition']}: " if len(reports) > 1 else "") + r["nothing_produced"]
             for r in reports if r.get("nothing_produced")]
    if empty:
        fail(escape("; ".join(empty)), 1)


@main.command()
@click.option("--archive", "archive_path", type=click.Path(file_okay=False), help=ARCHIVE_HELP)
@click.option("--definition", "-d", help="Only runs of this definition (or alias).")
@click.option("--dataset", type=click.Path(), help="Trace-set folder that knows --definition if the archive does not.")
@click.option("--json", "as_json", is_flag=True, help="A JSON list, newest first (for scripts).")
def runs(archive_path, definition, dataset, as_json) -> None:
    """List the loop's runs (newest first), to find a RUN_ID to resume or replay."""
    from harness.archive_cli import listed_definitions

    from .store import Store

    archive = _open_existing(archive_path)
    store = Store(archive)
    names = [definition]
    if definition is not None and not (definition and store.runs(definition)):  # '' would mean every run
        names = listed_definitions(archive.db, definition, dataset)  # an unknown name: one line, no empty table
    found = [r for name in names for r in store.runs(name)]
    if len(names) > 1:  # an alias's definitions: newest first across them, as one definition's are
        found.sort(key=lambda r: (str(r["created_at"] or ""), str(r["id"])), reverse=True)
    rows = [{"run_id": r["id"], "definition": r["definition"], "provider": r["provider"], "status": r["status"],
             "rounds_done": sum(1 for x in store.rounds(r["id"]) if x["status"] == RunStatus.DONE and x["round"] > 0),
             "wall_s": round(store.spend(r["id"])["wall_s"] or 0.0, 1), "stop_reason": r["stop_reason"] or "",
             "created_at": r["created_at"]} for r in found]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table(title="runs")
    for column in ("run", "definition", "provider", "status", "rounds done", "wall s", "stop reason", "created"):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(escape(r["run_id"]), escape(r["definition"]), escape(r["provider"]), r["status"],
                      str(r["rounds_done"]), f"{r['wall_s']:.0f}", escape(r["stop_reason"] or ""), r["created_at"][:19])
    out.print(table)


@main.command()
@click.argument("run_id", required=False)
@click.option("--archive", "archive_path", type=click.Path(file_okay=False), help=ARCHIVE_HELP)
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Write trajectory.{json,md,png} here (with --all: trajectory-<definition>-<run>.*).")
@click.option("--all", "all_runs", is_flag=True, help="Every run in the archive, not only the newest.")
def trajectory(run_id, archive_path, out_dir, all_runs) -> None:
    """Where a run's incumbent stood after each round (default: the newest run): mean latency, speedup vs
    FlashInfer, % of the roofline floor, overall and per regime."""
    from .store import Store
    from .trajectory import plot_trajectory, trajectory_markdown

    if run_id is not None and all_runs:  # one run, or every run: either choice would leave the other unused
        fail("give RUN_ID or --all, not both (--all shows every run; RUN_ID only that one)")
    store = Store(_open_existing(archive_path))
    runs_found = store.runs()
    if run_id is not None:
        if store.run(run_id) is None:
            fail(f"no run {run_id!r} in the archive; `controller runs` lists them")
        chosen = [run_id]
    elif not runs_found:
        fail("the archive holds no controller runs")
    else:
        chosen = [r["id"] for r in runs_found] if all_runs else [runs_found[0]["id"]]
    for rid in chosen:
        row = store.run(rid)
        data = {"run_id": rid, "definition": row["definition"], "provider": row["provider"], "status": row["status"],
                "stop_reason": row["stop_reason"],
                # finished rounds, and what a round cut short had measured (its progress summary)
                "rounds": [r["summary"] for r in store.rounds(rid) if r["status"] == RunStatus.DONE or r["summary"]]}
        text = trajectory_markdown(data)
        click.echo(text)
        if out_dir:
            folder = Path(out_dir)
            stem = f"trajectory-{row['definition']}-{rid}" if len(chosen) > 1 else "trajectory"
            try:
                folder.mkdir(parents=True, exist_ok=True)
                (folder / f"{stem}.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
                (folder / f"{stem}.md").write_text(text)
                plotted = plot_trajectory(data, str(folder / f"{stem}.png"))
            except OSError as e:
                fail(f"cannot write the trajectory to {folder}: "
                     + (NOT_A_FOLDER if isinstance(e, FileExistsError) else str(e.strerror or e)))
            click.echo(f"wrote {folder}/{stem}.json, {stem}.md" + (f", {stem}.png" if plotted else
                                                                  " (no plot: matplotlib missing)"))


main.add_command(profile)  # also `harness profile` (entry point "harness.commands")


if __name__ == "__main__":
    main()
