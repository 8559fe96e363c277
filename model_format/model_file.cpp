#include "model_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "file_io.h"
#include "phasekv_generated.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace phasekv {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the .pkv header is read in place: little-endian hosts only");

namespace {

std::string str_or_empty(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

Status check_header(const uint8_t* data, uint64_t size, FileHeader* h) {
  if (size < sizeof(FileHeader))
    return make_error(StatusCode::kInvalidFile, "file is %llu bytes, shorter than the %zu-byte header",
                      (unsigned long long)size, sizeof(FileHeader));
  std::memcpy(h, data, sizeof(FileHeader));
  if (std::memcmp(h->magic, kFileMagic, sizeof(kFileMagic)) != 0) {
    if (std::memcmp(data, "GGUF", 4) == 0)
      return make_error(StatusCode::kInvalidFile,
                        "header.magic: this is a GGUF file, not a PhaseKV model; convert it with "
                        "'phasekv convert --from gguf IN.gguf OUT.pkv'");
    return make_error(StatusCode::kInvalidFile, "header.magic: not a PhaseKV model file (expected \"PHASEKV\")");
  }
  if (h->version != kFormatVersion)
    return make_error(h->version > kFormatVersion ? StatusCode::kUnsupported : StatusCode::kInvalidFile,
                      "header.version = %u; this build reads format version %u", h->version, kFormatVersion);
  if (h->header_size != sizeof(FileHeader))
    return make_error(StatusCode::kInvalidFile, "header.header_size = %u (expected %zu)", h->header_size,
                      sizeof(FileHeader));
  if (h->meta_offset != sizeof(FileHeader))
    return make_error(StatusCode::kInvalidFile, "header.meta_offset = %llu (expected %zu)",
                      (unsigned long long)h->meta_offset, sizeof(FileHeader));
  if (h->meta_size < 8 || h->meta_size >= FLATBUFFERS_MAX_BUFFER_SIZE)
    return make_error(StatusCode::kInvalidFile, "header.meta_size = %llu is not a plausible metadata size",
                      (unsigned long long)h->meta_size);
  if (h->meta_size > size - h->meta_offset)
    return make_error(StatusCode::kInvalidFile,
                      "file is truncated: metadata ends at byte %llu but the file has %llu bytes",
                      (unsigned long long)(h->meta_offset + h->meta_size), (unsigned long long)size);
  if (h->blob_offset % kBlobAlign != 0 || h->blob_offset < h->meta_offset + h->meta_size)
    return make_error(StatusCode::kInvalidFile,
                      "header.blob_offset = %llu must be a multiple of %llu at or after the metadata end (%llu)",
                      (unsigned long long)h->blob_offset, (unsigned long long)kBlobAlign,
                      (unsigned long long)(h->meta_offset + h->meta_size));
  if (h->blob_offset > size || h->blob_size > size - h->blob_offset)
    return make_error(StatusCode::kInvalidFile,
                      "file is truncated: the tensor blob ends at byte %llu but the file has %llu bytes",
                      (unsigned long long)(h->blob_offset + h->blob_size), (unsigned long long)size);
  if (h->blob_offset + h->blob_size != size)
    return make_error(StatusCode::kInvalidFile, "file has %llu bytes after the tensor blob (header.blob_size = %llu)",
                      (unsigned long long)(size - h->blob_offset - h->blob_size), (unsigned long long)h->blob_size);
  if (h->reserved[0] || h->reserved[1])
    return make_error(StatusCode::kInvalidFile, "header.reserved is not zero");
  return Status::Ok();
}

void read_config(const fb::Config* c, ModelConfig* o) {
  o->architecture = str_or_empty(c->architecture());
  o->vocab_size = c->vocab_size();
  o->d_model = c->d_model();
  o->n_layers = c->n_layers();
  o->n_heads = c->n_heads();
  o->n_kv_heads = c->n_kv_heads();
  o->head_dim = c->head_dim();
  o->ffn_dim = c->ffn_dim();
  o->norm_eps = c->norm_eps();
  if (const fb::Rope* r = c->rope()) {
    o->rope.theta = r->theta();
    o->rope.dim = r->dim();
    o->rope.style = RopeStyle(r->style());
    o->rope.scaling = RopeScaling(r->scaling());
    o->rope.factor = r->factor();
    o->rope.original_context = r->original_context();
    o->rope.low_freq_factor = r->low_freq_factor();
    o->rope.high_freq_factor = r->high_freq_factor();
  }
  o->max_positions = c->max_positions();
  o->tied_embeddings = c->tied_embeddings();
  o->bos_id = c->bos_id();
  o->eos_id = c->eos_id();
  o->pad_id = c->pad_id();
  o->attn_bias = c->attn_bias();
  o->qk_norm = c->qk_norm();
}

AttentionMemory read_memory(const fb::AttentionMemory* m) {
  AttentionMemory o;
  o.kind = MemoryKind(m->kind());
  o.window = m->window();
  o.stride = m->stride();
  o.local = m->local();
  o.gate = GateKind(m->gate());
  o.gate_maps = MapSharing(m->gate_maps());
  o.payload = PayloadSource(m->payload());
  o.payload_maps = MapSharing(m->payload_maps());
  o.kv_tied = m->kv_tied();
  o.entry_rope = EntryRope(m->entry_rope());
  o.entry_norm = m->entry_norm();
  o.sink = m->sink();
  o.gap_accepted = m->gap_accepted();
  o.selection = Selection(m->selection());
  o.top_k = m->top_k();
  return o;
}

void read_tokenizer(const fb::Tokenizer* t, TokenizerData* o) {
  o->type = TokenizerType(t->type());
  o->model = str_or_empty(t->model());
  o->pre = str_or_empty(t->pre());
  if (t->tokens()) {
    o->tokens.reserve(t->tokens()->size());
    for (const flatbuffers::String* s : *t->tokens()) o->tokens.push_back(str_or_empty(s));
  }
  if (t->scores()) o->scores.assign(t->scores()->begin(), t->scores()->end());
  if (t->token_types()) o->token_types.assign(t->token_types()->begin(), t->token_types()->end());
  if (t->merges()) {
    o->merges.reserve(t->merges()->size());
    for (const flatbuffers::String* s : *t->merges()) o->merges.push_back(str_or_empty(s));
  }
  o->bos_id = t->bos_id();
  o->eos_id = t->eos_id();
  o->eot_id = t->eot_id();
  o->pad_id = t->pad_id();
  o->unk_id = t->unk_id();
  o->add_bos = t->add_bos();
  o->add_eos = t->add_eos();
  o->add_space_prefix = t->add_space_prefix();
}

Status read_spec(const uint8_t* meta, uint64_t meta_size, ModelSpec* spec) {
  flatbuffers::Verifier::Options vopts;
  vopts.max_depth = 16;
  vopts.max_tables = 1u << 24;
  flatbuffers::Verifier verifier(meta, size_t(meta_size), vopts);
  if (!fb::VerifyModelBuffer(verifier))
    return make_error(StatusCode::kInvalidFile,
                      "metadata: the FlatBuffer failed verification (corrupt or not a phasekv.fb.Model)");
  const fb::Model* m = fb::GetModel(meta);
  read_config(m->config(), &spec->config);
  for (const fb::AttentionMemory* l : *m->layers()) {
    if (!l) return make_error(StatusCode::kInvalidFile, "metadata: layers holds a null entry");
    spec->layers.push_back(read_memory(l));
  }
  for (const fb::Tensor* t : *m->tensors()) {
    if (!t) return make_error(StatusCode::kInvalidFile, "metadata: tensors holds a null entry");
    // The FlatBuffers 2.0 verifier aligns a vector's length field (4 bytes) but not its
    // elements: an 8-byte-misaligned [ulong] (never written by FlatBufferBuilder) would be read
    // with misaligned loads.
    if (size_t(t->shape()->Data() - meta) % alignof(uint64_t) != 0)
      return make_error(StatusCode::kInvalidFile,
                        "metadata: tensor '%s': shape is not 8-byte aligned (corrupt FlatBuffer)", t->name()->c_str());
    TensorInfo ti;
    ti.name = t->name()->str();
    ti.dtype = DType(t->dtype());
    ti.shape.assign(t->shape()->begin(), t->shape()->end());
    ti.offset = t->offset();
    ti.size = t->size();
    spec->tensors.push_back(std::move(ti));
  }
  if (m->tokenizer()) read_tokenizer(m->tokenizer(), &spec->tokenizer);
  spec->chat_template = str_or_empty(m->chat_template());
  if (const fb::Provenance* p = m->provenance()) {
    spec->provenance.source_file = str_or_empty(p->source_file());
    spec->provenance.source_format = str_or_empty(p->source_format());
    spec->provenance.source_name = str_or_empty(p->source_name());
    spec->provenance.converter = str_or_empty(p->converter());
  }
  if (const fb::Integrity* in = m->integrity()) {
    spec->blob_hash.algorithm = HashAlgorithm(in->blob_hash_algorithm());
    if (in->blob_hash()) spec->blob_hash.digest.assign(in->blob_hash()->begin(), in->blob_hash()->end());
  }
  return Status::Ok();
}

std::string hex(const std::vector<uint8_t>& d) {
  static const char k[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) s += {k[b >> 4], k[b & 15]};
  return s;
}

}  // namespace

Status ModelFile::parse(const uint8_t* data, uint64_t size, ModelFile* mf) {
  PKV_RETURN_IF_ERROR(check_header(data, size, &mf->header_));
  PKV_RETURN_IF_ERROR(read_spec(data + mf->header_.meta_offset, mf->header_.meta_size, &mf->spec_));
  return validate_spec(mf->spec_, mf->header_.blob_size);
}

Status ModelFile::from_memory(const uint8_t* data, uint64_t size, std::unique_ptr<ModelFile>* out) {
  std::unique_ptr<ModelFile> mf(new ModelFile());
  mf->path_ = "<memory>";
  mf->data_ = data;
  mf->size_ = size;
  PKV_RETURN_IF_ERROR(parse(data, size, mf.get()));
  *out = std::move(mf);
  return Status::Ok();
}

Status ModelFile::open(const std::string& path, std::unique_ptr<ModelFile>* out) {
  return open(path, OpenOptions(), out);
}

Status ModelFile::open(const std::string& path, const OpenOptions& options, std::unique_ptr<ModelFile>* out) {
  int fd = -1;
  uint64_t size = 0;
  PKV_RETURN_IF_ERROR(open_regular_file(path, "model", &fd, &size));
  const std::string shown = display_escape(path);
  if (size < sizeof(FileHeader)) {
    ::close(fd);
    return make_error(StatusCode::kInvalidFile, "%s: file is %llu bytes, shorter than the %zu-byte header",
                      shown.c_str(), (unsigned long long)size, sizeof(FileHeader));
  }
  std::unique_ptr<ModelFile> mf(new ModelFile());
  mf->path_ = path;
  mf->size_ = size;
  if (options.map) {
    void* p = mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED)
      return make_error(StatusCode::kIoError, "cannot map '%s': %s", shown.c_str(), std::strerror(errno));
    mf->data_ = static_cast<const uint8_t*>(p);
    mf->mapped_ = true;  // unmapped by the destructor, also on a failed parse
  } else {
    // A copy that no longer depends on the file: replacing or truncating it under a running
    // process changes nothing here (a mapping would see the new bytes, or raise SIGBUS).
    void* p = nullptr;
    if (posix_memalign(&p, size_t(kBlobAlign), size_t(size)) != 0 || !p) {
      ::close(fd);
      return make_error(StatusCode::kOutOfMemory, "cannot allocate %llu bytes to read '%s' into memory",
                        (unsigned long long)size, shown.c_str());
    }
    mf->data_ = static_cast<const uint8_t*>(p);
    mf->owned_ = true;  // freed by the destructor
    uint8_t* dst = static_cast<uint8_t*>(p);
    uint64_t done = 0;
    while (done < size) {
      const size_t chunk = size_t(std::min<uint64_t>(size - done, 1ull << 30));
      const ssize_t n = ::read(fd, dst + done, chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int e = n < 0 ? errno : 0;
        ::close(fd);
        if (e) return make_error(StatusCode::kIoError, "cannot read '%s': %s", shown.c_str(), std::strerror(e));
        return make_error(StatusCode::kIoError, "cannot read '%s': the file shrank to %llu bytes while it was read",
                          shown.c_str(), (unsigned long long)done);
      }
      done += uint64_t(n);
    }
    ::close(fd);
  }
  Status s = parse(mf->data_, size, mf.get());
  if (!s.ok()) return s.with_context(shown);
  if (options.verify) {
    s = mf->verify_blob_hash();
    if (!s.ok()) return s.with_context(shown);
  }
  *out = std::move(mf);
  return Status::Ok();
}

