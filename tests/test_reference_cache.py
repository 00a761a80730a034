"""The reference's outputs reused across sessions of one archive (harness.pipeline.reference_cache): seeds from the
archive's secret, outputs kept by everything they depend on, nothing reused with fresh seeds."""

from __future__ import annotations

import torch

from harness.pipeline import reference_cache
from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.pipeline.evaluate import Session, SubmitOptions
from harness.data.schema import Solution

from support import TORCH_CANDIDATE, solution_dict

WORKLOADS = ["tiny_b2_t40", "tiny_b3_t96"]


def _submit(root, archive: Archive, **options):
    with Session(Dataset(root), archive, SubmitOptions(workloads=WORKLOADS, timeout_s=60, **options)) as s:
        result = s.submit(Solution.model_validate(solution_dict(TORCH_CANDIDATE)))
    assert [w.status for w in result.workloads] == ["PASSED", "PASSED"], [w.message for w in result.workloads]
    return result


def test_a_later_session_reads_the_references_outputs_back(tiny_dataset_root, tmp_path, monkeypatch):
    from harness.sandbox.messages import ReferenceRequest
    from harness.sandbox.runner import WorkerProcess

    asked: list[int] = []
    request = WorkerProcess.request

    def counting(self, message, *args, **kwargs):
        if isinstance(message, ReferenceRequest):
            asked.append(message.seed)
        return request(self, message, *args, **kwargs)

    monkeypatch.setattr(WorkerProcess, "request", counting)
    archive = Archive(tmp_path / "a")
    first = _submit(tiny_dataset_root, archive)
    assert first.phases_s.get("reference", 0) > 0
    kept = archive.db.execute("select count(*) from trusted_outputs").fetchone()[0]
    assert kept >= 2 * 3  # every trial seed of both workloads (and the oracle's, and the recheck's fresh calls)
    asked.clear()
    second = _submit(tiny_dataset_root, archive)
    # only the recheck's reuse call per workload: content drawn for that submission alone, computed, not stored
    assert len(asked) == len(WORKLOADS)
    assert archive.db.execute("select count(*) from trusted_outputs").fetchone()[0] == kept
    # the same judgement: the same seeds, so the same errors
    assert [w.max_absolute_error for w in second.workloads] == [w.max_absolute_error for w in first.workloads]
    fresh = _submit(tiny_dataset_root, archive, fresh_seeds=True)
    assert fresh.phases_s.get("reference", 0) > 0  # its own seeds: computed, and not stored
    assert archive.db.execute("select count(*) from trusted_outputs").fetchone()[0] == kept


def test_each_archive_has_its_own_seeds(tmp_path):
    one, two = Archive(tmp_path / "one"), Archive(tmp_path / "two")
    assert one.seed_secret() and one.seed_secret() == Archive(tmp_path / "one").seed_secret()
    assert one.seed_secret() != two.seed_secret()
    assert reference_cache.archive_seed_secret(None) is None


def test_large_outputs_are_not_kept_and_keys_follow_the_input_code(monkeypatch):
    header = {"ok": True, "input_fingerprint": "f", "memory": {"peak_bytes": 1}}
    small = {"output": torch.zeros(4, 8)}
    text, blob = reference_cache.encode_entry(header, small)
    back_header, back = reference_cache.decode_entry(text, blob)
    assert back_header == {"ok": True, "input_fingerprint": "f"} and torch.equal(back["output"], small["output"])
    monkeypatch.setattr(reference_cache, "MAX_CACHED_BYTES", 64)
    assert reference_cache.encode_entry(header, small) is None
    key = reference_cache.cache_key("reference", "gpu", "tools", "d" * 64, "w", 7)
    monkeypatch.setattr(reference_cache, "input_code_hash", lambda: "changed")
    assert reference_cache.cache_key("reference", "gpu", "tools", "d" * 64, "w", 7) != key
