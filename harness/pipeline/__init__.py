"""One evaluation from submission to verdict: the Session (evaluate), each workload's trials, timing and recheck,
the trusted reference and its cache, the FlashInfer baselines, and the executors (local lanes, Ray lanes).
"""
