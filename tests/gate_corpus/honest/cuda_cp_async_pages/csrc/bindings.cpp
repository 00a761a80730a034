#include <torch/extension.h>

void gqa_decode_ps64(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                     const at::Tensor& kv_indptr, const at::Tensor& kv_indices, const at::Tensor& last_page_len,
                     double sm_scale, at::Tensor& output, at::Tensor& lse);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("decode", &gqa_decode_ps64, "GQA paged decode, page size 64 (cp.async staged)");
}
