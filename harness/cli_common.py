"""What every `harness` command shares: the consoles, fatal errors, opening the archive and the dataset, and
number and status formatting. Below harness/cli.py and the command modules it registers (profile_cli,
report_cli), which all import from here.
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
import sys
from pathlib import Path
from typing import Any, Optional

import click
from rich.console import Console
from rich.markup import escape

from .archive.database import ARCHIVE_ENV, Archive, ArchiveError, ArchiveMissing, archive_location
from .data.dataset import Dataset
from .data.schema import SchemaError
from .data.statuses import EvaluationStatus, SubmissionStatus
from .pipeline.phases import timeline

ARCHIVE_HELP = f"Archive folder (default: ${ARCHIVE_ENV}, else ./artifacts)."

# C0 and C1 control characters but newline and tab: a candidate's log or error message could otherwise move the
# cursor, clear the screen or retitle the terminal (an escape sequence printing a fake "PASSED" over a line).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with every control character but newline and tab shown as ``\\xNN`` instead of obeyed."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class SafeConsole(Console):
    """A console that never passes a control character of the text it is given to the terminal (rich adds
    its own styling sequences after this, when it renders), and never reads `:name:` as an emoji (a finding's
    `path:100:` would otherwise print as one)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("emoji", False)
        super().__init__(*args, **kwargs)

    def render_str(self, text: str, *args: Any, **kwargs: Any) -> Any:
        from rich.errors import MarkupError

        try:
            return super().render_str(printable(text), *args, **kwargs)
        except MarkupError:  # text of a candidate's or a model's that reads as broken markup: shown as it is
            return super().render_str(printable(text), *args, **{**kwargs, "markup": False})


class FiniteRange(click.FloatRange):
    """A float range that also refuses nan and inf: click's bounds compare false with nan, which would pass a
    time limit of nan through and switch the limit off."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


POSITIVE_SECONDS = FiniteRange(0, min_open=True)  # a time limit: more than zero seconds, finite

# mkdir of a path that is there but no folder (a file, a FIFO, a device, a link to nothing): EEXIST, said plainly
NOT_A_FOLDER = "it is there and is not a folder (name a new or empty folder)"


# Tables stay readable when piped (rich would otherwise assume 80 columns).
out = SafeConsole(width=None if sys.stdout.isatty() else 200)
err = SafeConsole(stderr=True)


INTERRUPTED_NOTE = "what finished is archived; an unfinished submission is recorded as INTERRUPTED"
TERMINATED = 128 + 15  # the status exit_on_sigterm leaves with


def invoke(command: Any) -> int:
    """Run a click command; its exit status. A usage error (a missing argument, a bad value) is one line and exit
    code 2, as every error of these programs is, not click's four lines; Ctrl-C is one line and 130."""
    try:
        returned = command.main(standalone_mode=False)
    except click.UsageError as e:
        hint = f" (see `{e.ctx.command_path} --help`)" if e.ctx is not None else ""
        print(f"error: {printable(e.format_message())}{hint}", file=sys.stderr)
        return 2
    except click.ClickException as e:
        print(f"error: {printable(e.format_message())}", file=sys.stderr)
        return e.exit_code
    except click.Abort:
        print(f"error: interrupted ({INTERRUPTED_NOTE})", file=sys.stderr)
        return 130
    except sqlite3.OperationalError as e:  # another process held the archive past the busy timeout (30 s)
        if "locked" not in str(e):
            raise
        print(f"error: the archive is locked by another process ({e}); run again when it is done ({INTERRUPTED_NOTE} "
              "by the next run)", file=sys.stderr)
        return 2
    except SystemExit as done:  # harness.sandbox.runner.exit_on_sigterm: said on one line, as Ctrl-C is
        if done.code == TERMINATED:
            print(f"error: terminated by SIGTERM ({INTERRUPTED_NOTE})", file=sys.stderr)
        raise
    return returned if isinstance(returned, int) else 0


