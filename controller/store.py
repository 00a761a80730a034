"""The controller's side of the archive: runs, rounds, requests, responses, candidates, decisions.

Tables come from harness/archive/database.py's migration m003_controller; rows are inserted as work happens and
only status columns change afterwards, so a controller killed at any point leaves a database the next
`controller loop --resume` can continue from. Evaluations themselves are the harness's rows: the store
only reads them. The SQL is harness/archive/controller_tables.py's (only the archive speaks SQL): the store decides
what a row holds and where a transaction begins and ends.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Optional

from harness.archive import controller_tables as tables
from harness.archive.database import Archive
from harness.data.generation_request import GenerationRequest, GenerationResponse, Proposal, Rejection
from harness.data.schema import Solution
from harness.data.statuses import RunStatus

from .promote import EvalRecord, ranked_latency

# Candidate statuses of the controller's own (harness statuses are the final ones).
PENDING, EVALUATING, REJECTED, DUPLICATE = "PENDING", "EVALUATING", "REJECTED", "DUPLICATE"
NOT_EVALUATED = "NOT_EVALUATED"  # the run's wall budget ran out in its round before its evaluation
UNFINISHED = (PENDING, EVALUATING)


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def _loads(text: Optional[str], default: Any) -> Any:
    return json.loads(text) if text else default


class Store:
    def __init__(self, archive: Archive):
        self.archive = archive
        self.db = archive.db

    # -- runs ------------------------------------------------------------------------------------------

    def create_run(self, run_id: str, definition: str, provider: str, config: dict[str, Any]) -> None:
        with self.db.atomic():
            tables.insert_run(self.db, {"id": run_id, "definition": definition, "provider": provider,
                                        "config": json.dumps(config, sort_keys=True), "status": RunStatus.RUNNING,
                                        "stop_reason": None, "created_at": now(), "finished_at": None})

    def run(self, run_id: str) -> Optional[dict[str, Any]]:
        row = tables.run_row(self.db, run_id)
        if row is None:
            return None
        row["config"] = _loads(row["config"], {})
        return row

    def runs(self, definition: Optional[str] = None) -> list[dict[str, Any]]:
        return tables.run_rows(self.db, definition)

    def unfinished_runs(self) -> list[str]:
        """Runs cut short, oldest first: INTERRUPTED (stopped by a signal or Ctrl-C) or still RUNNING (a kill -9
        leaves no chance to write anything else). What ``controller loop --resume unfinished`` continues; a FAILED
        run is left for a person to look at and resume by id."""
        return tables.unfinished_run_ids(self.db)

    def set_run_config(self, run_id: str, config: dict[str, Any]) -> None:
        with self.db.atomic():
            tables.update_run(self.db, run_id, {"config": json.dumps(config, sort_keys=True)})

    def set_run_status(self, run_id: str, status: str, stop_reason: Optional[str] = None) -> None:
        with self.db.atomic():
            tables.update_run(self.db, run_id, {"status": status, "stop_reason": stop_reason,
                                                "finished_at": now() if status != RunStatus.RUNNING else None})

    # -- rounds ----------------------------------------------------------------------------------------

    def round(self, run_id: str, number: int) -> Optional[dict[str, Any]]:
        return tables.round_row(self.db, run_id, number)

    def rounds(self, run_id: str) -> list[dict[str, Any]]:
        rows = tables.round_rows(self.db, run_id)
        for r in rows:
            r["summary"] = _loads(r["summary"], {})
            r["plan"] = _loads(r["plan"], {})
        return rows

    def start_round(self, run_id: str, number: int, kind: str, plan: dict[str, Any]) -> None:
        if self.round(run_id, number) is None:
            with self.db.atomic():
                tables.insert_round(self.db, {"run_id": run_id, "round": number, "kind": kind,
                                              "plan": json.dumps(plan, sort_keys=True), "status": RunStatus.RUNNING,
                                              "summary": None, "wall_s": None, "created_at": now(),
                                              "finished_at": None})

    def note_round_progress(self, run_id: str, number: int, summary: dict[str, Any]) -> None:
        """A round still running: its summary so far (the round stays RUNNING and its wall is not counted yet), so a
        run cut short still shows what the round measured (``controller trajectory``)."""
        row = self.round(run_id, number)
        if row is not None and row["status"] != RunStatus.DONE:
            with self.db.atomic():
                tables.update_round(self.db, row["id"], {"summary": json.dumps(summary, default=str)})

    def finish_round(self, run_id: str, number: int, summary: dict[str, Any], wall_s: float) -> dict[str, Any]:
        """A round reopened after it finished (controller/extend.py) adds its new wall to the one it had, in the
        budget's count and in the summary the trajectory shows (run 18: a reopened round showed its last sitting
        alone, 128 of 237 s, and the rounds did not add up to the run's wall). Returns the summary as stored."""
        row = self.round(run_id, number)
        total = wall_s + (row["wall_s"] or 0.0)
        if "wall_s" in summary:
            summary = {**summary, "wall_s": round(total, 3)}
        with self.db.atomic():
            tables.update_round(self.db, row["id"], {"status": RunStatus.DONE,
                                                     "summary": json.dumps(summary, default=str),
                                                     "wall_s": total, "finished_at": now()})
        return summary

    def reopen_round(self, run_id: str, number: int) -> None:
        """A finished round to be played on (its wall so far kept): see controller/extend.py."""
        row = self.round(run_id, number)
        with self.db.atomic():
            tables.update_round(self.db, row["id"], {"status": RunStatus.RUNNING, "finished_at": None})

    # -- requests and responses --------------------------------------------------------------------------

    def request(self, run_id: str, key: str) -> Optional[tuple[int, GenerationRequest]]:
        row = tables.request_row(self.db, run_id, key)
        if row is None:
            return None
        return row["id"], GenerationRequest.model_validate_json(row["request"])

    def add_request(self, request: GenerationRequest) -> int:
        with self.db.atomic():
            return tables.insert_request(self.db, {
                "run_id": request.run_id, "round": request.round, "key": request.key, "kind": request.kind,
                "hash": request.content_hash, "request": request.to_json(), "created_at": now()})

    def response(self, request_id: int) -> Optional[dict[str, Any]]:
        return tables.response_row(self.db, request_id)

    def add_response(self, request: GenerationRequest, request_id: int, response: GenerationResponse,
                     depth: int, parent_id: Optional[int], known_hashes: dict[str, int]) -> int:
        """The response and its candidates, in one transaction (a kill leaves both or neither)."""
        raw_blob = self.archive.put_blob(response.raw_text or "", "transcript")
        with self.db.atomic():
            response_id = tables.insert_response(self.db, {
                "request_id": request_id, "provider": response.provider, "model": response.model,
                "raw_blob": raw_blob, "reply": json.dumps(response.reply_json()), "tokens_in": response.tokens_in,
                "tokens_out": response.tokens_out, "cost_usd": response.cost_usd, "wall_s": response.wall_s,
                "stopped": response.stopped, "error": response.error, "created_at": now()})
            seq = 0
            for proposal in response.proposals:
                solution = Solution.model_validate(proposal.solution)
                h = solution.content_hash
                status, reason = PENDING, ""
                if h in known_hashes:
                    status, reason = DUPLICATE, f"same code as candidate {known_hashes[h]}"
                cid = self._add_candidate(request, request_id, seq, depth, parent_id, proposal, status, reason)
                known_hashes.setdefault(h, cid)
                seq += 1
            for rejection in response.rejected:
                self._add_rejection(request, request_id, seq, depth, parent_id, rejection)
                seq += 1
        return response_id

    def responses_of_run(self, run_id: str) -> list[dict[str, Any]]:
        return tables.response_rows_of_run(self.db, run_id)

    # -- tool conversations (controller/agent/tool_loop.py: the Journal of an API model's turns) ---------------------

    def agent_turns(self, run_id: str, request_key: str) -> list[dict[str, Any]]:
        """The archived turns of one request's conversation, in order, as their JSON payloads."""
        return [json.loads(p) for p in tables.agent_turn_payloads(self.db, run_id, request_key)]

    def add_agent_turn(self, run_id: str, request_key: str, turn: int, payload: dict[str, Any]) -> None:
        tables.insert_agent_turn(self.db, {"run_id": run_id, "request_key": request_key, "turn": turn,
                                           "payload": json.dumps(payload), "created_at": now()})

    def agent_conversations(self, run_id: str) -> list[str]:
        """The request keys of a run that had a tool conversation, in the order they began."""
        return tables.agent_conversation_keys(self.db, run_id)

    def response_count(self, run_id: str) -> int:
        return tables.response_count(self.db, run_id)

    def raw_text(self, response_row: dict[str, Any]) -> str:
        return self.archive.get_blob(response_row["raw_blob"]).decode() if response_row.get("raw_blob") else ""

    def spend(self, run_id: str) -> dict[str, float]:
        row = tables.response_totals(self.db, run_id)
        wall = tables.round_wall_total(self.db, run_id)
        return {"tokens_in": row[0], "tokens_out": row[1], "tokens": row[0] + row[1], "cost_usd": row[2],
                "wall_s": wall}

    # -- candidates ----------------------------------------------------------------------------------

    def _add_candidate(self, request: Optional[GenerationRequest], request_id: Optional[int], seq: int, depth: int,
                       parent_id: Optional[int], proposal: Proposal, status: str, reason: str,
                       run_id: Optional[str] = None, round_number: Optional[int] = None) -> int:
        solution = Solution.model_validate(proposal.solution)
        blob = self.archive.put_blob(json.dumps(proposal.solution, indent=2), "solution")
        return tables.insert_candidate(self.db, {
            "run_id": run_id or request.run_id, "round": request.round if request else round_number,
            "request_id": request_id, "seq": seq, "depth": depth, "parent_id": parent_id,
            "solution_hash": solution.content_hash, "solution_name": solution.name, "solution_blob": blob,
            "origin": json.dumps({**proposal.origin, **({"notes": proposal.notes} if proposal.notes else {})},
                                 sort_keys=True),
            "status": status, "reason": reason, "submission_id": None, "created_at": now(),
            "finished_at": now() if status not in UNFINISHED else None})

    def _add_rejection(self, request: GenerationRequest, request_id: int, seq: int, depth: int,
                       parent_id: Optional[int], rejection: Rejection) -> int:
        return tables.insert_candidate(self.db, {
            "run_id": request.run_id, "round": request.round, "request_id": request_id, "seq": seq, "depth": depth,
            "parent_id": parent_id, "solution_hash": None, "solution_name": rejection.name, "solution_blob": None,
            "origin": json.dumps({"files": rejection.files}), "status": REJECTED, "reason": rejection.reason,
            "submission_id": None, "created_at": now(), "finished_at": now()})

    def add_incumbent(self, run_id: str, proposal: Proposal) -> int:
        with self.db.atomic():
            return self._add_candidate(None, None, 0, 0, None, proposal, PENDING, "starting incumbent",
                                       run_id=run_id, round_number=0)

    def candidates(self, run_id: str, round_number: Optional[int] = None) -> list[dict[str, Any]]:
        rows = tables.candidate_rows(self.db, run_id, round_number)
        for r in rows:
            r["origin"] = _loads(r["origin"], {})
        return rows

    def candidate(self, candidate_id: int) -> dict[str, Any]:
        row = tables.candidate_row(self.db, candidate_id)
        row["origin"] = _loads(row["origin"], {})
        return row

    def reopen_candidate(self, candidate_id: int) -> None:
        """A candidate the wall budget left unevaluated waits again (controller/extend.py)."""
        with self.db.atomic():
            tables.update_candidate(self.db, candidate_id, {"status": PENDING, "reason": "", "finished_at": None})

    def set_candidate(self, candidate_id: int, status: str, submission_id: Optional[int] = None,
                      reason: Optional[str] = None) -> None:
        update: dict[str, Any] = {"status": status}
        if submission_id is not None:
            update["submission_id"] = submission_id
        if reason is not None:
            update["reason"] = reason
        if status not in UNFINISHED:
            update["finished_at"] = now()
        with self.db.atomic():
            tables.update_candidate(self.db, candidate_id, update)

    def solution(self, candidate: dict[str, Any]) -> Solution:
        return Solution.model_validate_json(self.archive.get_blob(candidate["solution_blob"]))

    # -- decisions ----------------------------------------------------------------------------------

    def decision(self, run_id: str, candidate_id: int) -> Optional[dict[str, Any]]:
        row = tables.decision_row(self.db, run_id, candidate_id)
        return self._decision_row(row) if row is not None else None

    def decisions(self, run_id: str) -> list[dict[str, Any]]:
        return [self._decision_row(r) for r in tables.decision_rows(self.db, run_id)]

    @staticmethod
    def _decision_row(row: dict[str, Any]) -> dict[str, Any]:
        row["reasons"] = _loads(row["reasons"], [])
        row["details"] = _loads(row["details"], {})
        return row

    def take_back_decision(self, decision_id: int) -> None:
        with self.db.atomic():
            tables.delete_decision(self.db, decision_id)

    def add_decision(self, run_id: str, round_number: int, candidate_id: int, incumbent_id: Optional[int],
                     verdict: str, rule: str, reasons: list[str], details: dict[str, Any],
                     exported: Optional[str] = None) -> int:
        with self.db.atomic():
            return tables.insert_decision(self.db, {
                "run_id": run_id, "round": round_number, "candidate_id": candidate_id, "incumbent_id": incumbent_id,
                "verdict": verdict, "rule": rule, "reasons": json.dumps(reasons),
                "details": json.dumps(details, default=str), "exported": exported, "created_at": now()})

    # -- the harness's rows, read only ------------------------------------------------------------------

    def submission_status(self, submission_id: int) -> Optional[str]:
        row = tables.submission_row(self.db, submission_id)
        return row["status"] if row is not None else None

    def submission_wall(self, submission_id: Optional[int]) -> Optional[float]:
        """Seconds from a submission's start to its end, as archived; None where it is unknown or unfinished."""
        row = tables.submission_row(self.db, submission_id) if submission_id is not None else None
        if row is None or not row.get("created_at") or not row.get("finished_at"):
            return None
        started, finished = (dt.datetime.fromisoformat(row[k]) for k in ("created_at", "finished_at"))
        return (finished - started).total_seconds()

    def submission_used_gpu(self, submission_id: int) -> Optional[bool]:
        row = tables.submission_row(self.db, submission_id)
        return _loads(row["options"], {}).get("gpu") if row is not None else None

    def same_card(self, submission_a: Optional[int], submission_b: Optional[int]) -> bool:
        """Did both submissions run on one GPU (their environments name the same UUID)? False where either is
        unknown or ran on a CPU."""
        cards = [tables.submission_card(self.db, s) if s is not None else None for s in (submission_a, submission_b)]
        return cards[0] is not None and cards[0] == cards[1]

    def submission_count(self) -> int:
        return tables.submission_count(self.db)

    def eval_records(self, submission_id: Optional[int], regimes: Optional[dict[str, str]] = None,
                     figure: str = "official") -> list[EvalRecord]:
        """The submission's evaluations as the controller reads them; ``latency_ms`` is the ``figure`` ranked on
        (controller.promote.ranked_latency)."""
        if submission_id is None:
            return []
        regimes = regimes or {}
        records = []
        submission = self.archive.submission(submission_id)
        # Audits of the whole submission (the instruction proof) hold for every workload: the gate sees them.
        whole = tuple((submission.get("scores") or {}).get("audits") or ())
        for e in submission["evaluations"]:
            extra = e.get("extra") or {}
            records.append(EvalRecord(
                workload=e["workload_uuid"], label=e.get("workload_label") or "", status=e["status"],
                latency_ms=ranked_latency(e.get("latency_ms"), extra.get("kernel_latency_ms"), figure),
                audits=tuple(extra.get("audits") or ()) + whole,
                regime=regimes.get(e["workload_uuid"], ""), speedup_vs_fi=extra.get("speedup_vs_flashinfer_kernel"),
                fraction_of_floor=extra.get("fraction_of_floor"), message=e.get("message") or "",
                log_blob=e.get("log_blob"), speedup_vs_reference=e.get("speedup_factor")))
        return records

    def log_text(self, record: EvalRecord) -> str:
        return self.archive.get_blob(record.log_blob).decode(errors="replace") if record.log_blob else ""
