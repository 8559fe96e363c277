#include "gguf.h"
#include "file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_set>

namespace phasekv {

namespace {

constexpr uint64_t kMaxTensors = 1u << 20;
constexpr uint64_t kMaxKv = 1u << 20;
constexpr int kMaxArrayDepth = 4;
constexpr uint32_t kMaxDims = 4;

const GgmlTypeInfo kGgmlTypes[] = {
    {0, "F32", 1, 4},       {1, "F16", 1, 2},       {2, "Q4_0", 32, 18},    {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},    {7, "Q5_1", 32, 24},    {8, "Q8_0", 32, 34},    {9, "Q8_1", 32, 36},
    {10, "Q2_K", 256, 84},  {11, "Q3_K", 256, 110}, {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210}, {15, "Q8_K", 256, 292}, {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
    {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50}, {20, "IQ4_NL", 32, 18}, {21, "IQ3_S", 256, 110},
    {22, "IQ2_S", 256, 82}, {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},     {25, "I16", 1, 2},
    {26, "I32", 1, 4},      {27, "I64", 1, 8},      {28, "F64", 1, 8},      {29, "IQ1_M", 256, 56},
    {30, "BF16", 1, 2},     {34, "TQ1_0", 256, 54}, {35, "TQ2_0", 256, 66}, {39, "MXFP4", 32, 17},
    {40, "NVFP4", 64, 36},
};

// Bounds-checked little-endian reader over the file image.
class Cursor {
 public:
  Cursor(const uint8_t* data, uint64_t size) : data_(data), size_(size) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  template <typename T>
  Status read(T* out, const char* what) {
    if (remaining() < sizeof(T)) return truncated(what);
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }
  Status read_string(std::string* out, const char* what) {
    uint64_t len = 0;
    PKV_RETURN_IF_ERROR(read(&len, what));
    if (len > remaining())
      return make_error(StatusCode::kInvalidFile, "%s: string length %llu at byte %llu runs past the end of the file",
                        what, (unsigned long long)len, (unsigned long long)(pos_ - 8));
    out->assign(reinterpret_cast<const char*>(data_ + pos_), size_t(len));
    pos_ += len;
    return Status::Ok();
  }
  Status truncated(const char* what) const {
    return make_error(StatusCode::kInvalidFile, "file is truncated: %s at byte %llu (file has %llu bytes)", what,
                      (unsigned long long)pos_, (unsigned long long)size_);
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

uint64_t min_encoded_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: case GgufType::STRING: return 8;
    case GgufType::ARRAY: return 12;
  }
  return 1;
}

Status read_value(Cursor& c, GgufType type, GgufValue* v, const std::string& key, int depth) {
  v->type = type;
  const char* k = key.c_str();
  switch (type) {
    case GgufType::U8: { uint8_t x = 0; PKV_RETURN_IF_ERROR(c.read(&x, k)); v->u = x; return Status::Ok(); }
    case GgufType::I8: { int8_t x = 0; PKV_RETURN_IF_ERROR(c.read(&x, k)); v->i = x; return Status::Ok(); }
    case GgufType::U16: { uint16_t x = 0; PKV_RETURN_IF_ERROR(c.read(&x, k)); v->u = x; return Status::Ok(); }
    case GgufType::I16: { int16_t x = 0; PKV_RETURN_IF_ERROR(c.read(&x, k)); v->i = x; return Status::Ok(); }
    case GgufType::U32: { uint32_t x = 0; PKV_RETURN_IF_ERROR(c.read(&x, k)); v->u = x; return Status::Ok(); }
    case GgufType::I32: { int32_t x = 0; PKV_RETURN_IF_ERROR(c.read(&x, k)); v->i = x; return Status::Ok(); }
    case GgufType::U64: { uint64_t x = 0; PKV_RETURN_IF_ERROR(c.read(&x, k)); v->u = x; return Status::Ok(); }
    case GgufType::I64: { int64_t x = 0; PKV_RETURN_IF_ERROR(c.read(&x, k)); v->i = x; return Status::Ok(); }
    case GgufType::F32: { float x = 0; PKV_RETURN_IF_ERROR(c.read(&x, k)); v->f = x; return Status::Ok(); }
    case GgufType::F64: { double x = 0; PKV_RETURN_IF_ERROR(c.read(&x, k)); v->f = x; return Status::Ok(); }
    case GgufType::BOOL: {
      uint8_t x = 0;
      PKV_RETURN_IF_ERROR(c.read(&x, k));
      if (x > 1)
        return make_error(StatusCode::kInvalidFile, "metadata '%s': bool value %u is neither 0 nor 1", k, x);
      v->u = x;
      return Status::Ok();
    }
    case GgufType::STRING: return c.read_string(&v->s, k);
    case GgufType::ARRAY: {
      if (depth >= kMaxArrayDepth)
        return make_error(StatusCode::kInvalidFile, "metadata '%s': arrays nested deeper than %d", k, kMaxArrayDepth);
      uint32_t et = 0;
      uint64_t n = 0;
      PKV_RETURN_IF_ERROR(c.read(&et, k));
      PKV_RETURN_IF_ERROR(c.read(&n, k));
      if (et > uint32_t(GgufType::F64))
        return make_error(StatusCode::kInvalidFile, "metadata '%s': array element type %u is unknown", k, et);
      v->elem_type = GgufType(et);
      if (n > c.remaining() / min_encoded_size(v->elem_type))
        return make_error(StatusCode::kInvalidFile,
                          "metadata '%s': array of %llu elements cannot fit in the %llu bytes left (truncated or corrupt)", k,
                          (unsigned long long)n, (unsigned long long)c.remaining());
      v->arr.resize(size_t(n));
      for (uint64_t i = 0; i < n; ++i)
        PKV_RETURN_IF_ERROR(read_value(c, v->elem_type, &v->arr[size_t(i)], key, depth + 1));
      return Status::Ok();
    }
  }
  return make_error(StatusCode::kInvalidFile, "metadata '%s': value type %u is unknown", k, unsigned(type));
}

Status wrong_type(const std::string& key, const GgufValue& v, const char* wanted) {
  return make_error(StatusCode::kInvalidFile, "metadata '%s' has type %s; expected %s", display_escape(key).c_str(),
                    gguf_type_name(v.type), wanted);
}

// Integer value of v as int64 range-checked into [lo, hi].
Status as_int(const std::string& key, const GgufValue& v, int64_t lo, int64_t hi, int64_t* out) {
  if (!v.is_integer()) return wrong_type(key, v, "an integer");
  const bool is_unsigned = v.type == GgufType::U8 || v.type == GgufType::U16 || v.type == GgufType::U32 ||
                           v.type == GgufType::U64;
  if (is_unsigned) {
    if (v.u > uint64_t(hi))
      return make_error(StatusCode::kInvalidFile, "metadata '%s' = %llu is out of range", display_escape(key).c_str(),
                        (unsigned long long)v.u);
    *out = int64_t(v.u);
  } else {
    if (v.i < lo || v.i > hi)
      return make_error(StatusCode::kInvalidFile, "metadata '%s' = %lld is out of range", display_escape(key).c_str(),
                        (long long)v.i);
    *out = v.i;
  }
  return Status::Ok();
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::U8: return "u8";
    case GgufType::I8: return "i8";
    case GgufType::U16: return "u16";
    case GgufType::I16: return "i16";
    case GgufType::U32: return "u32";
    case GgufType::I32: return "i32";
    case GgufType::F32: return "f32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::U64: return "u64";
    case GgufType::I64: return "i64";
    case GgufType::F64: return "f64";
  }
  return "unknown";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16: case GgufType::U32:
    case GgufType::I32: case GgufType::U64: case GgufType::I64: return true;
    default: return false;
  }
}

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const GgmlTypeInfo& t : kGgmlTypes)
    if (t.id == id) return &t;
  return nullptr;
}

