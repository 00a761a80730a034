"""GQA decode as CUDA text compiled by torch.utils.cpp_extension.load_inline at import: one warp per
(request, query head), an online softmax in base 2."""

import torch
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <torch/extension.h>
#include <cuda_bf16.h>
#include <c10/cuda/CUDAStream.h>

__global__ void gqa_decode_inline(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                                  const __nv_bfloat16* __restrict__ v, const int* __restrict__ indptr,
                                  const int* __restrict__ indices, float scale_log2, int heads, int kv_heads,
                                  __nv_bfloat16* __restrict__ out, float* __restrict__ lse) {
  const int b = blockIdx.x, h = blockIdx.y * blockDim.y + threadIdx.y, lane = threadIdx.x;
  if (h >= heads) return;
  const int kvh = h / (heads / kv_heads);
  float qv[4], acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int i = 0; i < 4; ++i) qv[i] = __bfloat162float(q[(b * heads + h) * 128 + lane * 4 + i]);
  float m = -INFINITY, s = 0.f;
  for (int t = indptr[b]; t < indptr[b + 1]; ++t) {
    const long row = ((long)indices[t] * kv_heads + kvh) * 128 + lane * 4;
    float dot = 0.f;
    for (int i = 0; i < 4; ++i) dot += qv[i] * __bfloat162float(k[row + i]);
    for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffff, dot, off);
    const float x = dot * scale_log2, m_new = fmaxf(m, x);
    const float corr = exp2f(m - m_new), p = exp2f(x - m_new);
    s = s * corr + p;
    for (int i = 0; i < 4; ++i) acc[i] = acc[i] * corr + p * __bfloat162float(v[row + i]);
    m = m_new;
  }
  const float inv = s > 0.f ? 1.f / s : 0.f;
  for (int i = 0; i < 4; ++i) out[(b * heads + h) * 128 + lane * 4 + i] = __float2bfloat16(acc[i] * inv);
  if (lane == 0) lse[b * heads + h] = s > 0.f ? m + log2f(s) : -INFINITY;
}

void decode(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor indptr, torch::Tensor indices,
            double sm_scale, torch::Tensor out, torch::Tensor lse) {
  const int batch = q.size(0), heads = q.size(1), kv_heads = k.size(2);
  if (batch == 0) return;
  const dim3 block(32, 4), grid(batch, (heads + 3) / 4);
  gqa_decode_inline<<<grid, block, 0, c10::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const __nv_bfloat16*>(q.data_ptr()), reinterpret_cast<const __nv_bfloat16*>(k.data_ptr()),
      reinterpret_cast<const __nv_bfloat16*>(v.data_ptr()), indptr.data_ptr<int>(), indices.data_ptr<int>(),
      static_cast<float>(sm_scale * 1.4426950408889634), heads, kv_heads,
      reinterpret_cast<__nv_bfloat16*>(out.data_ptr()), lse.data_ptr<float>());
}
"""

CPP_SRC = ("void decode(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor indptr, "
           "torch::Tensor indices, double sm_scale, torch::Tensor out, torch::Tensor lse);")

_ext = load_inline(name="gqa_decode_inline_ext", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, functions=["decode"],
                   extra_cuda_cflags=["-O3"], verbose=False)


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    _ext.decode(q, k_cache, v_cache, kv_indptr, kv_indices, float(sm_scale), output, lse)
