"""The report folder: ``index.html`` (a section per definition), one page per candidate, and the linked files
(sources, build logs, SASS summaries, profile digests, transcripts, workload logs). Everything is local (no
scripts, fonts or styles from the network), so the folder can be opened from disk or attached to a review."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path
from typing import Any, Optional, Union

from ..archive.seal import MODIFIED_WARNING
from . import leaderboard as lb
from .charts import latency_chart, roofline_charts, trajectory_charts
from .gather import gather_report
from .html import (_audit_cell, _esc, _figure, _links, _page, _partial_notice, _promotable_mark, _score, _seal_warning,
                   _slug, _status, _td, _th, fmt_pct)
from .model import ARTIFACT_KINDS, ARTIFACT_TITLES, Candidate, DefinitionSection, ReportData
from .render import chart_backend
from .tables import (SCORE_TIP, _leaderboard_table, _not_promotable_table, _rounds_table, _runs_side_by_side,
                     _workload_table)


class _Writer:
    """Writes linked files under the output folder and returns their relative hrefs."""

    def __init__(self, archive: Any, out: Path):
        self.archive, self.out = archive, out

    def blob_text(self, blob: str) -> Optional[str]:
        try:
            return self.archive.get_blob(blob).decode("utf-8", errors="replace")
        except OSError:
            return None

    def write(self, rel: str, text: str) -> str:
        write_in(self.out, rel, text)
        return rel


def _file_slug(text: str) -> str:
    """A file name for ``text`` (a source's path, a workload's label): itself where it is one already, else its slug
    with a digest of the original, so two paths never share a page (``pkg/kernel.py`` and a decoy ``pkg_kernel.py``
    both slugged to ``pkg_kernel.py``: the later one's text was shown for both) and none passes a name's length."""
    slug = _slug(text)
    if slug == text and len(slug) <= 100:
        return slug
    return f"{slug[:100]}-{hashlib.sha256(text.encode(errors='surrogatepass')).hexdigest()[:10]}"


def _no_link(folder: Path) -> None:
    if folder.is_symlink():
        raise OSError(errno.ELOOP, f"its {folder.name}/ is a link (the report writes through no link)", str(folder))


def write_in(out: Path, rel: str, text: str) -> None:
    """``out/rel`` written as a new file renamed into place: a link found there is replaced, never written through,
    and a folder on the way that is a link is refused (OSError), so nothing outside ``out`` is ever written."""
    path, folder = out / rel, out
    for part in Path(rel).parts[:-1]:
        folder = folder / part
        _no_link(folder)
        folder.mkdir(exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    try:
        # a name that is no UTF-8 (an archive folder's undecodable bytes) is shown as its escapes, not a crash
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _section_html(s: DefinitionSection, backend: str) -> str:
    anchor = _slug(s.name)
    out = [f'<section class="definition" id="{anchor}"><h2>{_esc(s.name)}</h2>']
    n_sol = len(s.leaderboard)
    out.append(f'<p class="meta"><span>{n_sol} solution{"s" if n_sol != 1 else ""}</span>'
               f'<span>{len(s.submissions)} submission{"s" if len(s.submissions) != 1 else ""}</span>'
               f'<span>{len(s.workloads)} workloads</span></p>')
    for n in s.notices:
        out.append(f'<div class="notice">{_esc(n)}</div>')
    out.append("<h3>Leaderboard</h3>")
    if s.promotable:
        out.append(_leaderboard_table(s))
    else:
        out.append('<p class="empty">no promotable solution</p>')
    out.append('<p class="legend-note">Speedup = baseline latency / candidate latency (above 1× is faster). '
               f"Scores are the {SCORE_TIP}. Each solution's latest finished submission counts; only promotable "
               "ones (every workload PASSED, no failed audit, no static-gate error, rows as the harness sealed "
               "them) are ranked, by score. The others are listed below, unranked, whatever they scored.</p>")
    out.append(_partial_notice(s.leaderboard))
    if s.not_promotable:
        out.append(f'<h3 id="{anchor}-not-promotable">Not promotable <span class="muted">'
                   f"({len(s.not_promotable)})</span></h3>")
        out.append(_not_promotable_table(s))
    best = s.best
    if best is not None:
        out.append(f'<h3>Per workload: <a href="{best.page}">{_esc(best.solution_name)}</a> '
                   f'<span class="muted">(submission {best.submission_id}, rank 1 of the promotable)</span></h3>')
        out.append(_workload_table(best))
        charts = []
        lat = latency_chart(best)
        if lat is not None:
            charts.append(_figure(lat, backend, "Bars per workload, log scale. The floor is the least time the "
                                                "GPU's measured bandwidth and bf16 rate allow; FlashInfer official "
                                                "times plan() inside the call, as the contest does."))
        if s.roofline is not None:
            r = s.roofline
            cap = _esc(f"{r.ceilings_note}; {r.cost_note or 'workload costs unknown'}. "
                       "Candidate timed as the kernel (setup outside); FlashInfer with plan() in setup.")
            for ch in roofline_charts(r, best.solution_name):
                charts.append(_figure(ch, backend, cap))
        if charts:
            out.append('<div class="charts">' + "".join(charts) + "</div>")
        else:
            out.append('<p class="empty">no timed workloads to plot</p>')
    out.append("<h3>Controller trajectory</h3>")
    if not s.runs:
        out.append('<p class="empty">no controller runs</p>')
    if len(s.runs) > 1:
        out.append("<h4>Runs side by side</h4><p class=\"muted\">the incumbent after each round (speedup against "
                   "FlashInfer where timed, else mean latency) and the spend so far; assisted runs carried a "
                   "person's hint</p>")
        out.append(_runs_side_by_side(s.runs))
    for run, rounds in s.runs.items():
        total = rounds[-1].cumulative_spend_usd if rounds else None
        spent = f", ${total:.2f} spent" if total is not None else ""
        out.append(f'<h4>{_esc(run)} <span class="muted">({len(rounds)} rounds{spent})</span></h4>')
        charts = [_figure(ch, backend) for ch in trajectory_charts(run, rounds)]
        if charts:
            out.append('<div class="charts">' + "".join(charts) + "</div>")
        out.append(_rounds_table(rounds))
    if len(s.submissions) > 1:
        rows = "".join(
            "<tr>" + _td(f'<a href="{c.page}">{c.submission_id}</a>', True) + _td(_esc(c.solution_name))
            + _td(_status(c.status)) + _td(f"{c.passed}/{len(c.evaluated)}", True)
            + _td(_score(c, "vs_reference", not c.promotable), True)
            + _td(_score(c, "vs_flashinfer_official", not c.promotable), True)
            + _td(_promotable_mark(c)) + _td(_esc(c.created_at[:19].replace("T", " "))) + _td(_esc(c.hardware))
            + "</tr>" for c in s.submissions)
        head = "".join(_th(n, "", num) for n, num in (("submission", True), ("solution", False), ("status", False),
                                                        ("workloads", True), ("score", True), ("vs FI official", True),
                                                        ("promotable", False), ("created (UTC)", False),
                                                        ("hardware", False)))
        out.append(f"<details><summary>All {len(s.submissions)} submissions</summary>"
                   f'<table class="submissions"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></details>')
    out.append("</section>")
    return "\n".join(out)


INLINE_LIMIT = 200_000  # characters of an artifact shown inline on its candidate's page (the rest: the link)


def _candidate_page(c: Candidate, w: _Writer, backend: str) -> str:
    base = f"files/sub-{c.submission_id}"
    log_hrefs: dict[int, str] = {}
    for wl in c.workloads:
        if wl.log_blob:
            text = w.blob_text(wl.log_blob)
            if text is not None:
                name = f"{base}/logs/{wl.evaluation_id}-{_file_slug(wl.label)}.txt"
                log_hrefs[wl.evaluation_id] = "../" + w.write(name, text)
    src_links = []
    for s in c.sources:
        href = w.write(f"{base}/source/{_file_slug(s['path'])}.txt", s["content"])
        src_links.append(f'<a href="../{href}">{_esc(s["path"])}</a>')
    body = [f'<header class="top"><h1>{_esc(c.solution_name)} <span class="muted">submission {c.submission_id}</span>'
            f'</h1><p class="meta"><a href="../index.html#{_slug(c.definition)}">← {_esc(c.definition)}</a></p>'
            '</header>'
            "<main>"]
    body.append('<dl class="kv">' + "".join(
        f"<dt>{_esc(k)}</dt><dd>{v}</dd>" for k, v in [
            ("status", _status(c.status) + _seal_warning(c)), ("author", _esc(c.author)),
            ("language", _esc(c.language)),
            ("solution hash", f"<code>{_esc(c.solution_hash)}</code>"), ("hardware", _esc(c.hardware or "–")),
            ("created", _esc(c.created_at)), ("finished", _esc(c.finished_at or "(not finished)")),
            ("score vs reference", _score(c, "vs_reference", not c.promotable)),
            ("score vs FlashInfer official", _score(c, "vs_flashinfer_official", not c.promotable)),
            ("score vs FlashInfer kernel", _score(c, "vs_flashinfer_kernel", not c.promotable)),
            ("mean % of floor", fmt_pct(c.mean_fraction_of_floor)),
            ("promotable", _promotable_mark(c) if c.promotable else
             '<span class="bad">no</span><ul class="reasons">'
             + "".join(f"<li>{_esc(r)}</li>" for r in c.blockers) + "</ul>"),
            ("audits", _audit_cell(c.audit_summary, c.static_findings)),
            ("files", _links(c, "../").replace(f'../{c.page}#source', "#source")),
        ]) + "</dl>")
    if c.modified:
        body.append(f'<div class="notice tampered">{_esc(MODIFIED_WARNING)}: {_esc(c.seal_detail)}</div>')
    if not c.promotable:
        n = len(c.blockers)
        body.append(f'<div class="notice tampered">Not promotable ({n} reason{"s" * (n != 1)} above): ranked nowhere, '
                    "whatever it scored; the figures below are its own.</div>")
    partial = _partial_notice([c])
    if partial:
        body.append(partial)
    if c.message:
        body.append(f'<div class="notice">{_esc(c.message)}</div>')
    body.append("<h3>Workloads</h3>")
    body.append(_workload_table(c, log_hrefs))
    lat = latency_chart(c)
    if lat is not None:
        body.append('<div class="charts">' + _figure(lat, backend) + "</div>")
    audits = [("submission", a) for a in c.submission_audits] + [(wl.label, a) for wl in c.workloads for a in wl.audits]
    if c.static_findings:
        rows = "".join(f"<tr><td>{_esc(f.get('severity', '?'))}</td><td>{_esc(f.get('rule', '?'))}</td>"
                       f"<td>{_esc(f.get('path', '?'))}:{_esc(f.get('line', '?'))}</td>"
                       f'<td class="detail">{_esc(f.get("message", ""))}</td></tr>' for f in c.static_findings)
        errors = len(lb.static_errors(c.static_findings))
        body.append(f"<details{' open' if errors else ''}><summary>Static gate ({errors} error"
                    f"{'s' * (errors != 1)}, {len(c.static_findings) - errors} other)</summary><table><thead><tr>"
                    "<th>severity</th><th>rule</th><th>where</th><th>finding</th></tr></thead>"
                    f"<tbody>{rows}</tbody></table></details>")
    if audits:
        rows = "".join(f"<tr><td>{_esc(l)}</td><td>{_esc(a.get('name', '?'))}</td>"
                       f"<td>{'<span class=good>passed</span>' if a.get('passed') else '<span class=bad>FAILED</span>'}"
                       f'</td><td class="detail">{_esc(a.get("detail", ""))}</td></tr>' for l, a in audits)
        body.append(f"<details><summary>Audits ({len(audits)})</summary><table><thead><tr><th>workload</th><th>audit"
                    f"</th><th>result</th><th>detail</th></tr></thead><tbody>{rows}</tbody></table></details>")
    body.append(f'<h3 id="source">Source</h3><p class="links">{"".join(src_links) or "(none recorded)"}</p>')
    for s in c.sources:
        body.append(f"<details open><summary>{_esc(s['path'])}</summary><pre><code>{_esc(s['content'])}</code></pre>"
                    "</details>")
    for kind in ARTIFACT_KINDS:
        a = c.artifacts.get(kind)
        if a is not None and a.href:
            name = ARTIFACT_TITLES[kind]
            body.append(f'<h3 id="{kind}">{_esc(name[0].upper() + name[1:])}</h3>'
                        f'<p><a href="../{a.href}">{_esc(a.title)}</a></p>')
            if a.text is not None and len(a.text) <= INLINE_LIMIT:
                body.append(f"<details><summary>show</summary><pre>{_esc(a.text)}</pre></details>")
    body.append("</main>")
    return _page(f"{c.solution_name} #{c.submission_id}", "".join(body))


def render_index(data: ReportData, backend: str = "auto") -> str:
    parts = ['<header class="top"><h1>Crucible report</h1><p class="meta">'
             f"<span>archive: <code>{_esc(data.archive)}</code></span>"
             f"<span>generated {_esc(data.generated_at)}</span>"
             f"<span>hardware: {_esc(', '.join(data.hardware) or '–')}</span>"
             f"<span>plots: {chart_backend(backend)}</span></p>"]
    if data.sections:
        parts.append('<nav class="toc">' + "".join(f'<a href="#{_slug(s.name)}">{_esc(s.name)}</a>'
                                                   for s in data.sections) + "</nav>")
    parts.append("</header><main>")
    for n in data.notices:
        parts.append(f'<div class="notice">{_esc(n)}</div>')
    if not data.sections:
        parts.append('<p class="empty">the archive holds no submissions</p>')
    for s in data.sections:
        parts.append(_section_html(s, backend))
    parts.append("</main>")
    return _page("Crucible report", "\n".join(parts))


# A report folder says it is one: this file, and the generator tag in every page's head (templates/page.html). A
# later report replaces only such a folder's own files; a folder holding anything else is not written into
# (``harness report`` refuses it unless --force), so a person's own index.html is never overwritten.
MARKER = ".crucible-report"
GENERATOR_TAG = '<meta name="generator" content="crucible harness report">'
_LEGACY_TITLE = "<title>Crucible report</title>"  # reports written before the marker and the tag


def folder_verdict(entries: list[str], marker: bool, index_head: Optional[str]) -> str:
    """What the report's output folder holds: "empty" (or missing), "report" (an earlier report, by its marker
    file or its index.html's generator tag or title) or "foreign" (anything else). ``entries``: the folder's
    names (None-safe: [] for a missing folder); ``index_head``: the start of its index.html, if any."""
    if not entries:
        return "empty"
    ours = index_head is not None and (GENERATOR_TAG in index_head or _LEGACY_TITLE in index_head)
    if index_head is not None and not ours:  # an index.html that is no report page is a person's, marker or not
        return "foreign"
    return "report" if marker or ours else "foreign"


def out_folder_refusal(out: Union[str, Path]) -> Optional[str]:
    """Why the report must not be written into ``out`` (a folder holding files of someone else's), else None."""
    out = Path(out)
    if not out.is_dir():
        return None
    try:
        entries = sorted(p.name for p in out.iterdir())
        index, head = out / "index.html", None
        if index.is_symlink() or (index.exists() and not index.is_file()):
            head = ""  # a link (to anyone's file) or a folder: not a page of a report
        elif index.is_file():
            with open(index, "rb") as f:
                head = f.read(4096).decode("utf-8", errors="replace")
    except OSError as e:
        return f"cannot read the report folder {out}: {e.strerror or e}"
    marker = (out / MARKER).is_file() and not (out / MARKER).is_symlink()  # a planted link marks nothing
    if folder_verdict(entries, marker, head) != "foreign":
        return None
    shown = ", ".join(entries[:3]) + (f" and {len(entries) - 3} more" if len(entries) > 3 else "")
    return (f"{out} holds files that are not an earlier report ({shown}): name an empty or new folder, or give "
            "--force to write the report over them")


def write_report(archive: Any, out: Union[str, Path], data: Optional[ReportData] = None, backend: str = "auto",
                 **gather: Any) -> Path:
    """Write the report folder (index.html, candidates/, files/, the marker); returns the index path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for folder in ("candidates", "files"):  # before anything is written
        _no_link(out / folder)
    write_in(out, MARKER, "written by `harness report`: a later report replaces index.html, candidates/ and files/ "
                          "here\n")
    data = data or gather_report(archive, **gather)
    w = _Writer(archive, out)
    pages: dict[int, Candidate] = {}
    for s in data.sections:
        for c in s.submissions:
            for kind, a in c.artifacts.items():
                text = a.text if a.text is not None else (w.blob_text(a.blob) if a.blob else None)
                if text is not None:
                    a.text = text
                    a.href = w.write(f"files/sub-{c.submission_id}/{kind}.txt", text)
            pages[c.submission_id] = c
    index = out / "index.html"
    write_in(out, index.name, render_index(data, backend))
    for c in pages.values():
        w.write(c.page, _candidate_page(c, w, backend))
    return index