Status GgufFile::parse() {
  Cursor c(data_, size_);
  char magic[4];
  if (size_ < 4 || std::memcmp(data_, "GGUF", 4) != 0)
    return make_error(StatusCode::kInvalidFile, "not a GGUF file (magic is not \"GGUF\")");
  PKV_RETURN_IF_ERROR(c.read(&magic, "magic"));
  PKV_RETURN_IF_ERROR(c.read(&version_, "version"));
  if (version_ != 2 && version_ != 3) {
    if (version_ == 1)
      return make_error(StatusCode::kUnsupported, "GGUF version 1 is not supported (re-convert to v3)");
    if ((version_ & 0xffff) == 0 && version_ != 0)
      return make_error(StatusCode::kUnsupported, "GGUF file appears to be big-endian (version field %u)", version_);
    return make_error(StatusCode::kUnsupported, "GGUF version %u is not supported (2 and 3 are)", version_);
  }
  uint64_t n_tensors = 0, n_kv = 0;
  PKV_RETURN_IF_ERROR(c.read(&n_tensors, "tensor count"));
  PKV_RETURN_IF_ERROR(c.read(&n_kv, "metadata count"));
  if (n_tensors > kMaxTensors || n_tensors > c.remaining() / 24)
    return make_error(StatusCode::kInvalidFile, "tensor count %llu is implausible for a %llu-byte file (truncated or corrupt)",
                      (unsigned long long)n_tensors, (unsigned long long)size_);
  if (n_kv > kMaxKv || n_kv > c.remaining() / 12)
    return make_error(StatusCode::kInvalidFile, "metadata count %llu is implausible for a %llu-byte file (truncated or corrupt)",
                      (unsigned long long)n_kv, (unsigned long long)size_);

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    PKV_RETURN_IF_ERROR(c.read_string(&key, "metadata key"));
    uint32_t type = 0;
    PKV_RETURN_IF_ERROR(c.read(&type, "metadata type"));
    if (type > uint32_t(GgufType::F64))
      return make_error(StatusCode::kInvalidFile, "metadata '%s': value type %u is unknown", display_escape(key).c_str(), type);
    GgufValue v;
    PKV_RETURN_IF_ERROR(read_value(c, GgufType(type), &v, key, 0));
    if (!kv_.emplace(key, std::move(v)).second)
      return make_error(StatusCode::kInvalidFile, "metadata key '%s' appears twice", display_escape(key).c_str());
  }

  bool found = false;
  uint32_t align = 32;
  PKV_RETURN_IF_ERROR(get_u32("general.alignment", &align, &found));
  if (align == 0 || (align & (align - 1)) != 0 || align > (1u << 20))
    return make_error(StatusCode::kInvalidFile, "metadata 'general.alignment' = %u is not a power of two <= 2^20",
                      align);
  alignment_ = align;

  std::unordered_set<std::string> names;
  tensors_.resize(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor& t = tensors_[size_t(i)];
    PKV_RETURN_IF_ERROR(c.read_string(&t.name, "tensor name"));
    if (!names.insert(t.name).second)
      return make_error(StatusCode::kInvalidFile, "tensor '%s' appears twice", display_escape(t.name).c_str());
    uint32_t n_dims = 0;
    PKV_RETURN_IF_ERROR(c.read(&n_dims, "tensor dimension count"));
    if (n_dims == 0 || n_dims > kMaxDims)
      return make_error(StatusCode::kInvalidFile, "tensor '%s': %u dimensions (1..%u allowed)", display_escape(t.name).c_str(),
                        n_dims, kMaxDims);
    t.ne.resize(n_dims);
    uint64_t elems = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      PKV_RETURN_IF_ERROR(c.read(&t.ne[d], "tensor dimension"));
      if (t.ne[d] == 0 || t.ne[d] > (uint64_t(1) << 40) / elems)
        return make_error(StatusCode::kInvalidFile, "tensor '%s': dimension ne[%u] = %llu is implausible",
                          display_escape(t.name).c_str(), d, (unsigned long long)t.ne[d]);
      elems *= t.ne[d];
    }
    PKV_RETURN_IF_ERROR(c.read(&t.ggml_type, "tensor type"));
    PKV_RETURN_IF_ERROR(c.read(&t.offset, "tensor offset"));
    const GgmlTypeInfo* ti = ggml_type_info(t.ggml_type);
    if (ti && ti->block_elems) {
      if (t.ne[0] % ti->block_elems != 0)
        return make_error(StatusCode::kInvalidFile, "tensor '%s': row length %llu is not a multiple of the %s block (%u)",
                          display_escape(t.name).c_str(), (unsigned long long)t.ne[0], ti->name, ti->block_elems);
      t.nbytes = elems / ti->block_elems * ti->block_bytes;
    }
    if (t.offset % alignment_ != 0)
      return make_error(StatusCode::kInvalidFile, "tensor '%s': offset %llu is not a multiple of the alignment %llu",
                        display_escape(t.name).c_str(), (unsigned long long)t.offset, (unsigned long long)alignment_);
  }

  const uint64_t data_start = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  for (GgufTensor& t : tensors_) {
    if (data_start > size_ || t.offset > size_ - data_start || t.nbytes > size_ - data_start - t.offset)
      return make_error(StatusCode::kInvalidFile,
                        "tensor '%s': data [%llu, %llu) lies past the end of the file (%llu bytes)", display_escape(t.name).c_str(),
                        (unsigned long long)(data_start + t.offset),
                        (unsigned long long)(data_start + t.offset + t.nbytes), (unsigned long long)size_);
    t.data = data_ + data_start + t.offset;
  }
  return Status::Ok();
}