namespace {

// XXH3-128 over a byte stream fed in pieces (the blob in 1 GiB chunks, padding as zeros).
class BlobHasher {
 public:
  BlobHasher() : st_(XXH3_createState()) {
    if (st_) XXH3_128bits_reset(st_);
  }
  ~BlobHasher() { XXH3_freeState(st_); }
  bool ok() const { return st_ != nullptr; }
  void update(const uint8_t* p, uint64_t n) {
    for (uint64_t off = 0; off < n;) {
      const size_t chunk = size_t(std::min<uint64_t>(n - off, 1ull << 30));
      XXH3_128bits_update(st_, p + off, chunk);
      off += chunk;
    }
  }
  void zeros(uint64_t n) {
    static const uint8_t kZeros[65536] = {};
    while (n > 0) {
      const size_t c = size_t(std::min<uint64_t>(n, sizeof(kZeros)));
      XXH3_128bits_update(st_, kZeros, c);
      n -= c;
    }
  }
  void finish(BlobHash* out) const {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st_));
    out->algorithm = HashAlgorithm::XXH3_128;
    out->digest.assign(c.digest, c.digest + sizeof(c.digest));
  }

 private:
  XXH3_state_t* st_;
};

}  // namespace

Status compute_blob_hash(const uint8_t* blob, uint64_t size, BlobHash* out) {
  BlobHasher h;
  if (!h.ok()) return make_error(StatusCode::kOutOfMemory, "cannot allocate the hash state");
  h.update(blob, size);
  h.finish(out);
  return Status::Ok();
}

