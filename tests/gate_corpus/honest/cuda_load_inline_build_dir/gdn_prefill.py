"""GDN prefill: one CUDA block per (sequence, v head, 16 value rows), tokens in order; built with load_inline."""
import os

from torch.utils.cpp_extension import load_inline

_HERE = os.path.dirname(os.path.abspath(__file__))
_BUILD = os.path.join(_HERE, "_build")
os.makedirs(_BUILD, exist_ok=True)

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_bf16.h>


namespace {
constexpr int K = 128;
constexpr int ROWS = 16;


__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__global__ void gdn_prefill_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                   const float* state, const float* A_log, const __nv_bfloat16* a,
                                   const float* dt_bias, const __nv_bfloat16* b, const int64_t* cu_seqlens,
                                   __nv_bfloat16* out, float* new_state, float scale, int HQ, int HV) {
  const int n = blockIdx.x, h = blockIdx.y, hq = h / (HV / HQ);
  const int row = blockIdx.z * ROWS + threadIdx.y, lane = threadIdx.x;
  const int64_t bos = cu_seqlens[n], eos = cu_seqlens[n + 1];
  const size_t s_off = ((static_cast<size_t>(n) * HV + h) * K + row) * K;
  float s[4];
  for (int i = 0; i < 4; ++i) s[i] = state ? state[s_off + lane * 4 + i] : 0.f;
  const float A = __expf(A_log[h]);
  for (int64_t t = bos; t < eos; ++t) {
    const float x = __bfloat162float(a[t * HV + h]) + dt_bias[h];
    const float sp = x > 20.f ? x : log1pf(__expf(x));
    const float g = __expf(-A * sp);
    const float beta = 1.f / (1.f + __expf(-__bfloat162float(b[t * HV + h])));
    float kk[4], qq[4], kv = 0.f;
    for (int i = 0; i < 4; ++i) {
      kk[i] = __bfloat162float(k[(t * HQ + hq) * K + lane * 4 + i]);
      qq[i] = __bfloat162float(q[(t * HQ + hq) * K + lane * 4 + i]);
      s[i] *= g;
      kv += s[i] * kk[i];
    }
    kv = warp_sum(kv);
    const float d = beta * (__bfloat162float(v[(t * HV + h) * K + row]) - kv);
    float o = 0.f;
    for (int i = 0; i < 4; ++i) { s[i] += d * kk[i]; o += s[i] * qq[i]; }
    o = warp_sum(o);
    if (lane == 0) out[(t * HV + h) * K + row] = __float2bfloat16(o * scale);
  }
  for (int i = 0; i < 4; ++i) new_state[s_off + lane * 4 + i] = s[i];
}
}  // namespace

void gdn_prefill(torch::Tensor q, torch::Tensor k, torch::Tensor v, c10::optional<torch::Tensor> state,
                 torch::Tensor A_log, torch::Tensor a, torch::Tensor dt_bias, torch::Tensor b, torch::Tensor cu_seqlens,
                 double scale, torch::Tensor out, torch::Tensor new_state) {
  const int N = cu_seqlens.size(0) - 1, HQ = q.size(1), HV = v.size(1);
  if (N == 0) return;
  dim3 grid(N, HV, K / ROWS), block(32, ROWS);
  gdn_prefill_kernel<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const __nv_bfloat16*>(q.data_ptr()), reinterpret_cast<const __nv_bfloat16*>(k.data_ptr()),
      reinterpret_cast<const __nv_bfloat16*>(v.data_ptr()), state ? state->data_ptr<float>() : nullptr,
      A_log.data_ptr<float>(), reinterpret_cast<const __nv_bfloat16*>(a.data_ptr()), dt_bias.data_ptr<float>(),
      reinterpret_cast<const __nv_bfloat16*>(b.data_ptr()), cu_seqlens.data_ptr<int64_t>(),
      reinterpret_cast<__nv_bfloat16*>(out.data_ptr()), new_state.data_ptr<float>(), static_cast<float>(scale), HQ, HV);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP = ("void gdn_prefill(torch::Tensor q, torch::Tensor k, torch::Tensor v, c10::optional<torch::Tensor> state, "
        "torch::Tensor A_log, torch::Tensor a, torch::Tensor dt_bias, torch::Tensor b, torch::Tensor cu_seqlens, "
        "double scale, torch::Tensor out, torch::Tensor new_state);")

_ext = load_inline(name="gdn_prefill_ext", cpp_sources=_CPP, cuda_sources=_CUDA, functions=["gdn_prefill"],
                   extra_cuda_cflags=["-O3", "--use_fast_math", "-lineinfo"], build_directory=_BUILD, verbose=False)


def run(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale, output, new_state):
    if not scale:
        scale = q.shape[-1] ** -0.5
    _ext.gdn_prefill(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, float(scale), output, new_state)
