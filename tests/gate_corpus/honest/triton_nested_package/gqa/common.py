# ruff: noqa
import math

LOG2E = math.log2(math.e)
MIN_TOKENS_PER_SPLIT = 256
MAX_SPLITS = 16
