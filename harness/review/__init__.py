"""The archive as a report a person reads: data gathering, charts (inline SVG) and HTML.

Three layers, each usable alone:

- data: ``gather_report`` (gather) reads the archive into the plain dataclasses of ``model`` (leaderboards per
  definition: the promotable solutions ranked by score, the others apart with their reasons, decided by
  ``leaderboard``; per-workload results from ``candidates``, roofline points from ``costs``, controller rounds from
  ``rounds``); ``diff_submissions`` (diff) compares two solutions (sources and per-workload latency).
- charts: a ``Chart`` spec (charts) rendered to SVG by matplotlib (svg backend) when it is importable, or by a
  small built-in renderer (svg) otherwise (render chooses); both give the same charts with labelled axes and units.
- HTML: ``write_report`` (pages) writes ``index.html`` plus one page per candidate and the linked files into a
  folder, from the cells of ``html``, the tables of ``tables`` and the stylesheet and page in ``templates/``.
"""

from .candidates import controller_transcript, format_profiles, load_candidate, rank_key
from .charts import PALETTE, Chart, Series, latency_chart, roofline_charts, trajectory_charts
from .costs import build_roofline, dataset_costs, load_ceilings
from .diff import FileDiff, SubmissionDiff, WorkloadDelta, diff_submissions, resolve_submission, source_diff
from .gather import gather_report
from .html import fmt_ms, fmt_pct, fmt_x
from .model import (ARTIFACT_KINDS, ARTIFACT_TITLES, SCORE_KEYS, Artifact, BaselineRow, Candidate,
                    DefinitionSection, ReportData, Roofline, RooflinePoint, Round, WorkloadRow, baseline_rows)
from .pages import render_index, write_report
from .render import chart_backend, render_chart, render_matplotlib
from .rounds import load_rounds_file, rounds_from_archive
from .svg import render_builtin

__all__ = [
    "ARTIFACT_KINDS", "ARTIFACT_TITLES", "PALETTE", "SCORE_KEYS", "Artifact", "BaselineRow", "Candidate",
    "Chart", "DefinitionSection", "FileDiff", "ReportData", "Roofline", "RooflinePoint", "Round", "Series",
    "SubmissionDiff", "WorkloadDelta", "WorkloadRow", "baseline_rows", "build_roofline", "chart_backend",
    "controller_transcript", "dataset_costs", "diff_submissions", "fmt_ms", "fmt_pct", "fmt_x", "format_profiles",
    "gather_report", "latency_chart", "load_candidate", "load_ceilings", "load_rounds_file",
    "rank_key", "render_builtin", "render_chart", "render_index", "render_matplotlib", "resolve_submission",
    "rounds_from_archive", "roofline_charts", "source_diff", "trajectory_charts", "write_report",
]
