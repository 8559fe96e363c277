// Plain C++ mirror of the model-file metadata (phasekv.fbs). The reader fills a ModelSpec
// from the FlatBuffer after verification; the writer serialises one. Field meanings are
// documented in phasekv.fbs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtype.h"

namespace phasekv {

enum class RopeStyle : uint8_t { Interleaved = 0, NeoX = 1 };
enum class RopeScaling : uint8_t { None = 0, Linear = 1, YaRN = 2, Llama3 = 3 };
enum class MemoryKind : uint8_t { Full = 0, Sliding = 1, Compressed = 2 };
enum class GateKind : uint8_t { Uniform = 0, Scalar = 1, Vector = 2 };
enum class MapSharing : uint8_t { Shared = 0, PerOffset = 1 };
enum class PayloadSource : uint8_t { LayerProjection = 0, CompressorMap = 1 };
enum class EntryRope : uint8_t { RotateTokens = 0, RotateEntry = 1 };
enum class Selection : uint8_t { AllEntries = 0, IndexerTopK = 1 };
enum class TokenizerType : uint8_t { None = 0, ByteLevelBPE = 1, SentencePiece = 2 };

const char* memory_kind_name(MemoryKind k);
const char* gate_kind_name(GateKind g);
const char* tokenizer_type_name(TokenizerType t);

struct RopeParams {
  float theta = 10000.0f;
  uint32_t dim = 0;  // channels rotated per head
  RopeStyle style = RopeStyle::Interleaved;
  RopeScaling scaling = RopeScaling::None;
  float factor = 1.0f;
  uint32_t original_context = 0;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  bool operator==(const RopeParams& o) const;
};

struct ModelConfig {
  std::string architecture = "llama";
  uint32_t vocab_size = 0;
  uint32_t d_model = 0;
  uint32_t n_layers = 0;
  uint32_t n_heads = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t ffn_dim = 0;
  float norm_eps = 1e-5f;
  RopeParams rope;
  uint32_t max_positions = 0;
  bool tied_embeddings = false;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t pad_id = -1;
  bool attn_bias = false;  // q/k/v biases (qwen2)
  bool qk_norm = false;    // per-head RMSNorm of q and k before RoPE (qwen3)
  bool operator==(const ModelConfig& o) const;
};

// One layer's attention memory (DESIGN.md section 3).
struct AttentionMemory {
  MemoryKind kind = MemoryKind::Full;
  uint32_t window = 0;  // W
  uint32_t stride = 0;  // S
  uint32_t local = 0;   // L
  GateKind gate = GateKind::Uniform;
  MapSharing gate_maps = MapSharing::Shared;
  PayloadSource payload = PayloadSource::LayerProjection;
  MapSharing payload_maps = MapSharing::Shared;
  bool kv_tied = false;
  EntryRope entry_rope = EntryRope::RotateTokens;
  bool entry_norm = false;
  bool sink = false;
  bool gap_accepted = false;
  Selection selection = Selection::AllEntries;
  uint32_t top_k = 0;
  bool operator==(const AttentionMemory& o) const;
  // "full", "sliding:L=512", "compressed:W=8,S=4,L=64,gate=uniform"
  std::string describe() const;
};

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<uint64_t> shape;  // outermost first; last dimension contiguous
  uint64_t offset = 0;          // from the start of the blob
  uint64_t size = 0;            // bytes
  bool operator==(const TensorInfo& o) const;
  uint64_t elements() const;
};

struct TokenizerData {
  TokenizerType type = TokenizerType::None;
  std::string model;
  std::string pre;
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> token_types;
  std::vector<std::string> merges;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t eot_id = -1;
  int32_t pad_id = -1;
  int32_t unk_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;
  bool operator==(const TokenizerData& o) const;
};

struct Provenance {
  std::string source_file;
  std::string source_format;
  std::string source_name;
  std::string converter;
  bool operator==(const Provenance& o) const;
};

// The tensor blob's content hash (schema table Integrity).
enum class HashAlgorithm : uint8_t { None = 0, XXH3_128 = 1 };
struct BlobHash {
  HashAlgorithm algorithm = HashAlgorithm::None;
  std::vector<uint8_t> digest;  // XXH3_128: 16 bytes, canonical (big-endian) order
  bool present() const { return algorithm != HashAlgorithm::None; }
  std::string hex() const;  // the digest in lower-case hex
};

struct ModelSpec {
  ModelConfig config;
  std::vector<AttentionMemory> layers;  // one per layer
  std::vector<TensorInfo> tensors;
  TokenizerData tokenizer;
  std::string chat_template;
  Provenance provenance;
  BlobHash blob_hash;  // set by write_model_file; absent in older files

  const TensorInfo* find_tensor(const std::string& name) const;
};

// The tensors a Llama-family config implies, with their shapes (outermost first).
struct ExpectedTensor {
  std::string name;
  std::vector<uint64_t> shape;
};
std::vector<ExpectedTensor> llama_expected_tensors(const ModelConfig& c);

// The tensors one layer's attention memory reads (compressor gates and payload maps, the
// entry norm, the sink), per DESIGN.md section 3. Names, for layer N and branch b in {k, v}
// (G = n_kv_heads x d_g, d_g = 1 for a scalar gate and head_dim for a vector gate):
//   blk.N.cmp_b_gate.bias    [W, G]          F32   gate bias b_i per offset
//   blk.N.cmp_b_gate.weight  [G, d_model]          gate map Z, shared (optional: absent = 0)
//                            [W, G, d_model]       one map per offset (gate_maps = per-offset)
//   blk.N.cmp_b.weight       [kvd, d_model]        payload map C (payload = compressor map)
//                            [W, kvd, d_model]     one map per offset (payload_maps = per-offset)
//   blk.N.cmp_k_norm.weight  [head_dim]      F32   entry RMSNorm of pooled keys (entry_norm)
//   blk.N.attn_sink          [n_heads]       F32   sink logit per query head (sink, any kind)
struct CompressorTensor {
  std::string name;
  std::vector<uint64_t> shape;
  bool required = true;
  bool f32_only = false;  // otherwise any matmul dtype
};
std::vector<CompressorTensor> compressor_tensors(const ModelConfig& c, const AttentionMemory& m, uint32_t layer);

// Semantic validation of a spec against a blob of `blob_size` bytes: hyper-parameters,
// per-layer memory descriptors, tensor placement (inside the blob, 64-byte aligned, no
// overlap), byte sizes, required tensors and shapes, tokenizer consistency. The message
// names the field and the value at fault.
Status validate_spec(const ModelSpec& spec, uint64_t blob_size);
// Only the per-layer descriptor (used by the converter for --kv before writing).
Status validate_memory(const AttentionMemory& m, uint32_t layer);

constexpr uint64_t kTensorAlign = 64;

}  // namespace phasekv
