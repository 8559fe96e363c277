// libFuzzer target: the GGUF reader and the GGUF -> PhaseKV import (what `phasekv convert`
// runs), plus the tokenizer built from an imported vocabulary.
//
// Input: the bytes of a GGUF file. Invariants (docs/FUZZING.md):
//   * GgufFile::from_memory either succeeds or returns an error status with a message (never
//     kInternal) and leaves its output empty;
//   * a parsed file is consistent: version 2 or 3, a power-of-two alignment, every tensor's
//     bytes inside the input at an aligned offset;
//   * the typed getters never fail on a present key except with an error naming it, and an
//     absent key is reported as not found;
//   * import_gguf gives one data pointer per tensor; when the imported spec validates,
//     convert_gguf_to_pkv on the same bytes succeeds, the written .pkv opens, and it holds
//     the same spec and bit-identical tensor bytes;
//   * the imported vocabulary either builds a tokenizer or is refused with a status; a built
//     one encodes and decodes within its vocabulary;
//   * --kv specs applied on top of an imported model (planted gates included) either apply
//     or are refused with a status.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "gguf.h"
#include "gguf_import.h"
#include "model_file.h"
#include "tokenizer.h"

using namespace phasekv;
using namespace phasekv::fuzz;

namespace {

std::string as_file(const uint8_t* data, size_t size) { return input_as_file("fuzz_gguf", data, size); }

void check_getters(const GgufFile& g) {
  for (const auto& kv : g.metadata()) {
    const std::string& key = kv.first;
    bool found = false;
    uint32_t u32 = 0;
    int32_t i32 = 0;
    float f = 0;
    bool bl = false;
    std::string str;
    std::vector<std::string> strs;
    std::vector<float> fs;
    std::vector<int32_t> is;
    const Status st[] = {g.get_u32(key, &u32, &found),       g.get_i32(key, &i32, &found),
                         g.get_f32(key, &f, &found),         g.get_bool(key, &bl, &found),
                         g.get_string(key, &str, &found),    g.get_string_array(key, &strs, &found),
                         g.get_f32_array(key, &fs, &found),  g.get_i32_array(key, &is, &found)};
    FUZZ_CHECK(found, "key '%s' is in metadata() but a getter did not find it", key.c_str());
    for (const Status& s : st)
      if (!s.ok()) check_error(s, "GgufFile getter");
    const GgufValue& v = kv.second;
    if (st[0].ok()) FUZZ_CHECK(v.is_integer(), "get_u32 accepted a %s", gguf_type_name(v.type));
    if (st[2].ok()) FUZZ_CHECK(f == f && f - f == 0.0f, "get_f32 returned a non-finite value");
    if (st[4].ok()) FUZZ_CHECK(str == v.s, "get_string changed the value");
    if (st[5].ok()) FUZZ_CHECK(strs.size() == v.arr.size(), "get_string_array lost elements");
  }
  const std::string absent = "fuzz.absent";
  if (!g.find(absent)) {
    bool found = true;
    uint32_t u = 0;
    Status s = g.get_u32(absent, &u, &found);
    FUZZ_CHECK(s.ok() && !found, "an absent key was found");
  }
}

void check_tokenizer(const TokenizerData& d) {
  if (d.type == TokenizerType::None) return;
  std::unique_ptr<Tokenizer> tok;
  Status s = Tokenizer::create(d, &tok);
  if (!s.ok()) {
    check_error(s, "Tokenizer::create");
    return;
  }
  const int32_t n = tok->n_tokens();
  FUZZ_CHECK(n == int32_t(d.tokens.size()), "tokenizer has %d tokens for %zu", n, d.tokens.size());
  for (const char* text : {"Hello world 123", "caf\xC3\xA9 \xF0\x9F\x9A\x80\n", "<|im_start|>x<|im_end|>"}) {
    std::vector<int32_t> ids;
    s = tok->encode(text, true, &ids);
    if (!s.ok()) {
      check_error(s, "Tokenizer::encode");
      FUZZ_CHECK(ids.empty(), "a failed encode wrote tokens");
      continue;
    }
    for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < n, "encode gave id %d outside [0, %d)", id, n);
    std::string back;
    FUZZ_CHECK(tok->decode(ids, &back).ok(), "decode of encoded ids failed");
  }
  std::vector<int32_t> all;
  for (int32_t id = 0; id < n && id < 1024; ++id) all.push_back(id);
  std::string text;
  FUZZ_CHECK(tok->decode(all, &text).ok(), "decoding every token failed");
  all.push_back(n);
  check_error(tok->decode(all, &text), "decode with an id past the vocabulary");
}

