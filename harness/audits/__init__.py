"""Audits: the one outcome type and the catalogue of every audit (model; definitions/audits.yaml), the static gate
(rules as data), run-time attribution, the instruction proof (SASS), the thresholds, and the per-workload audits a
session runs; verdicts turns their findings into promotion blockers.
"""
