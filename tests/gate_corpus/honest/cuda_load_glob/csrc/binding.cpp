#include <torch/extension.h>

void gqa_decode(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache, torch::Tensor kv_indptr,
                torch::Tensor kv_indices, double sm_scale, torch::Tensor output, torch::Tensor lse);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("gqa_decode", &gqa_decode, "GQA paged decode (bf16, page_size 1)");
}
