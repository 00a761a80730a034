// Schemas of the grouped MoE ops; the CUDA implementations are registered in grouped_gemm.cu.
#include <torch/library.h>

TORCH_LIBRARY(moe_fp8, m) {
  m.def("gemm1_swiglu(Tensor x, Tensor x_scale, Tensor w1, Tensor w1_scale, Tensor order, Tensor offsets, "
        "Tensor(a!) act, int top_k) -> ()");
  m.def("gemm2_combine(Tensor act, Tensor w2, Tensor w2_scale, Tensor order, Tensor offsets, Tensor weights, "
        "Tensor(a!) acc, int top_k) -> ()");
  m.def("to_bf16(Tensor acc, Tensor(a!) out) -> ()");
}
