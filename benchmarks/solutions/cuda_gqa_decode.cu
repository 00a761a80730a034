// GQA paged decode (page_size 1) in plain CUDA with a torch binding: one warp per (request, query head),
// each lane holding 4 of the 128 dimensions, an online softmax over the request's tokens in base 2.
// Written for clarity, not speed: it shows a CUDA solution built by nvcc inside the harness's sandbox.
#include <torch/extension.h>
#include <cuda_bf16.h>
#include <c10/cuda/CUDAStream.h>

constexpr int kHeadDim = 128;
constexpr int kGroup = 4;  // 32 query heads over 8 KV heads

__global__ void gqa_decode(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                           const __nv_bfloat16* __restrict__ v, const int* __restrict__ indptr,
                           const int* __restrict__ indices, float scale_log2, int num_qo_heads, int num_kv_heads,
                           __nv_bfloat16* __restrict__ out, float* __restrict__ lse) {
  const int b = blockIdx.x, h = blockIdx.y * blockDim.y + threadIdx.y, lane = threadIdx.x;
  if (h >= num_qo_heads) return;
  const int kvh = h / kGroup;
  float qv[4], acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int i = 0; i < 4; ++i) qv[i] = __bfloat162float(q[(b * num_qo_heads + h) * kHeadDim + lane * 4 + i]);
  float m = -INFINITY, s = 0.f;
  for (int t = indptr[b]; t < indptr[b + 1]; ++t) {
    const long row = ((long)indices[t] * num_kv_heads + kvh) * kHeadDim + lane * 4;
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
  for (int i = 0; i < 4; ++i) out[(b * num_qo_heads + h) * kHeadDim + lane * 4 + i] = __float2bfloat16(acc[i] * inv);
  if (lane == 0) lse[b * num_qo_heads + h] = s > 0.f ? m + log2f(s) : -INFINITY;
}

void run(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache, torch::Tensor kv_indptr,
         torch::Tensor kv_indices, double sm_scale, torch::Tensor output, torch::Tensor lse) {
  const int batch = q.size(0), heads = q.size(1), kv_heads = k_cache.size(2);
  if (batch == 0) return;
  const dim3 block(32, 4), grid(batch, (heads + 3) / 4);
  gqa_decode<<<grid, block, 0, c10::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const __nv_bfloat16*>(q.data_ptr()), reinterpret_cast<const __nv_bfloat16*>(k_cache.data_ptr()),
      reinterpret_cast<const __nv_bfloat16*>(v_cache.data_ptr()), kv_indptr.data_ptr<int>(),
      kv_indices.data_ptr<int>(), static_cast<float>(sm_scale * 1.4426950408889634), heads, kv_heads,
      reinterpret_cast<__nv_bfloat16*>(output.data_ptr()), lse.data_ptr<float>());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }
