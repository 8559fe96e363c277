// Embedding example: open a .pkv model in place (mmap, verified), look at one tensor and
// print the memory a 4K context would need. Usage: example_load_model MODEL.pkv
#include <cstdio>
#include <memory>
#include <vector>

#include "memory_plan.h"
#include "model_file.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MODEL.pkv\n", argv[0]);
    return 2;
  }
  std::unique_ptr<phasekv::ModelFile> model;
  phasekv::Status s = phasekv::ModelFile::open(argv[1], &model);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
    return 2;
  }
  const phasekv::ModelSpec& spec = model->spec();
  const phasekv::TensorInfo* norm = model->find_tensor("output_norm.weight");
  std::vector<float> w(norm->elements());
  phasekv::dequantize_row(norm->dtype, model->tensor_data(*norm), w.data(), int64_t(w.size()));
  std::printf("%s: %u layers, d_model %u; output_norm.weight[0..3] = %g %g %g %g\n", argv[1],
              spec.config.n_layers, spec.config.d_model, double(w[0]), double(w[1]), double(w[2]), double(w[3]));
  phasekv::MemoryPlan plan;
  const uint32_t ctx = spec.config.max_positions < 4096 ? spec.config.max_positions : 4096;
  s = phasekv::plan_memory(spec, model->header().blob_size, ctx, &plan);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
    return 2;
  }
  std::printf("n_ctx %u: weights %llu bytes (mapped), KV %llu bytes\n", ctx,
              (unsigned long long)plan.weights_bytes, (unsigned long long)plan.kv_bytes_total);
  return 0;
}
