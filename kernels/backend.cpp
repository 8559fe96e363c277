#include "backend.h"

namespace phasekv {

const char* backend_op_name(BackendOp op) {
  switch (op) {
    case BackendOp::Embed: return "embed";
    case BackendOp::RmsNorm: return "rmsnorm";
    case BackendOp::Matmul: return "matmul";
    case BackendOp::Rope: return "rope";
    case BackendOp::Attention: return "attention";
    case BackendOp::Compress: return "compress";
    case BackendOp::CompressReset: return "compress_reset";
    case BackendOp::SiluMul: return "silu_mul";
    case BackendOp::Add: return "add";
    case BackendOp::Copy: return "copy";
    case BackendOp::RingWrite: return "ring_write";
    case BackendOp::GoldScore: return "gold_score";
  }
  return "unknown op";
}

const char* memory_space_name(MemorySpace s) {
  switch (s) {
    case MemorySpace::Host: return "host";
    case MemorySpace::PinnedHost: return "pinned host";
    case MemorySpace::Device: return "device";
  }
  return "unknown space";
}

const void* WeightMapping::translate(const void* host) const {
  if (!host) return nullptr;
  const uint8_t* p = static_cast<const uint8_t*>(host);
  for (const Region& r : regions_)
    if (p >= r.host && p < r.host + r.bytes) return r.mapped + (p - r.host);
  return nullptr;
}

Status WeightMapping::view(const WeightView& host, bool /*matmul_only*/, WeightView* out) const {
  *out = host;
  out->data = translate(host.data);
  return Status::Ok();
}

}  // namespace phasekv