bool same_tokenizer(const TokenizerData& x, const TokenizerData& y) {
  // Scores compared bit for bit: a NaN score must survive the round trip too.
  return x.type == y.type && x.model == y.model && x.pre == y.pre && x.tokens == y.tokens &&
         x.scores.size() == y.scores.size() &&
         (x.scores.empty() || std::memcmp(x.scores.data(), y.scores.data(), x.scores.size() * sizeof(float)) == 0) &&
         x.token_types == y.token_types && x.merges == y.merges && x.bos_id == y.bos_id && x.eos_id == y.eos_id &&
         x.eot_id == y.eot_id && x.pad_id == y.pad_id && x.unk_id == y.unk_id && x.add_bos == y.add_bos &&
         x.add_eos == y.add_eos && x.add_space_prefix == y.add_space_prefix;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<GgufFile> g;
  Status s = GgufFile::from_memory(data, size, &g);
  if (!s.ok()) {
    check_error(s, "GgufFile::from_memory");
    FUZZ_CHECK(!g, "a failed parse filled its output");
    return 0;
  }
  FUZZ_CHECK(g->version() == 2 || g->version() == 3, "version %u accepted", g->version());
  const uint64_t align = g->alignment();
  FUZZ_CHECK(align && (align & (align - 1)) == 0, "alignment %llu accepted", (unsigned long long)align);
  for (const GgufTensor& t : g->tensors()) {
    FUZZ_CHECK(t.data >= data && t.data <= data + size && t.nbytes <= uint64_t(data + size - t.data),
               "tensor '%s' [%p, +%llu) is outside the input", t.name.c_str(), (const void*)t.data,
               (unsigned long long)t.nbytes);
    FUZZ_CHECK(t.offset % align == 0, "tensor '%s' offset not aligned", t.name.c_str());
    FUZZ_CHECK(!t.ne.empty() && t.ne.size() <= 4, "tensor '%s' has %zu dims", t.name.c_str(), t.ne.size());
    FUZZ_CHECK(g->find_tensor(t.name) == &t, "find_tensor('%s') finds another tensor", t.name.c_str());
  }
  check_getters(*g);

  ModelSpec spec;
  std::vector<const void*> ptrs;
  std::vector<std::vector<float>> owned;
  s = import_gguf(*g, ImportOptions(), &spec, &ptrs, &owned);
  if (!s.ok()) {
    check_error(s, "import_gguf");
    return 0;
  }
  FUZZ_CHECK(ptrs.size() == spec.tensors.size(), "%zu pointers for %zu tensors", ptrs.size(), spec.tensors.size());
  FUZZ_CHECK(spec.layers.size() == spec.config.n_layers, "layers vs n_layers");
  check_tokenizer(spec.tokenizer);

  // --kv on top of the import (only once the plain import worked: each spec re-imports).
  static const std::vector<std::vector<std::string>> kKvSpecs = {
      {"compressed:W=4,S=2,gate=planted:K=1,V=3"},
      {"0:sliding:L=8", "1-1:compressed:W=8,S=4,L=3,gap=1,gate=planted:weak=2,5,strength=20"},
      {"all:compressed:W=2,S=2,L=1,gate=uniform,rope=entry"},
  };
  for (const auto& kv : kKvSpecs) {
    ImportOptions o;
    o.kv_specs = kv;
    ModelSpec ks;
    std::vector<const void*> kp;
    std::vector<std::vector<float>> ko;
    Status st = import_gguf(*g, o, &ks, &kp, &ko);
    if (!st.ok()) {
      check_error(st, "import_gguf with --kv");
      continue;
    }
    FUZZ_CHECK(kp.size() == ks.tensors.size(), "--kv import: pointers vs tensors");
    uint64_t blob = 0;
    if (layout_tensors(&ks.tensors, &blob).ok()) (void)validate_spec(ks, blob);
  }

  uint64_t blob = 0;
  s = layout_tensors(&spec.tensors, &blob);
  if (!s.ok()) {
    check_error(s, "layout_tensors");
    return 0;
  }
  s = validate_spec(spec, blob);
  if (!s.ok()) {
    check_error(s, "validate_spec(imported)");
    return 0;
  }

  // A spec that validates converts: the same bytes through convert_gguf_to_pkv (as a file).
  const std::string out = scratch_dir() + "/a.pkv";
  ModelSpec written;
  s = convert_gguf_to_pkv(as_file(data, size), out, ImportOptions(), &written);
  FUZZ_CHECK(s.ok(), "convert failed on a GGUF whose import validates: %s", s.to_string().c_str());
  std::unique_ptr<ModelFile> mf;
  s = ModelFile::open(out, &mf);
  FUZZ_CHECK(s.ok(), "the converted file does not open: %s", s.to_string().c_str());
  const ModelSpec& r = mf->spec();
  FUZZ_CHECK(r.config == spec.config, "config changed in conversion");
  FUZZ_CHECK(r.layers == spec.layers, "layers changed in conversion");
  FUZZ_CHECK(r.tensors == spec.tensors && written.tensors == spec.tensors, "tensor table changed in conversion");
  FUZZ_CHECK(same_tokenizer(r.tokenizer, spec.tokenizer), "tokenizer changed in conversion");
  FUZZ_CHECK(r.chat_template == spec.chat_template, "chat template changed in conversion");
  for (size_t i = 0; i < spec.tensors.size(); ++i)
    FUZZ_CHECK(std::memcmp(mf->tensor_data(r.tensors[i]), ptrs[i], size_t(spec.tensors[i].size)) == 0,
               "tensor '%s' is not bit-identical after conversion", spec.tensors[i].name.c_str());
  return 0;
}
