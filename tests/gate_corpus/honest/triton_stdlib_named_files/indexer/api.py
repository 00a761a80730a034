# ruff: noqa  (written the way contestants write it; linting it is not the point)
import torch

from . import select as sel
from .platform import PAGE_SIZE, select_block, sm_count
from .score import _index_scores
from .types import IndexerShapes


def run(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices):
    shapes = IndexerShapes(q_index_fp8.shape[0], q_index_fp8.shape[1], q_index_fp8.shape[2], block_table.shape[1],
                           topk_indices.shape[1])
    if shapes.batch == 0:
        return
    # the packed cache seen as FP8 keys and as fp32 scales: views of the same bytes, no copy
    kv_bytes = k_index_cache_fp8.view(torch.uint8)
    kv_fp8 = kv_bytes.view(torch.float8_e4m3fn)
    kv_scale = kv_bytes.view(torch.float32)
    scores = torch.empty((shapes.batch, shapes.max_pages * PAGE_SIZE), dtype=torch.float32, device=weights.device)
    _index_scores[(shapes.batch, shapes.max_pages)](q_index_fp8, kv_fp8, kv_scale, weights, seq_lens, block_table,
                                                    scores, shapes.max_pages, HEADS=shapes.heads,
                                                    HEAD_DIM=shapes.head_dim, PAGE=PAGE_SIZE)
    sel._select_topk[(shapes.batch,)](scores, seq_lens, block_table, topk_indices, shapes.max_pages, TOPK=shapes.topk,
                                  PAGE=PAGE_SIZE, BLOCK=select_block(shapes.max_pages))