Status GgufFile::from_memory(const uint8_t* data, uint64_t size, std::unique_ptr<GgufFile>* out) {
  std::unique_ptr<GgufFile> g(new GgufFile());
  g->path_ = "<memory>";
  g->data_ = data;
  g->size_ = size;
  PKV_RETURN_IF_ERROR(g->parse());
  *out = std::move(g);
  return Status::Ok();
}

Status GgufFile::open(const std::string& path, std::unique_ptr<GgufFile>* out) {
  int fd = -1;
  uint64_t size = 0;
  PKV_RETURN_IF_ERROR(open_regular_file(path, "GGUF", &fd, &size));
  std::unique_ptr<GgufFile> g(new GgufFile());
  g->path_ = path;
  g->size_ = size;
  if (g->size_ == 0) {
    ::close(fd);
    return make_error(StatusCode::kInvalidFile, "%s: file is empty", display_escape(path).c_str());
  }
  void* p = mmap(nullptr, size_t(g->size_), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED)
    return make_error(StatusCode::kIoError, "cannot map '%s': %s", display_escape(path).c_str(), std::strerror(errno));
  g->data_ = static_cast<const uint8_t*>(p);
  g->mapped_ = true;
  Status s = g->parse();
  if (!s.ok()) return s.with_context(display_escape(path));
  *out = std::move(g);
  return Status::Ok();
}

