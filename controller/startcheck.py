"""What `controller loop` checks before a run is created or resumed: options of which one would be ignored, an
incumbent that is not a solution of the run's definition, and a replay with nothing to replay. Each is said on one
line (exit 2) with no run row written and nothing evaluated; the replay provider's source is checked by the
provider itself (controller/providers/replay.py: ``check_source``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional, Sequence

from harness.data.schema import SchemaError, Solution, load_model

from .providers.base import ProviderError

# The options a resumed run takes from its stored settings: given with --resume, they would be ignored. Those a
# resume does use: --rounds and the --budget-* limits (controller/extend.py), --archive, --executor, --address,
# --json.
STORED_SETTINGS = {
    "definition": "--definition", "provider": "--provider", "model": "--model", "candidates": "--candidates",
    "repairs": "--repairs", "dataset": "--dataset", "workloads": "--workloads", "incumbent": "--incumbent",
    "target_hardware": "--target", "replay_run": "--replay-run", "max_output_tokens": "--max-output-tokens",
    "timeout_s": "--timeout-s", "profile": "--profile/--no-profile", "profile_timeout_s": "--profile-timeout-s",
    "hint": "--hint", "max_turns": "--max-turns", "max_evaluations": "--max-evaluations",
    "provider_option": "--provider-option", "dry_run": "--dry-run",
}


# Provider settings that an option of their own sets too: with both given, one would be silently ignored.
SPELLED_TWICE = {"model": ("model", "--model"), "run": ("replay_run", "--replay-run")}


def conflicting_options(given: set[str], resume: bool, provider: Optional[str], executor: str,
                        provider_keys: Sequence[str] = ()) -> Optional[str]:
    """The refusal for options of which one would be silently ignored, else None. ``given``: the parameter
    names set on the command line (not defaults); ``provider``: the one asked for (None: the default);
    ``provider_keys``: the keys of the --provider-option settings, in order."""
    if resume:
        ignored = [flag for name, flag in STORED_SETTINGS.items() if name in given]
        if ignored:
            return (f"--resume continues a run with its stored settings: {', '.join(ignored)} would be ignored "
                    "(give only --rounds, --budget-*, --archive, --executor, --address or --json with --resume)")
        return None
    if "replay_run" in given and provider != "replay":
        return "--replay-run is for --provider replay only (it would be ignored)"
    if "address" in given and executor != "ray":
        return "--address is for --executor ray only (it would be ignored)"
    repeated = sorted({key for key in provider_keys if list(provider_keys).count(key) > 1})
    if repeated:
        return f"--provider-option {repeated[0]}= is given more than once (all but one would be ignored)"
    for key, (name, flag) in SPELLED_TWICE.items():
        if key in provider_keys and name in given:
            return f"--provider-option {key}= and {flag} both set the provider's {key} (one would be ignored): give one"
    return None


INCUMBENT_BYTES = 16 << 20  # the largest --incumbent read: `harness submit`'s limit for a solution file (sandbox.yaml)


def check_incumbent(path: str, definition: str) -> Solution:
    """--incumbent: a solution file of ``definition``; SchemaError on one line otherwise (a FIFO, a device or a file
    over INCUMBENT_BYTES is refused unread)."""
    try:
        solution = load_model(Solution, path, INCUMBENT_BYTES)
    except SchemaError as err:
        raise SchemaError(f"--incumbent {' '.join(str(err).split())}") from None
    if solution.definition != definition:
        raise SchemaError(f"--incumbent {path}: a solution of {solution.definition}, not of {definition}")
    return solution


HINT_BYTES = 64 << 10  # the largest --hint file: it goes into every request of the run


def read_hint(value: Optional[str]) -> str:
    """--hint: the text, or the text of the file it names (a regular file of at most HINT_BYTES, UTF-8); SchemaError
    on one line otherwise. A 3 GiB file was read whole, into every request."""
    if not value:
        return ""
    if len(value) < 4096 and os.path.isfile(value):  # isfile: False, never an error, for a name past the limit
        try:
            with open(value, "rb") as f:
                data = f.read(HINT_BYTES + 1)
            if len(data) > HINT_BYTES:
                raise SchemaError(f"--hint {value}: over the {HINT_BYTES >> 10} KiB a hint may have (it goes into "
                                  "every request)")
            return data.decode("utf-8").strip()
        except (OSError, UnicodeDecodeError) as err:
            raise SchemaError(f"--hint {value}: cannot read it ({' '.join(str(err).split())})") from None
    if len(value) < 4096 and os.path.isdir(value):  # a folder is no text to send (red team round 12, V14)
        raise SchemaError(f"--hint {value}: is a folder; give the hint's text or a file holding it")
    return value.strip()


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
