// A GGUF (v2/v3) reader of our own: maps the file, parses metadata and tensor records with
// every length and offset bounds-checked, and hands out pointers to tensor bytes in place.
// Only what PhaseKV imports is interpreted; unknown keys are kept, unknown tensor types are
// recorded by id (the importer names them in its error).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "status.h"

namespace phasekv {

enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
const char* gguf_type_name(GgufType t);

struct GgufValue {
  GgufType type = GgufType::U8;
  uint64_t u = 0;   // unsigned integers and bool
  int64_t i = 0;    // signed integers
  double f = 0.0;   // F32 / F64
  std::string s;    // STRING
  GgufType elem_type = GgufType::U8;  // ARRAY
  std::vector<GgufValue> arr;         // ARRAY

  bool is_integer() const;
};

// ggml tensor type ids as they appear in GGUF files.
struct GgmlTypeInfo {
  uint32_t id;
  const char* name;
  uint32_t block_elems;  // 0 when the layout is not known to this reader
  uint32_t block_bytes;
};
const GgmlTypeInfo* ggml_type_info(uint32_t id);  // nullptr for ids this reader has never heard of

struct GgufTensor {
  std::string name;
  uint32_t ggml_type = 0;
  std::vector<uint64_t> ne;  // GGUF order: ne[0] is the contiguous dimension
  uint64_t offset = 0;       // from the start of the data section
  uint64_t nbytes = 0;       // 0 when the type's layout is unknown
  const uint8_t* data = nullptr;
};

class GgufFile {
 public:
  static Status open(const std::string& path, std::unique_ptr<GgufFile>* out);
  // Parses an image in memory (not copied; must outlive the GgufFile).
  static Status from_memory(const uint8_t* data, uint64_t size, std::unique_ptr<GgufFile>* out);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }
  const std::string& path() const { return path_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }

  const GgufValue* find(const std::string& key) const;
  const GgufTensor* find_tensor(const std::string& name) const;

  // Typed getters: absent key -> *found = false and OK; wrong type or out of range -> error
  // naming the key. Integer getters accept any integer type whose value fits.
  Status get_u32(const std::string& key, uint32_t* out, bool* found) const;
  Status get_i32(const std::string& key, int32_t* out, bool* found) const;
  Status get_f32(const std::string& key, float* out, bool* found) const;
  Status get_bool(const std::string& key, bool* out, bool* found) const;
  Status get_string(const std::string& key, std::string* out, bool* found) const;
  Status get_string_array(const std::string& key, std::vector<std::string>* out, bool* found) const;
  Status get_f32_array(const std::string& key, std::vector<float>* out, bool* found) const;
  Status get_i32_array(const std::string& key, std::vector<int32_t>* out, bool* found) const;

 private:
  GgufFile() = default;
  Status parse();

  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  bool mapped_ = false;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensor> tensors_;
};

}  // namespace phasekv
