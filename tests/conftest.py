"""Fixtures shared by the tests; the data and builders they use live in support.py."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from profile_support import fake_ncu, request_for  # noqa: F401 (fixtures of the profiling tests)
from support import make_tiny_dataset


def pytest_configure(config):
    # The GPU tests start many archives; FlashInfer's JIT modules are compiled once for all of them, not per test.
    os.environ.setdefault("CRUCIBLE_FLASHINFER_CACHE", str(Path(tempfile.gettempdir()) / "crucible-tests-flashinfer"))


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except Exception:
        has_gpu = False
    if not has_gpu:
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_dataset_root(tmp_path_factory) -> Path:
    return make_tiny_dataset(tmp_path_factory.mktemp("dataset"))


@pytest.fixture
def tiny_dataset(tiny_dataset_root):
    from harness.data.dataset import Dataset

    return Dataset(tiny_dataset_root)


@pytest.fixture
def archive(tmp_path):
    from harness.archive.database import Archive

    return Archive(tmp_path / "archive")


@pytest.fixture(autouse=True)
def _no_secrets_leak(monkeypatch):
    # Tests must never depend on a real key; a fake one proves the worker does not inherit it.
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-must-not-leak")
    yield


# Static gate policies (tests/test_static_gate_*.py): the shipped policy, default layer and gqa_paged layers.


@pytest.fixture(scope="module")
def policy():
    from harness.audits.static_gate import load_policy

    return load_policy()


@pytest.fixture(scope="module")
def gqa_policy():
    from harness.audits.static_gate import load_policy

    return load_policy(op_type="gqa_paged", definition="gqa_paged_decode_h32_kv8_d128_ps1")