def run_as_program(command: Any) -> None:
    """Run a click command as the program, then leave without Python's finalisation: with torch loaded it takes
    0.4 s or more after the last line is printed (every archive write is committed by then, and the workers are
    stopped). Never in-process (a test's CliRunner calls the command itself), and not once Ray is loaded: its
    driver winds down in exit handlers."""
    import os

    try:
        code: Any = invoke(command)
    except SystemExit as done:
        code = done.code
    timeline("command_returned")
    if "ray" in sys.modules:
        sys.exit(code)
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): printed, status 1, as Python does
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def fail(message: str, code: int = 2) -> None:
    # the message as it is: brackets in it are text ("[enforce fail at alloc_cpu.cpp:127]", ".[ray]"), not markup
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    sys.exit(code)


STACKS_ENV = "CRUCIBLE_DUMP_STACKS_AFTER_S"


def dump_stacks_from_env() -> None:
    """$CRUCIBLE_DUMP_STACKS_AFTER_S=N: where a slow or stuck harness waits, every thread's stack to stderr every N
    seconds. A value that is no number of seconds (abc, 0, -1, nan, inf) is one line and exit 2, not a traceback."""
    value = os.environ.get(STACKS_ENV)
    if not value:
        return
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and 0 < seconds < 1e9):
        fail(f"{STACKS_ENV}={printable(value)[:40]!r}: expected a number of seconds above 0")
    from . import stack_dumps

    stack_dumps.start(seconds)


def open_archive(path: Optional[str], reading: bool = False) -> Archive:
    """The archive of --archive, else $CRUCIBLE_ARCHIVE, else ./artifacts. Writers may start one in an existing
    folder (./artifacts is made when missing); readers need one that exists, and never create one."""
    folder, source = archive_location(path)
    where = f" (from {ARCHIVE_ENV})" if source == "env" else ""
    try:  # a name past the system's limit (ENAMETOOLONG) is said as any other that cannot be opened
        if not reading and Path(folder).is_dir() and not os.access(folder, os.W_OK):
            # said before anything runs: a read-only archive would otherwise fail after the whole evaluation
            fail(f"archive folder {folder}{where} is not writable (a read-only mount, or another user's)")
        if reading:
            return Archive.open_existing(folder)
        return Archive(folder, create=source == "default")
    except ArchiveMissing as e:
        fail(f"{e}{f' (set --archive or {ARCHIVE_ENV})' if source == 'default' else where}")
    except ArchiveError as e:
        fail(f"{e}{where}")
    except Exception as e:  # a file that is not a SQLite database, a locked folder...
        fail(f"cannot open archive {folder}{where}: {e}")
    raise AssertionError


def open_dataset(path: Optional[str]) -> Dataset:
    try:
        ds = Dataset(path)
        ds.definitions  # parse now: a malformed dataset is reported before any work
        ds.workloads
        for name in list(ds.definitions)[:1]:  # its eval_config.yaml, read now rather than after the archive opens
            ds.preset(name)
        if (ds.root / "audit_policy.yaml").exists():  # its own policy, which every submission's static gate reads
            from .audits.static_gate import load_policy

            load_policy(ds.root / "audit_policy.yaml")  # PolicyError (a ValueError): one line, not mid-submission
        return ds
    except (SchemaError, ValueError) as e:
        fail(" ".join(str(e).split()))  # a validation error's several lines as one
    raise AssertionError


def fmt(x: Optional[float], digits: int = 3) -> str:
    if x is None:
        return "-"
    return f"{x:.{digits}g}" if abs(x) < 1e4 else f"{x:.3e}"


STATUS_STYLE = {EvaluationStatus.PASSED: "green", SubmissionStatus.SKIPPED: "dim", SubmissionStatus.RUNNING: "yellow"}


def styled(status: str) -> str:
    return f"[{STATUS_STYLE.get(status, 'red')}]{status}[/]"
