// libFuzzer target: the .pkv model reader (header, FlatBuffers metadata, tensor blob and the
// semantic validation of the spec), then, for inputs it accepts, the whole runtime load.
//
// Input: the bytes of a .pkv file. Invariants (docs/FUZZING.md):
//   * ModelFile::from_memory either succeeds or returns an error status with a message (never
//     kInternal) and leaves its output empty;
//   * an accepted file is self-consistent: the blob ends the file, every tensor lies inside
//     the blob (and its pointer inside the input), validate_spec accepts the spec again;
//   * the same bytes opened as a file (ModelFile::open) give the same spec;
//   * writing the spec back and reading it again is a fixed point: write(read(write(spec)))
//     is byte-identical to write(spec), and the written tensors hold the input's bytes;
//   * Model::load (tokenizer, weight views, norms, compressor checks, RoPE tables) either
//     succeeds or returns an error; a loaded model's tokenizer encodes and decodes.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "chat_template.h"
#include "fuzz_util.h"
#include "model.h"
#include "model_file.h"
#include "tokenizer.h"

using namespace phasekv;
using namespace phasekv::fuzz;

namespace {

std::string as_file(const uint8_t* data, size_t size) { return input_as_file("fuzz_model_reader", data, size); }

std::vector<const void*> tensor_pointers(const ModelFile& mf) {
  std::vector<const void*> p;
  for (const TensorInfo& t : mf.spec().tensors) p.push_back(mf.tensor_data(t));
  return p;
}

void check_loaded_tokenizer(const Tokenizer& tok) {
  const int32_t n = tok.n_tokens();
  FUZZ_CHECK(n > 0, "a loaded tokenizer has %d tokens", n);
  for (const char* text : {"Hello world 123", "  x\n\ty", "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x9A\x80",
                           "<|im_start|>user\nhi<|im_end|>\n"}) {
    for (bool special : {false, true}) {
      std::vector<int32_t> ids;
      Status s = tok.encode(text, special, &ids);
      if (!s.ok()) {
        check_error(s, "Tokenizer::encode");
        FUZZ_CHECK(ids.empty(), "a failed encode wrote %zu tokens", ids.size());
        continue;
      }
      for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < n, "encode gave id %d outside [0, %d)", id, n);
      std::string back;
      FUZZ_CHECK(tok.decode(ids, &back).ok(), "decode of encoded ids failed");
    }
  }
  // Every token (the first 4096) decodes, alone and through the stream decoder.
  StreamDecoder sd(tok);
  std::string streamed;
  for (int32_t id = 0; id < n && id < 4096; ++id) {
    std::string piece;
    FUZZ_CHECK(tok.token_bytes(id, &piece).ok(), "token_bytes(%d) failed", id);
    FUZZ_CHECK(sd.push(id, &streamed).ok(), "StreamDecoder::push(%d) failed", id);
  }
  sd.flush(&streamed);
  FUZZ_CHECK(valid_utf8(streamed), "StreamDecoder emitted invalid UTF-8");
  std::string piece;
  check_error(tok.token_bytes(n, &piece), "token_bytes(n_tokens)");
  check_error(tok.token_bytes(-1, &piece), "token_bytes(-1)");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<ModelFile> mf;
  Status s = ModelFile::from_memory(data, size, &mf);
  if (!s.ok()) {
    check_error(s, "ModelFile::from_memory");
    FUZZ_CHECK(!mf, "a failed open filled its output");
    return 0;
  }
  const FileHeader& h = mf->header();
  const ModelSpec& spec = mf->spec();
  FUZZ_CHECK(h.blob_offset + h.blob_size == size, "blob [%llu, +%llu) does not end the %zu-byte file",
             (unsigned long long)h.blob_offset, (unsigned long long)h.blob_size, size);
  for (const TensorInfo& t : spec.tensors) {
    FUZZ_CHECK(t.offset <= h.blob_size && t.size <= h.blob_size - t.offset, "tensor '%s' outside the blob",
               t.name.c_str());
    const uint8_t* p = mf->tensor_data(t);
    FUZZ_CHECK(p >= data && p + t.size <= data + size, "tensor '%s' points outside the input", t.name.c_str());
  }
  FUZZ_CHECK(validate_spec(spec, h.blob_size).ok(), "an accepted spec fails validate_spec");
  FUZZ_CHECK(spec.layers.size() == spec.config.n_layers, "layers vs n_layers");

  // Writer round trip: write(spec) -> read -> write must reproduce the first file exactly.
  const std::string a = scratch_dir() + "/a.pkv", b = scratch_dir() + "/b.pkv";
  WriteOptions keep;
  keep.keep_layout = true;
  keep.blob_size = h.blob_size;
  s = write_model_file(a, spec, tensor_pointers(*mf), keep);
  FUZZ_CHECK(s.ok(), "writing an accepted spec failed: %s", s.to_string().c_str());
  std::unique_ptr<ModelFile> ra;
  s = ModelFile::open(a, &ra);
  FUZZ_CHECK(s.ok(), "the rewritten file does not open: %s", s.to_string().c_str());
  for (size_t i = 0; i < spec.tensors.size(); ++i) {
    const TensorInfo& t = spec.tensors[i];
    FUZZ_CHECK(ra->spec().tensors[i] == t, "tensor %zu changed in the round trip", i);
    FUZZ_CHECK(std::memcmp(ra->tensor_data(ra->spec().tensors[i]), mf->tensor_data(t), size_t(t.size)) == 0,
               "tensor '%s' bytes changed in the round trip", t.name.c_str());
  }
  s = write_model_file(b, ra->spec(), tensor_pointers(*ra), keep);
  FUZZ_CHECK(s.ok(), "writing the re-read spec failed: %s", s.to_string().c_str());
  std::string fa, fb;
  FUZZ_CHECK(read_file(a, &fa) && read_file(b, &fb), "cannot read the scratch files back");
  FUZZ_CHECK(fa == fb, "write(read(write(spec))) differs from write(spec) (%zu vs %zu bytes)", fa.size(), fb.size());
  ra.reset();

  // The same bytes as a file, through ModelFile::open and the runtime's Model::load.
  const std::string path = as_file(data, size);
  std::unique_ptr<ModelFile> mo;
  s = ModelFile::open(path, &mo);
  FUZZ_CHECK(s.ok(), "from_memory accepted what open refuses: %s", s.to_string().c_str());
  FUZZ_CHECK(mo->spec().tensors == spec.tensors && mo->spec().layers == spec.layers,
             "open and from_memory disagree on the spec");
  mo.reset();

  std::unique_ptr<Model> model;
  s = Model::load(path, &model);
  if (!s.ok()) {
    check_error(s, "Model::load");
    FUZZ_CHECK(!model, "a failed load filled its output");
  } else {
    check_loaded_tokenizer(model->tokenizer());
  }
  Model::LoadOptions full;
  full.full_attention = true;
  s = Model::load(path, full, &model);
  if (!s.ok()) check_error(s, "Model::load(full_attention)");

  // The file's chat template through the renderer.
  std::string rendered;
  s = apply_chat_template(spec.chat_template, {ChatMessage{"user", "hi"}}, true, &rendered);
  if (!s.ok()) check_error(s, "apply_chat_template");
  return 0;
}
