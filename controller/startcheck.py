"""What `controller loop` checks before a run is created: an incumbent that is not a solution of the run's
definition is said on one line (exit 2) with no run row written and nothing evaluated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.data.schema import SchemaError, Solution, load_model


def check_incumbent(path: str, definition: str) -> Solution:
    """--incumbent: a solution file of ``definition``; SchemaError on one line otherwise."""
    try:
        solution = load_model(Solution, path)
    except SchemaError as err:
        raise SchemaError(f"--incumbent {' '.join(str(err).split())}") from None
    if solution.definition != definition:
        raise SchemaError(f"--incumbent {path}: a solution of {solution.definition}, not of {definition}")
    return solution


def check_new_runs(configs: list[Any], archive: Path) -> None:
    """Before any run is created: each run's incumbent is a solution of its definition (SchemaError, one line)."""
    for config in configs:
        if config.incumbent:
            check_incumbent(config.incumbent, config.definition)
