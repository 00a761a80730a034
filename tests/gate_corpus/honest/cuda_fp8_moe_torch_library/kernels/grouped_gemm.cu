// Grouped FP8 GEMVs with 128x128 block scales: one CTA per (expert-sorted token slot, block of output columns).
// Row-at-a-time is slow for large T; it is the plain correct version of the layout.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <torch/library.h>
#include <torch/types.h>

namespace moe {

constexpr int kBlock = 128;
constexpr int kThreads = 256;

__device__ __forceinline__ float fp8_to_float(uint8_t bits) {
  __nv_fp8_e4m3 v;
  v.__x = bits;
  return static_cast<float>(v);
}

// Which expert owns sorted slot `slot` (offsets has num_local + 1 entries).
__device__ __forceinline__ int expert_of(const int* offsets, int num_local, int slot) {
  int lo = 0, hi = num_local;
  while (lo + 1 < hi) {
    const int mid = (lo + hi) / 2;
    if (offsets[mid] <= slot) lo = mid; else hi = mid;
  }
  return lo;
}

template <bool kSwiglu>
__device__ __forceinline__ float finish(float gate, float up) {
  if constexpr (kSwiglu) {
    return up / (1.f + __expf(-up)) * gate;
  } else {
    return gate;
  }
}

// act[slot, j] = silu(x @ W1[e, I + j]) * (x @ W1[e, j]), with x's and W1's block scales applied per 128 block.
__global__ void __launch_bounds__(kThreads)
gemm1_swiglu_kernel(const uint8_t* __restrict__ x, const float* __restrict__ x_scale, const uint8_t* __restrict__ w1,
                    const float* __restrict__ w1_scale, const int* __restrict__ order, const int* __restrict__ offsets,
                    float* __restrict__ act, int tokens, int hidden, int inter, int num_local, int top_k) {
  const int slot = blockIdx.x;
  if (slot >= offsets[num_local]) return;
  const int e = expert_of(offsets, num_local, slot);
  const int token = order[slot] / top_k;
  const int hb = hidden / kBlock, ob = 2 * inter / kBlock;
  for (int j = blockIdx.y * kThreads + threadIdx.x; j < inter; j += gridDim.y * kThreads) {
    float gate = 0.f, up = 0.f;
    for (int b = 0; b < hb; ++b) {
      float g = 0.f, u = 0.f;
#pragma unroll 4
      for (int k = b * kBlock; k < (b + 1) * kBlock; ++k) {
        const float xv = fp8_to_float(x[static_cast<size_t>(token) * hidden + k]);
        g += xv * fp8_to_float(w1[(static_cast<size_t>(e) * 2 * inter + j) * hidden + k]);
        u += xv * fp8_to_float(w1[(static_cast<size_t>(e) * 2 * inter + inter + j) * hidden + k]);
      }
      const float xs = x_scale[static_cast<size_t>(b) * tokens + token];
      gate += g * xs * w1_scale[(static_cast<size_t>(e) * ob + j / kBlock) * hb + b];
      up += u * xs * w1_scale[(static_cast<size_t>(e) * ob + (inter + j) / kBlock) * hb + b];
    }
    act[static_cast<size_t>(slot) * inter + j] = finish<true>(gate, up);
  }
}

// acc[token] += weight * (act[slot] @ W2[e]^T), W2's block scales per (128 rows, 128 columns).
__global__ void __launch_bounds__(kThreads)
gemm2_combine_kernel(const float* __restrict__ act, const uint8_t* __restrict__ w2, const float* __restrict__ w2_scale,
                     const int* __restrict__ order, const int* __restrict__ offsets, const float* __restrict__ weights,
                     float* __restrict__ acc, int hidden, int inter, int num_local, int top_k) {
  const int slot = blockIdx.x;
  if (slot >= offsets[num_local]) return;
  const int e = expert_of(offsets, num_local, slot);
  const int pair = order[slot], token = pair / top_k;
  const float w = weights[pair];
  const int hb = hidden / kBlock, ib = inter / kBlock;
  for (int n = blockIdx.y * kThreads + threadIdx.x; n < hidden; n += gridDim.y * kThreads) {
    float sum = 0.f;
    for (int b = 0; b < ib; ++b) {
      float part = 0.f;
#pragma unroll 4
      for (int k = b * kBlock; k < (b + 1) * kBlock; ++k)
        part += act[static_cast<size_t>(slot) * inter + k] * fp8_to_float(w2[(static_cast<size_t>(e) * hidden + n) * inter + k]);
      sum += part * w2_scale[(static_cast<size_t>(e) * hb + n / kBlock) * ib + b];
    }
    atomicAdd(&acc[static_cast<size_t>(token) * hidden + n], w * sum);
  }
}

__global__ void to_bf16_kernel(const float* __restrict__ acc, __nv_bfloat16* __restrict__ out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16(acc[i]);
}

void gemm1_swiglu(const at::Tensor& x, const at::Tensor& x_scale, const at::Tensor& w1, const at::Tensor& w1_scale,
                  const at::Tensor& order, const at::Tensor& offsets, at::Tensor& act, int64_t top_k) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kByte, "x: fp8 bytes on CUDA");
  const c10::cuda::CUDAGuard guard(x.device());
  const int tokens = x.size(0), hidden = x.size(1), num_local = w1.size(0), inter = w1.size(1) / 2;
  const dim3 grid(tokens * top_k, (inter + kThreads - 1) / kThreads);
  gemm1_swiglu_kernel<<<grid, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<uint8_t>(), x_scale.data_ptr<float>(), w1.data_ptr<uint8_t>(), w1_scale.data_ptr<float>(),
      order.data_ptr<int>(), offsets.data_ptr<int>(), act.data_ptr<float>(), tokens, hidden, inter, num_local,
      static_cast<int>(top_k));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void gemm2_combine(const at::Tensor& act, const at::Tensor& w2, const at::Tensor& w2_scale, const at::Tensor& order,
                   const at::Tensor& offsets, const at::Tensor& weights, at::Tensor& acc, int64_t top_k) {
  const c10::cuda::CUDAGuard guard(act.device());
  const int num_local = w2.size(0), hidden = w2.size(1), inter = w2.size(2);
  const dim3 grid(act.size(0), (hidden + kThreads - 1) / kThreads);
  gemm2_combine_kernel<<<grid, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      act.data_ptr<float>(), w2.data_ptr<uint8_t>(), w2_scale.data_ptr<float>(), order.data_ptr<int>(),
      offsets.data_ptr<int>(), weights.data_ptr<float>(), acc.data_ptr<float>(), hidden, inter, num_local,
      static_cast<int>(top_k));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void to_bf16(const at::Tensor& acc, at::Tensor& out) {
  const int64_t n = acc.numel();
  to_bf16_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
      acc.data_ptr<float>(), reinterpret_cast<__nv_bfloat16*>(out.data_ptr()), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace moe

TORCH_LIBRARY_IMPL(moe_fp8, CUDA, m) {
  m.impl("gemm1_swiglu", &moe::gemm1_swiglu);
  m.impl("gemm2_combine", &moe::gemm2_combine);
  m.impl("to_bf16", &moe::to_bf16);
}
