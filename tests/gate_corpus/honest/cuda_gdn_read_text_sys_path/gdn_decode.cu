// GDN decode, k-last state [B, HV, V, K]: one thread per value row v of one (batch, value head); the thread keeps
// its row of the state (K = 128 floats) in registers, applies the gate and the delta rule, and writes its output.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>
#include <torch/extension.h>

constexpr int kK = 128;
constexpr int kV = 128;

template <int kThreads>
__global__ void __launch_bounds__(kThreads)
gdn_decode_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                  const __nv_bfloat16* __restrict__ v, const float* __restrict__ state, const float* __restrict__ a_log,
                  const __nv_bfloat16* __restrict__ a, const float* __restrict__ dt_bias,
                  const __nv_bfloat16* __restrict__ b, float scale, __nv_bfloat16* __restrict__ out,
                  float* __restrict__ new_state, int hv_heads, int qk_heads) {
  __shared__ float qs[kK], ks[kK];
  const int bh = blockIdx.x, batch = bh / hv_heads, hv = bh % hv_heads;
  const int hk = hv / (hv_heads / qk_heads);
  for (int i = threadIdx.x; i < kK; i += kThreads) {
    qs[i] = __bfloat162float(q[(batch * qk_heads + hk) * kK + i]);
    ks[i] = __bfloat162float(k[(batch * qk_heads + hk) * kK + i]);
  }
  __syncthreads();
  const float x = __bfloat162float(a[bh]) + dt_bias[hv];
  const float softplus = x > 20.f ? x : log1pf(expf(x));
  const float g = expf(-expf(a_log[hv]) * softplus);
  const float beta = 1.f / (1.f + expf(-__bfloat162float(b[bh])));
  for (int row = blockIdx.y * kThreads + threadIdx.x; row < kV; row += gridDim.y * kThreads) {
    const float* s_in = state + (static_cast<size_t>(bh) * kV + row) * kK;
    float* s_out = new_state + (static_cast<size_t>(bh) * kV + row) * kK;
    float h[kK];
    float kh = 0.f;
#pragma unroll
    for (int i = 0; i < kK; ++i) {
      h[i] = s_in[i] * g;
      kh += h[i] * ks[i];
    }
    const float delta = beta * (__bfloat162float(v[static_cast<size_t>(bh) * kV + row]) - kh);
    float o = 0.f;
#pragma unroll
    for (int i = 0; i < kK; ++i) {
      h[i] += delta * ks[i];
      o += h[i] * qs[i];
      s_out[i] = h[i];
    }
    out[static_cast<size_t>(bh) * kV + row] = __float2bfloat16(o * scale);
  }
}

void gdn_decode(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor state, torch::Tensor A_log,
                torch::Tensor a, torch::Tensor dt_bias, torch::Tensor b, double scale, torch::Tensor output,
                torch::Tensor new_state, int64_t threads) {
  TORCH_CHECK(q.is_cuda() && q.size(-1) == kK, "CUDA q with head size 128");
  TORCH_CHECK(state.is_contiguous() && new_state.is_contiguous(), "contiguous states");
  const c10::cuda::CUDAGuard guard(q.device());
  const int batch = q.size(0), qk_heads = q.size(2), hv_heads = v.size(2);
  auto stream = at::cuda::getCurrentCUDAStream();
  auto bf = [](const torch::Tensor& t) { return reinterpret_cast<const __nv_bfloat16*>(t.data_ptr()); };
  auto launch = [&](auto threads_c) {
    constexpr int kThreads = decltype(threads_c)::value;
    const dim3 grid(batch * hv_heads, kV / kThreads);
    gdn_decode_kernel<kThreads><<<grid, kThreads, 0, stream>>>(
        bf(q), bf(k), bf(v), state.data_ptr<float>(), A_log.data_ptr<float>(), bf(a), dt_bias.data_ptr<float>(),
        bf(b), static_cast<float>(scale), reinterpret_cast<__nv_bfloat16*>(output.data_ptr()),
        new_state.data_ptr<float>(), hv_heads, qk_heads);
  };
  if (threads == 64) launch(std::integral_constant<int, 64>{});
  else launch(std::integral_constant<int, 128>{});
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
