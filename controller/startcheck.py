"""What `controller loop` checks before a run is created: an incumbent that is not a solution of the run's
definition, and a replay with nothing to replay. Each is said on one line (exit 2) with no run row written and
nothing evaluated; the replay provider's source is checked by the provider itself
(controller/providers/replay.py: ``check_source``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.data.schema import SchemaError, Solution, load_model

from .providers.base import ProviderError

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
    """Before any run is created: each run's incumbent is a solution of its definition, and a replay has a run
    to replay, in an archive that exists (none is created for it). SchemaError or ProviderError, one line."""
    for config in configs:
        if config.incumbent:
            check_incumbent(config.incumbent, config.definition)
    if not configs or configs[0].provider != "replay":
        return
    from harness.archive.database import ARCHIVE_DB, Archive

    from .providers.replay import ReplayProvider
    from .store import Store

    if not (Path(archive) / ARCHIVE_DB).is_file():
        raise ProviderError(f"replay: no archive at {Path(archive) / ARCHIVE_DB}, so nothing to replay")
    store = Store(Archive.open_existing(archive))
    for config in configs:
        ReplayProvider(store, config.provider_options.get("run")).check_source(config.definition)
