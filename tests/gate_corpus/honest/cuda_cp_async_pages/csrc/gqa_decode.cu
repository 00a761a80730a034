// GQA paged decode, page size 64: one CTA per (request, kv head); each page's K and V rows are copied into shared
// memory with cp.async (16 bytes per thread per instruction), double buffered so the next page loads while this
// one is consumed. Each warp owns GROUP/kWarps query heads.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>
#include <torch/extension.h>

namespace {

constexpr int kHeadDim = 128;
constexpr int kPageSize = 64;
constexpr int kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kStageBytes = kPageSize * kHeadDim * sizeof(__nv_bfloat16);
constexpr int kSmemBytes = 4 * kStageBytes;  // K and V, double buffered

__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(addr), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

template <int kGroup>
__global__ void __launch_bounds__(kThreads, 2)
gqa_decode_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
                  const __nv_bfloat16* __restrict__ v_cache, const int* __restrict__ indptr,
                  const int* __restrict__ indices, const int* __restrict__ last_len, __nv_bfloat16* __restrict__ out,
                  float* __restrict__ lse, float scale_log2, int kv_heads) {
  // 64 KiB of staging, past the 48 KiB static limit: dynamic shared memory, opted in at launch
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto ks = reinterpret_cast<__nv_bfloat16(*)[kPageSize][kHeadDim]>(smem_raw);
  auto vs = reinterpret_cast<__nv_bfloat16(*)[kPageSize][kHeadDim]>(smem_raw + kStageBytes * 2);
  const int b = blockIdx.x, kvh = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr int kWarps = kThreads / 32;
  constexpr int kHeadsPerWarp = (kGroup + kWarps - 1) / kWarps;
  constexpr int kPer = kHeadDim / 32;
  const int p0 = indptr[b], p1 = indptr[b + 1];
  const int num_heads = kv_heads * kGroup;

  auto stage = [&](int buf, int page) {
    const size_t row_stride = static_cast<size_t>(kv_heads) * kHeadDim;
    const size_t base = static_cast<size_t>(page) * kPageSize * row_stride + static_cast<size_t>(kvh) * kHeadDim;
    // 64 rows x 256 bytes per tensor = 1024 16-byte chunks; 128 threads copy 8 each
#pragma unroll
    for (int c = threadIdx.x; c < kPageSize * kHeadDim / 8; c += kThreads) {
      const int row = c / (kHeadDim / 8), col = (c % (kHeadDim / 8)) * 8;
      cp_async_16(&ks[buf][row][col], k_cache + base + row * row_stride + col);
      cp_async_16(&vs[buf][row][col], v_cache + base + row * row_stride + col);
    }
    cp_async_commit();
  };

  float qv[kHeadsPerWarp][kPer], acc[kHeadsPerWarp][kPer], m[kHeadsPerWarp], l[kHeadsPerWarp];
#pragma unroll
  for (int h = 0; h < kHeadsPerWarp; ++h) {
    const int head = kvh * kGroup + warp * kHeadsPerWarp + h;
    m[h] = -INFINITY;
    l[h] = 0.f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      acc[h][i] = 0.f;
      qv[h][i] = warp * kHeadsPerWarp + h < kGroup
                     ? __bfloat162float(q[(static_cast<size_t>(b) * num_heads + head) * kHeadDim + lane + 32 * i])
                     : 0.f;
    }
  }
  if (p1 > p0) stage(0, indices[p0]);
  for (int p = p0; p < p1; ++p) {
    const int buf = (p - p0) & 1;
    if (p + 1 < p1) {
      stage(buf ^ 1, indices[p + 1]);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int rows = (p + 1 == p1) ? last_len[b] : kPageSize;
    for (int r = 0; r < rows; ++r) {
#pragma unroll
      for (int h = 0; h < kHeadsPerWarp; ++h) {
        if constexpr (kGroup % kWarps != 0) {
          if (warp * kHeadsPerWarp + h >= kGroup) continue;
        }
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < kPer; ++i) s += qv[h][i] * __bfloat162float(ks[buf][r][lane + 32 * i]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        s *= scale_log2;
        const float mn = fmaxf(m[h], s), alpha = exp2f(m[h] - mn), pr = exp2f(s - mn);
        l[h] = l[h] * alpha + pr;
#pragma unroll
        for (int i = 0; i < kPer; ++i) acc[h][i] = acc[h][i] * alpha + pr * __bfloat162float(vs[buf][r][lane + 32 * i]);
        m[h] = mn;
      }
    }
    __syncthreads();  // the buffer is refilled by the next iteration's stage()
  }
#pragma unroll
  for (int h = 0; h < kHeadsPerWarp; ++h) {
    if (warp * kHeadsPerWarp + h >= kGroup) continue;
    const int head = kvh * kGroup + warp * kHeadsPerWarp + h;
    const float inv = l[h] > 0.f ? 1.f / l[h] : 0.f;
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      out[(static_cast<size_t>(b) * num_heads + head) * kHeadDim + lane + 32 * i] = __float2bfloat16(acc[h][i] * inv);
    if (lane == 0) lse[static_cast<size_t>(b) * num_heads + head] = l[h] > 0.f ? m[h] + log2f(l[h]) : -INFINITY;
  }
}

}  // namespace

void gqa_decode_ps64(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                     const at::Tensor& kv_indptr, const at::Tensor& kv_indices, const at::Tensor& last_page_len,
                     double sm_scale, at::Tensor& output, at::Tensor& lse) {
  TORCH_CHECK(q.is_cuda() && q.scalar_type() == at::kBFloat16, "q must be a bf16 CUDA tensor");
  TORCH_CHECK(k_cache.size(1) == kPageSize && k_cache.size(3) == kHeadDim, "page size 64, head dim 128 only");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "contiguous caches expected");
  const c10::cuda::CUDAGuard guard(q.device());
  const int batch = q.size(0), heads = q.size(1), kv_heads = k_cache.size(2);
  const dim3 grid(batch, kv_heads);
  auto stream = at::cuda::getCurrentCUDAStream();
  const float scale_log2 = static_cast<float>(sm_scale) * kLog2e;
  auto args = [&](auto kernel) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    kernel<<<grid, kThreads, kSmemBytes, stream>>>(
        reinterpret_cast<const __nv_bfloat16*>(q.data_ptr()), reinterpret_cast<const __nv_bfloat16*>(k_cache.data_ptr()),
        reinterpret_cast<const __nv_bfloat16*>(v_cache.data_ptr()), kv_indptr.data_ptr<int>(),
        kv_indices.data_ptr<int>(), last_page_len.data_ptr<int>(),
        reinterpret_cast<__nv_bfloat16*>(output.data_ptr()), lse.data_ptr<float>(), scale_log2, kv_heads);
  };
  switch (heads / kv_heads) {
    case 4: args(gqa_decode_kernel<4>); break;
    case 8: args(gqa_decode_kernel<8>); break;
    default: TORCH_CHECK(false, "unsupported group size ", heads / kv_heads);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
