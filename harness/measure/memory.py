"""GPU memory of one evaluation: what each process held, what they held together, and the budget.

Workers report, per request, the most their caching allocator reserved and what it still reserves once the
request's tensors are released (harness.sandbox.worker). The harness never touches CUDA, so an evaluation's
processes are the candidate, the reference worker and the FlashInfer baseline workers. Requests run one at a
time, so at any moment one process is working and the others sit at their resident size: the evaluation's
footprint is the largest ``peak of one + resident of the others``. The budget is what the workload needs:
three times its input and output bytes (the inputs, a second input set for the fresh-input recheck, the
outputs and the reference's intermediates) plus 2 GiB for contexts and workspaces.
"""

from __future__ import annotations

from typing import Any, Mapping


from ..data.dtypes import io_nbytes, tensor_nbytes
from ..data.schema import Definition, Workload

GIB = 1 << 30
BUDGET_MULTIPLE = 3
BUDGET_SLACK_BYTES = 2 * GIB


def tensor_bytes(definition: Definition, specs: Mapping[str, Any], workload: Workload) -> int:
    """Bytes of the tensors ``specs`` (a definition's inputs or outputs) at this workload's axes; scalars are 0."""
    return sum(tensor_nbytes(definition, spec, workload.axes) for spec in specs.values())


def io_bytes(definition: Definition, workload: Workload) -> int:
    """The workload's own size: every input and output tensor once."""
    return io_nbytes(definition, workload.axes)


def budget_bytes(io: int) -> int:
    return BUDGET_MULTIPLE * io + BUDGET_SLACK_BYTES


def together_bytes(processes: Mapping[str, tuple[int, int]]) -> int:
    """The evaluation's footprint from ``{process: (peak, resident)}``: one process at its peak while the
    others hold their resident memory, the worst such moment."""
    if not processes:
        return 0
    resident_total = sum(resident for _, resident in processes.values())
    return max(peak + resident_total - resident for peak, resident in processes.values())


def evaluation_processes(candidate: Any, reference: Any, baselines: Mapping[str, Any],
                         baseline_names: Mapping[str, str]) -> dict[str, tuple[int, int]]:
    """``(peak, resident)`` bytes of the worker processes (anything with ``peak_bytes``, ``resident_bytes``,
    ``alive``) that count toward one workload's evaluation: the candidate, the reference when started, and the
    baselines of this definition (``baseline_names``: content hash -> name) still alive; a baseline worker of
    another definition the session keeps is not this workload's, and a dead one's figures are stale."""
    processes = {"candidate": (candidate.peak_bytes, candidate.resident_bytes)}
    if reference is not None:
        processes["reference"] = (reference.peak_bytes, reference.resident_bytes)
    for key, worker in baselines.items():
        if worker is not None and worker.alive and key in baseline_names:
            processes[f"baseline {baseline_names.get(key, key[:8])}"] = (worker.peak_bytes, worker.resident_bytes)
    return processes


def memory_record(definition: Definition, workload: Workload, processes: Mapping[str, tuple[int, int]],
                  reference_working_bytes: int = 0) -> dict:
    """What ``harness show``, the JSON and the archive keep per workload. ``reference_working_bytes``: what the
    definition's own reference needs beyond its inputs (its family says; the official code is not ours to
    change), added to the budget."""
    io = io_bytes(definition, workload)
    together = together_bytes(processes)
    budget = budget_bytes(io) + reference_working_bytes
    return {"io_bytes": io, "budget_bytes": budget, "together_bytes": together,
            "reference_working_bytes": reference_working_bytes, "within_budget": together <= budget,
            "processes": {name: {"peak_bytes": peak, "resident_bytes": resident}
                          for name, (peak, resident) in sorted(processes.items())}}


def describe(record: Mapping[str, Any]) -> str:
    """One line: ``12.3 GiB of 27.8 GiB budget (candidate 9.1, reference 11.2, ...)``."""
    if not record:
        return "not measured"
    parts = ", ".join(f"{name} {p['peak_bytes'] / GIB:.1f}" for name, p in record.get("processes", {}).items())
    over = "" if record.get("within_budget", True) else " OVER BUDGET"
    return (f"{record['together_bytes'] / GIB:.1f} GiB together of {record['budget_bytes'] / GIB:.1f} GiB budget"
            f"{over} (peak GiB: {parts})")
