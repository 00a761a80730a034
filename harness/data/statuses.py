"""Every status Crucible writes or reads, defined once.

- ``EvaluationStatus``: the official per-workload verdicts (the values of the contest's trace format, exported as they
  are). A finished submission's status is one of these too: PASSED, or its first failing workload's status.
- ``SubmissionStatus``: Crucible's own, for a submission or workload the harness holds no verdict for. Never exported
  in a trace.
- ``RunStatus``: a controller run's (and a controller round's) progress; nothing to do with a submission's verdict.

All are ``str`` enums: a member equals its text (``SubmissionStatus.SKIPPED == "SKIPPED"``), so comparisons with
statuses read back from the archive or from JSON keep working, and a member written to JSON or SQLite is its text.
"""

from __future__ import annotations

from enum import Enum, StrEnum


class EvaluationStatus(str, Enum):
    PASSED = "PASSED"  # correct within the tolerances (and timed, unless timing was skipped)
    INCORRECT_SHAPE = "INCORRECT_SHAPE"  # an output has the wrong shape
    INCORRECT_NUMERICAL = "INCORRECT_NUMERICAL"  # an output is outside the tolerances
    INCORRECT_DTYPE = "INCORRECT_DTYPE"  # an output has the wrong dtype
    RUNTIME_ERROR = "RUNTIME_ERROR"  # the solution raised, crashed, or an audit failed
    COMPILE_ERROR = "COMPILE_ERROR"  # the solution did not build (or the static gate refused it)
    TIMEOUT = "TIMEOUT"  # the build or a workload ran past its time limit


class SubmissionStatus(StrEnum):
    RUNNING = "RUNNING"  # the submission is being evaluated (or its harness died before archiving a verdict)
    SKIPPED = "SKIPPED"  # a workload that was not evaluated (the submission stopped early); never exported
    INTERRUPTED = "INTERRUPTED"  # the harness was stopped (signal, Ctrl-C, killed process) before it finished
    HARNESS_ERROR = "HARNESS_ERROR"  # the harness itself failed (its own bug, a lane that died twice)


# A submission with one of these statuses holds no verdict on the solution.
NO_VERDICT = (SubmissionStatus.RUNNING, SubmissionStatus.INTERRUPTED, SubmissionStatus.HARNESS_ERROR)


class RunStatus(StrEnum):
    RUNNING = "RUNNING"  # a controller run (or round) in progress, or cut short without its except block running
    DONE = "DONE"  # the run played to its stop condition (or the round finished)
    FAILED = "FAILED"  # the run stopped on an exception (a bug or an error it could not handle)
    INTERRUPTED = "INTERRUPTED"  # the run was stopped from outside (Ctrl-C, signal) and can be resumed
