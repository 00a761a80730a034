"""Measuring: the official correctness rule and the float64 oracle, the official timer (CUPTI and its records),
the roofline, the GPU's state, device memory, and the definition's scores.
"""
