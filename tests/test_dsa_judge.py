"""A check that needs the call's inputs (the top-k indexer's rule) is judged in the reference worker, which
draws the inputs again from the seed: a swap at the top-k boundary passes or fails by the score gap it makes."""

from __future__ import annotations

import pytest
import torch

from harness.measure.correctness import CheckResult, Tolerance
from harness.data.dataset import Dataset
from harness.families import family_for
from harness.families.dsa_inputs import dequantize_key_cache
from harness.families.dsa_paged import indexer_scores_at
from harness.sandbox.messages import JudgeRequest, ReferenceRequest
from harness.sandbox.worker import Worker

from dsa_support import TINY_INDEXER, make_tiny_dsa_dataset


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """The reference worker in this process, its reference top-k for one workload, and the swap of the row's
    weakest chosen token for its strongest left-out one (with the score gap that swap makes)."""
    root = make_tiny_dsa_dataset(tmp_path_factory.mktemp("dsa"))
    dataset = Dataset(root)
    definition = dataset.definition(TINY_INDEXER)
    [workload] = dataset.workloads_for(TINY_INDEXER, ["idx_b3_m3"])  # rows longer than top-k: choice matters
    req = ReferenceRequest(definition=definition, workload=workload, seed=5, dataset_root=str(root))
    worker = Worker("reference")
    _, reference = worker.reference(req)
    want = reference["topk_indices"]
    _, _, inputs = worker._workload_inputs(req)
    page_size = definition.const_axes["page_size"]
    row, length = 0, int(inputs["seq_lens"][0])
    positions = torch.arange(length)
    every = (inputs["block_table"][row, positions // page_size] * page_size + positions % page_size).to(torch.int32)
    assert length > want.shape[1]
    scores = indexer_scores_at(every[None], dequantize_key_cache(inputs["k_index_cache_fp8"]),
                               inputs["q_index_fp8"][row:row + 1].to(torch.float32), inputs["weights"][row:row + 1],
                               page_size)[0]
    chosen = set(want[row][want[row] >= 0].tolist())
    inside = [i for i in range(length) if int(every[i]) in chosen]
    outside = [i for i in range(length) if int(every[i]) not in chosen]
    weakest = min(inside, key=lambda i: float(scores[i]))
    strongest = max(outside, key=lambda i: float(scores[i]))
    gap = float(scores[weakest] - scores[strongest])
    got = want.clone()
    got[row][got[row] == every[weakest]] = every[strongest]
    return worker, req, want, got, gap


def judge(worker, req, got, want, tolerance: Tolerance) -> CheckResult:
    worker._request_tensors = {"got/topk_indices": got, "want/topk_indices": want}
    header, _ = worker.judge(JudgeRequest(definition=req.definition, workload=req.workload, seed=req.seed,
                                          dataset_root=req.dataset_root, tolerance=tolerance))
    return CheckResult.from_json(header["check"])


def test_a_swap_within_the_tolerance_passes_only_when_scores_are_compared(judged):
    worker, req, want, got, gap = judged
    assert gap >= 0 and not torch.equal(got, want)
    assert judge(worker, req, got, want, Tolerance(atol=gap + 1e-3, rtol=0.0)).passed
    # the same swap without the inputs: compared as sets, refused
    definition = worker._workload_inputs(req)[0]
    assert not family_for(definition.op_type).compare(definition, {"topk_indices": got}, {"topk_indices": want},
                                                      Tolerance(atol=gap + 1e-3, rtol=0.0)).passed


def test_a_swap_beyond_the_tolerance_and_an_unreachable_index_fail(judged):
    worker, req, want, got, gap = judged
    if gap > 1e-6:
        assert not judge(worker, req, got, want, Tolerance(atol=gap / 4, rtol=0.0)).passed
    stray = want.clone()
    stray[0, 0] = 10**6  # no page of this row holds it
    result = judge(worker, req, stray, want, Tolerance())
    assert not result.passed and "unreachable" in result.message