std::string BlobHash::hex() const { return phasekv::hex(digest); }

Status ModelFile::verify_blob_hash() const {
  const BlobHash& want = spec_.blob_hash;
  if (!want.present())
    return make_error(StatusCode::kUnsupported,
                      "integrity: the file records no content hash (written by an older converter); convert the "
                      "GGUF again to add one");
  BlobHash got;
  PKV_RETURN_IF_ERROR(compute_blob_hash(blob(), header_.blob_size, &got));
  if (got.digest != want.digest)
    return make_error(StatusCode::kInvalidFile,
                      "integrity.blob_hash: the tensor data does not match the hash written at conversion (%s "
                      "recorded, %s now): the file was changed in place or damaged. Replace a model by writing "
                      "the new file elsewhere and renaming it over the old one",
                      want.hex().c_str(), got.hex().c_str());
  return Status::Ok();
}

ModelFile::~ModelFile() {
  if (mapped_ && data_) munmap(const_cast<uint8_t*>(data_), size_t(size_));
  if (owned_) std::free(const_cast<uint8_t*>(data_));
}

// ---------------------------------------------------------------------------------------
// Writer

Status layout_tensors(std::vector<TensorInfo>* tensors, uint64_t* blob_size) {
  uint64_t off = 0;
  for (TensorInfo& t : *tensors) {
    uint64_t bytes = 0;
    Status s = tensor_byte_size(t.dtype, t.shape, &bytes);
    if (!s.ok()) return s.with_context("tensor '" + t.name + "'");
    off = (off + kTensorAlign - 1) / kTensorAlign * kTensorAlign;
    t.offset = off;
    t.size = bytes;
    off += bytes;
  }
  *blob_size = off;
  return Status::Ok();
}