GgufFile::~GgufFile() {
  if (mapped_ && data_) munmap(const_cast<uint8_t*>(data_), size_t(size_));
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  for (const GgufTensor& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

Status GgufFile::get_u32(const std::string& key, uint32_t* out, bool* found) const {
  const GgufValue* v = find(key);
  *found = v != nullptr;
  if (!v) return Status::Ok();
  int64_t x = 0;
  PKV_RETURN_IF_ERROR(as_int(key, *v, 0, std::numeric_limits<uint32_t>::max(), &x));
  *out = uint32_t(x);
  return Status::Ok();
}

Status GgufFile::get_i32(const std::string& key, int32_t* out, bool* found) const {
  const GgufValue* v = find(key);
  *found = v != nullptr;
  if (!v) return Status::Ok();
  int64_t x = 0;
  PKV_RETURN_IF_ERROR(as_int(key, *v, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), &x));
  *out = int32_t(x);
  return Status::Ok();
}

Status GgufFile::get_f32(const std::string& key, float* out, bool* found) const {
  const GgufValue* v = find(key);
  *found = v != nullptr;
  if (!v) return Status::Ok();
  if (v->type == GgufType::F32 || v->type == GgufType::F64) {
    *out = float(v->f);
  } else if (v->is_integer()) {
    *out = v->type == GgufType::I8 || v->type == GgufType::I16 || v->type == GgufType::I32 || v->type == GgufType::I64
               ? float(v->i)
               : float(v->u);
  } else {
    return wrong_type(key, *v, "a number");
  }
  if (!std::isfinite(*out))
    return make_error(StatusCode::kInvalidFile, "metadata '%s' = %g is not finite", display_escape(key).c_str(), double(*out));
  return Status::Ok();
}

Status GgufFile::get_bool(const std::string& key, bool* out, bool* found) const {
  const GgufValue* v = find(key);
  *found = v != nullptr;
  if (!v) return Status::Ok();
  if (v->type != GgufType::BOOL) return wrong_type(key, *v, "bool");
  *out = v->u != 0;
  return Status::Ok();
}

Status GgufFile::get_string(const std::string& key, std::string* out, bool* found) const {
  const GgufValue* v = find(key);
  *found = v != nullptr;
  if (!v) return Status::Ok();
  if (v->type != GgufType::STRING) return wrong_type(key, *v, "string");
  *out = v->s;
  return Status::Ok();
}

Status GgufFile::get_string_array(const std::string& key, std::vector<std::string>* out, bool* found) const {
  const GgufValue* v = find(key);
  *found = v != nullptr;
  if (!v) return Status::Ok();
  if (v->type != GgufType::ARRAY || v->elem_type != GgufType::STRING)
    return wrong_type(key, *v, "array of strings");
  out->clear();
  out->reserve(v->arr.size());
  for (const GgufValue& e : v->arr) out->push_back(e.s);
  return Status::Ok();
}

Status GgufFile::get_f32_array(const std::string& key, std::vector<float>* out, bool* found) const {
  const GgufValue* v = find(key);
  *found = v != nullptr;
  if (!v) return Status::Ok();
  if (v->type != GgufType::ARRAY || (v->elem_type != GgufType::F32 && v->elem_type != GgufType::F64))
    return wrong_type(key, *v, "array of f32");
  out->clear();
  out->reserve(v->arr.size());
  for (const GgufValue& e : v->arr) out->push_back(float(e.f));
  return Status::Ok();
}

Status GgufFile::get_i32_array(const std::string& key, std::vector<int32_t>* out, bool* found) const {
  const GgufValue* v = find(key);
  *found = v != nullptr;
  if (!v) return Status::Ok();
  if (v->type != GgufType::ARRAY) return wrong_type(key, *v, "array of integers");
  out->clear();
  out->reserve(v->arr.size());
  for (size_t i = 0; i < v->arr.size(); ++i) {
    int64_t x = 0;
    PKV_RETURN_IF_ERROR(as_int(key + "[" + std::to_string(i) + "]", v->arr[i], std::numeric_limits<int32_t>::min(),
                               std::numeric_limits<int32_t>::max(), &x));
    out->push_back(int32_t(x));
  }
  return Status::Ok();
}

}  // namespace phasekv
