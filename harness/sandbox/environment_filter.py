"""Which of the host's environment variables reach a worker, and which names a worker can never have.

The worker's environment is built from scratch (harness.sandbox.runner.scrubbed_environment): the host's variables
whose names start with a passed prefix, never one that looks like a secret, and the few the harness sets itself.
The static gate reads the same rule: a variable no prefix passes and the harness never sets is absent in every
worker, so a condition on it is decided before anything runs (harness.audits.static_gate.python_env_flags).
"""

from __future__ import annotations

import re

PASS_PREFIXES = ("CUDA_", "NVIDIA_", "TRITON_", "TORCH_", "NCCL_", "NVSHMEM_", "LC_", "OMP_", "MKL_", "OPENBLAS_",
                 "FLASHINFER_", "LD_LIBRARY_PATH", "PYTHONPATH", "PATH", "LANG", "TERM", "TZ",
                 "CRUCIBLE_CUDA_ARCH", "MAX_JOBS", "CC", "CXX")
SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.I)
# What the harness, the sandbox or a process start may set besides (runner.scrubbed_environment, the extension
# folders, the worker options' extras), by prefix: kept wide, as calling one of these absent would call live code
# dead.
_SET_BY_THE_HARNESS = ("PYTHON", "CRUCIBLE", "HOME", "TMP", "TEMP", "XDG_", "TVM", "FLASHINFER", "MAX_JOBS",
                       "PWD", "OLDPWD", "SHLVL", "_", "USER", "LOGNAME", "SHELL", "HOSTNAME", "LD_", "NV", "CU")


def passes(name: str) -> bool:
    """Whether the host's variable `name` is handed to the worker."""
    return name.startswith(PASS_PREFIXES) and not SECRET.search(name)


def never_in_worker(name: str) -> bool:
    """Whether no worker can have variable `name`: no prefix passes it from the host and the harness sets none of its
    kind (a contestant's own flag: FIB_PROFILE, MYKERNEL_DEBUG)."""
    return bool(name) and not name.startswith(PASS_PREFIXES) and not name.upper().startswith(_SET_BY_THE_HARNESS)