namespace {

flatbuffers::Offset<fb::Model> build_model(flatbuffers::FlatBufferBuilder& b, const ModelSpec& s) {
  const ModelConfig& c = s.config;
  auto rope = fb::CreateRope(b, c.rope.theta, c.rope.dim, fb::RopeStyle(c.rope.style),
                             fb::RopeScaling(c.rope.scaling), c.rope.factor, c.rope.original_context,
                             c.rope.low_freq_factor, c.rope.high_freq_factor);
  auto config = fb::CreateConfig(b, b.CreateString(c.architecture), c.vocab_size, c.d_model, c.n_layers, c.n_heads,
                                 c.n_kv_heads, c.head_dim, c.ffn_dim, c.norm_eps, rope, c.max_positions,
                                 c.tied_embeddings, c.bos_id, c.eos_id, c.pad_id, c.attn_bias, c.qk_norm);
  std::vector<flatbuffers::Offset<fb::AttentionMemory>> layers;
  for (const AttentionMemory& m : s.layers)
    layers.push_back(fb::CreateAttentionMemory(
        b, fb::MemoryKind(m.kind), m.window, m.stride, m.local, fb::GateKind(m.gate), fb::MapSharing(m.gate_maps),
        fb::PayloadSource(m.payload), fb::MapSharing(m.payload_maps), m.kv_tied, fb::EntryRope(m.entry_rope),
        m.entry_norm, m.sink, m.gap_accepted, fb::Selection(m.selection), m.top_k));
  std::vector<flatbuffers::Offset<fb::Tensor>> tensors;
  for (const TensorInfo& t : s.tensors)
    tensors.push_back(fb::CreateTensor(b, b.CreateString(t.name), fb::DType(t.dtype), b.CreateVector(t.shape),
                                       t.offset, t.size));
  const TokenizerData& t = s.tokenizer;
  auto tok = fb::CreateTokenizer(b, fb::TokenizerType(t.type), b.CreateString(t.model), b.CreateString(t.pre),
                                 b.CreateVectorOfStrings(t.tokens), b.CreateVector(t.scores),
                                 b.CreateVector(t.token_types), b.CreateVectorOfStrings(t.merges), t.bos_id,
                                 t.eos_id, t.eot_id, t.pad_id, t.unk_id, t.add_bos, t.add_eos, t.add_space_prefix);
  const Provenance& p = s.provenance;
  auto prov = fb::CreateProvenance(b, b.CreateString(p.source_file), b.CreateString(p.source_format),
                                   b.CreateString(p.source_name), b.CreateString(p.converter));
  flatbuffers::Offset<fb::Integrity> integrity = 0;
  if (s.blob_hash.present())
    integrity = fb::CreateIntegrity(b, fb::HashAlgorithm(s.blob_hash.algorithm), b.CreateVector(s.blob_hash.digest));
  return fb::CreateModel(b, config, b.CreateVector(layers), b.CreateVector(tensors), tok,
                         b.CreateString(s.chat_template), prov, integrity);
}

// The hash of a blob laid out by layout_tensors (in order, zero padding between tensors,
// zeros for a null data pointer), computed from the tensors before anything is written.
Status hash_laid_out_blob(const ModelSpec& spec, const std::vector<const void*>& data, uint64_t blob_size,
                          BlobHash* out) {
  BlobHasher h;
  if (!h.ok()) return make_error(StatusCode::kOutOfMemory, "cannot allocate the hash state");
  uint64_t pos = 0;
  for (size_t i = 0; i < spec.tensors.size(); ++i) {
    const TensorInfo& t = spec.tensors[i];
    PKV_ASSERT(t.offset >= pos);  // layout_tensors places tensors in order
    h.zeros(t.offset - pos);
    if (data[i]) h.update(static_cast<const uint8_t*>(data[i]), t.size);
    else h.zeros(t.size);
    pos = t.offset + t.size;
  }
  h.zeros(blob_size - pos);
  h.finish(out);
  return Status::Ok();
}

}  // namespace

