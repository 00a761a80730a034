"""`harness report`: assisted (a person's --hint) and full-agent runs of a definition side by side, round by round."""

from __future__ import annotations

from controller.store import Store
from harness.archive.database import Archive
from harness.review.rounds import _rounds_from, rounds_from_archive, run_mode
from harness.review.tables import _runs_side_by_side

DEF = "gqa_paged_decode_h32_kv8_d128_ps1"


def _run(store: Store, run_id: str, provider: str, hint: str, standings: list[tuple[float, float]]) -> None:
    store.create_run(run_id, DEF, provider, {"definition": DEF, "provider": provider, "hint": hint})
    for n, (speedup, latency) in enumerate(standings):
        store.start_round(run_id, n, "baseline" if n == 0 else "explore", {})
        store.finish_round(run_id, n, {"incumbent": {"name": f"inc{n}", "latency_ms": latency,
                                                     "speedup_vs_fi": speedup}}, 1.0)


def test_assisted_and_full_agent_runs_are_compared_round_by_round(tmp_path):
    archive = Archive(tmp_path / "a")
    store = Store(archive)
    _run(store, "run-assisted", "anthropic", "tokens on M, the group on N", [(0.8, 0.02), (1.1, 0.015), (1.3, 0.012)])
    _run(store, "run-full", "anthropic", "", [(0.8, 0.02), (0.9, 0.018)])
    rows = rounds_from_archive(archive.db)
    modes = {(r["run"], r["mode"], r["provider"]) for r in rows}
    assert modes == {("run-assisted", "assisted", "anthropic"), ("run-full", "full agent", "anthropic")}
    runs = _rounds_from(rows, None)[DEF]
    html = _runs_side_by_side(runs)
    assert "run-assisted (assisted, anthropic)" in html and "run-full (full agent, anthropic)" in html
    # round 2: the assisted run's incumbent at 1.3x, the full-agent run has no round 2
    row2 = html.split("<tr>")[-1]
    assert "1.3x" in row2 and "–" in row2


def test_run_mode_reads_the_stored_hint():
    assert run_mode('{"hint": "try split-KV"}') == "assisted"
    assert run_mode('{"hint": "  "}') == run_mode("{}") == run_mode(None) == run_mode("not json") == "full agent"
