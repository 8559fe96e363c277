#include "safetensors.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "file_io.h"

namespace phasekv {

namespace {

constexpr uint64_t kMaxHeader = 100ull << 20;

bool compressor_name(const std::string& n) {
  // blk.N.<suffix>, N a decimal layer number without leading zeros.
  if (n.compare(0, 4, "blk.") != 0) return false;
  size_t i = 4;
  while (i < n.size() && i < 11 && n[i] >= '0' && n[i] <= '9') ++i;
  if (i == 4 || i >= n.size() || n[i] != '.' || (n[4] == '0' && i > 5)) return false;
  const std::string suffix = n.substr(i + 1);
  for (const char* ok : {"cmp_k_gate.bias", "cmp_v_gate.bias", "cmp_k_gate.weight", "cmp_v_gate.weight",
                         "cmp_k.weight", "cmp_v.weight", "cmp_k_norm.weight", "attn_sink"})
    if (suffix == ok) return true;
  return false;
}

}  // namespace

Status read_safetensors(const std::string& path, std::vector<ExtraTensor>* out) {
  const std::string shown = display_escape(path);
  int fd = -1;
  uint64_t file_size = 0;
  PKV_RETURN_IF_ERROR(open_regular_file(path, "gates file", &fd, &file_size));
  std::unique_ptr<FILE, int (*)(FILE*)> f(fdopen(fd, "rb"), &std::fclose);
  if (!f) {
    ::close(fd);
    return make_error(StatusCode::kIoError, "cannot open gates file '%s': %s", display_escape(path).c_str(),
                      std::strerror(errno));
  }
  if (std::fseek(f.get(), 0, SEEK_END) != 0) return make_error(StatusCode::kIoError, "%s: cannot seek", shown.c_str());
  const long size_l = std::ftell(f.get());
  if (size_l < 0) return make_error(StatusCode::kIoError, "%s: cannot tell its size", shown.c_str());
  const uint64_t size = uint64_t(size_l);
  std::rewind(f.get());
  uint8_t len_bytes[8];
  if (size < 8 || std::fread(len_bytes, 1, 8, f.get()) != 8)
    return make_error(StatusCode::kInvalidFile, "%s: %llu bytes is too short for a safetensors file", shown.c_str(),
                      (unsigned long long)size);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n == 0 || n > kMaxHeader || n > size - 8)
    return make_error(StatusCode::kInvalidFile, "%s: header length %llu does not fit the file (%llu bytes)",
                      shown.c_str(), (unsigned long long)n, (unsigned long long)size);
  std::string header(size_t(n), '\0');
  if (std::fread(&header[0], 1, size_t(n), f.get()) != n)
    return make_error(StatusCode::kIoError, "%s: cannot read the header", shown.c_str());
  const uint64_t data_size = size - 8 - n;
  nlohmann::json j = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return make_error(StatusCode::kInvalidFile, "%s: the header is not a JSON object", shown.c_str());
  std::vector<ExtraTensor> tensors;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") continue;
    const std::string name_shown = display_escape(name);
    const char* nm = name_shown.c_str();
    const nlohmann::json& e = it.value();
    if (!compressor_name(name))
      return make_error(StatusCode::kInvalidArgument,
                        "%s: tensor '%s' is not a compressor tensor (blk.N.cmp_k_gate.bias, cmp_v_gate.bias, "
                        "cmp_k_gate.weight, cmp_v_gate.weight, cmp_k.weight, cmp_v.weight, cmp_k_norm.weight, "
                        "attn_sink)",
                        shown.c_str(), nm);
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      return make_error(StatusCode::kInvalidFile, "%s: tensor '%s' needs dtype, shape and data_offsets",
                        shown.c_str(), nm);
    ExtraTensor t;
    t.name = name;
    const nlohmann::json& dt = e["dtype"];
    if (!dt.is_string()) return make_error(StatusCode::kInvalidFile, "%s: tensor '%s': dtype is not a string", shown.c_str(), nm);
    const std::string d = dt.get<std::string>();
    if (d == "F32") t.dtype = DType::F32;
    else if (d == "F16") t.dtype = DType::F16;
    else if (d == "BF16") t.dtype = DType::BF16;
    else
      return make_error(StatusCode::kInvalidArgument, "%s: tensor '%s' has dtype '%s' (F32, F16 or BF16 expected)",
                        shown.c_str(), nm, display_escape(d).c_str());
    const nlohmann::json& sh = e["shape"];
    if (!sh.is_array() || sh.empty() || sh.size() > 3)
      return make_error(StatusCode::kInvalidFile, "%s: tensor '%s': shape must be a list of 1 to 3 sizes",
                        shown.c_str(), nm);
    for (const auto& v : sh) {
      if (!v.is_number_unsigned() || v.get<uint64_t>() == 0 || v.get<uint64_t>() > (1ull << 32))
        return make_error(StatusCode::kInvalidFile, "%s: tensor '%s': shape entry %s is not a size in [1, 2^32]",
                          shown.c_str(), nm, v.dump().c_str());
      t.shape.push_back(v.get<uint64_t>());
    }
    const nlohmann::json& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      return make_error(StatusCode::kInvalidFile, "%s: tensor '%s': data_offsets must be [begin, end]", shown.c_str(),
                        nm);
    const uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
    uint64_t need = 0;
    Status st = tensor_byte_size(t.dtype, t.shape, &need);
    if (!st.ok()) return st.with_context(path + ": tensor '" + name + "'");
    if (b > en || en > data_size || en - b != need)
      return make_error(StatusCode::kInvalidFile,
                        "%s: tensor '%s': data_offsets [%llu, %llu) do not hold %llu bytes inside the %llu-byte data",
                        shown.c_str(), nm, (unsigned long long)b, (unsigned long long)en, (unsigned long long)need,
                        (unsigned long long)data_size);
    t.bytes.resize(size_t(need));
    if (std::fseek(f.get(), long(8 + n + b), SEEK_SET) != 0 ||
        std::fread(t.bytes.data(), 1, t.bytes.size(), f.get()) != t.bytes.size())
      return make_error(StatusCode::kIoError, "%s: cannot read tensor '%s'", shown.c_str(), nm);
    const uint64_t count = t.bytes.size() / dtype_info(uint8_t(t.dtype))->block_bytes;
    std::vector<float> vals(static_cast<size_t>(count));
    dequantize_row(t.dtype, t.bytes.data(), vals.data(), int64_t(count));
    for (uint64_t i = 0; i < count; ++i)
      if (!std::isfinite(vals[i]))
        return make_error(StatusCode::kInvalidArgument, "%s: tensor '%s' element %llu is %s", shown.c_str(), nm,
                          (unsigned long long)i, std::isnan(vals[i]) ? "NaN" : "infinite");
    tensors.push_back(std::move(t));
  }
  if (tensors.empty()) return make_error(StatusCode::kInvalidArgument, "%s: no tensors", shown.c_str());
  *out = std::move(tensors);
  return Status::Ok();
}

}  // namespace phasekv
