// GQA paged decode, page size 1: one block of 128 threads per (request, query head); thread d owns dimension d,
// the dot product is a block reduction through shared memory, the softmax is online (running max and sum).
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>

#define HEAD_DIM 128

static __device__ float block_dot(float part, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o; o >>= 1) part += __shfl_down_sync(0xffffffffu, part, o);
  if (lane == 0) scratch[warp] = part;
  __syncthreads();
  float total = scratch[0] + scratch[1] + scratch[2] + scratch[3];
  __syncthreads();
  return total;
}

__global__ void gqa_decode_rows(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                const int* indptr, const int* indices, float scale, int heads, int kv_heads,
                                __nv_bfloat16* out, float* lse) {
  __shared__ float scratch[4];
  const int b = blockIdx.x / heads, h = blockIdx.x % heads, kvh = h / (heads / kv_heads), d = threadIdx.x;
  const float qd = __bfloat162float(q[(size_t)blockIdx.x * HEAD_DIM + d]) * scale;
  float running_max = -INFINITY, running_sum = 0.f, acc = 0.f;
  for (int t = indptr[b]; t < indptr[b + 1]; ++t) {
    const size_t row = ((size_t)indices[t] * kv_heads + kvh) * HEAD_DIM + d;
    const float s = block_dot(qd * __bfloat162float(k[row]), scratch);
    const float m = fmaxf(running_max, s), rescale = __expf(running_max - m), p = __expf(s - m);
    running_sum = running_sum * rescale + p;
    acc = acc * rescale + p * __bfloat162float(v[row]);
    running_max = m;
  }
  const bool empty = running_sum == 0.f;
  out[(size_t)blockIdx.x * HEAD_DIM + d] = __float2bfloat16(empty ? 0.f : acc / running_sum);
  if (d == 0) lse[blockIdx.x] = empty ? -INFINITY : (running_max + __logf(running_sum)) * 1.4426950408889634f;
}

void gqa_decode(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache, torch::Tensor kv_indptr,
                torch::Tensor kv_indices, double sm_scale, torch::Tensor output, torch::Tensor lse) {
  TORCH_CHECK(q.size(2) == HEAD_DIM, "head_dim 128 only");
  const c10::cuda::CUDAGuard guard(q.device());
  const int batch = q.size(0), heads = q.size(1), kv_heads = k_cache.size(2);
  gqa_decode_rows<<<batch * heads, HEAD_DIM, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const __nv_bfloat16*>(q.data_ptr()), reinterpret_cast<const __nv_bfloat16*>(k_cache.data_ptr()),
      reinterpret_cast<const __nv_bfloat16*>(v_cache.data_ptr()), kv_indptr.data_ptr<int>(),
      kv_indices.data_ptr<int>(), static_cast<float>(sm_scale), heads, kv_heads,
      reinterpret_cast<__nv_bfloat16*>(output.data_ptr()), lse.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