Status write_model_file(const std::string& path, const ModelSpec& in, const std::vector<const void*>& tensor_data,
                        const WriteOptions& opts) {
  if (tensor_data.size() != in.tensors.size())
    return make_error(StatusCode::kInvalidArgument, "write_model_file: %zu tensor data pointers for %zu tensors",
                      tensor_data.size(), in.tensors.size());
  ModelSpec spec = in;
  uint64_t blob_size = 0;
  if (opts.keep_layout) {
    for (const TensorInfo& t : spec.tensors)
      if (t.offset + t.size > blob_size) blob_size = t.offset + t.size;
    if (opts.blob_size) blob_size = opts.blob_size;
  } else {
    PKV_RETURN_IF_ERROR(layout_tensors(&spec.tensors, &blob_size));
    PKV_RETURN_IF_ERROR(hash_laid_out_blob(spec, tensor_data, blob_size, &spec.blob_hash));
  }
  if (opts.validate) PKV_RETURN_IF_ERROR(validate_spec(spec, blob_size));

  flatbuffers::FlatBufferBuilder builder(1 << 20);
  builder.Finish(build_model(builder, spec), fb::ModelIdentifier());

  FileHeader h{};
  std::memcpy(h.magic, kFileMagic, sizeof(kFileMagic));
  h.version = kFormatVersion;
  h.header_size = sizeof(FileHeader);
  h.meta_offset = sizeof(FileHeader);
  h.meta_size = builder.GetSize();
  h.blob_offset = (h.meta_offset + h.meta_size + kBlobAlign - 1) / kBlobAlign * kBlobAlign;
  h.blob_size = blob_size;

  AtomicFile out;
  Status s = out.open(path, "model", opts.replace);
  if (s.ok()) s = out.write_at(&h, sizeof(h), 0);
  if (s.ok()) s = out.write_at(builder.GetBufferPointer(), h.meta_size, h.meta_offset);
  for (size_t i = 0; s.ok() && i < spec.tensors.size(); ++i) {
    const TensorInfo& t = spec.tensors[i];
    if (tensor_data[i] && t.offset <= blob_size && t.size <= blob_size - t.offset)
      s = out.write_at(tensor_data[i], t.size, h.blob_offset + t.offset);
  }
  if (s.ok() && ftruncate(out.fd(), off_t(h.blob_offset + h.blob_size)) != 0)
    s = make_error(StatusCode::kIoError, "cannot size '%s': %s", display_escape(out.temp_path()).c_str(),
                   std::strerror(errno));
  if (s.ok()) s = out.commit();
  return s;
}

}  // namespace phasekv
