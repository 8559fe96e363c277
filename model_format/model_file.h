// The PhaseKV model file (.pkv): reader and writer.
//
//   [0, 64)                  FileHeader (little-endian)
//   [64, 64 + meta_size)     FlatBuffer `phasekv.fb.Model` (metadata only; < 2 GiB)
//   [blob_offset, +blob_size) tensor blob; blob_offset is a multiple of 4096, every tensor
//                            offset inside it a multiple of 64, so the mapped file is used
//                            in place (no copy of the weights).
//
// Opening verifies at two levels: the FlatBuffers Verifier over the metadata, then the
// semantics (validate_spec). Any failure returns a Status naming the field and the value;
// nothing is mapped or kept after a failed open.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model_spec.h"

namespace phasekv {

constexpr char kFileMagic[8] = {'P', 'H', 'A', 'S', 'E', 'K', 'V', '\0'};
constexpr uint32_t kFormatVersion = 1;
constexpr uint64_t kBlobAlign = 4096;

struct FileHeader {
  char magic[8];         // kFileMagic
  uint32_t version;      // kFormatVersion
  uint32_t header_size;  // sizeof(FileHeader) = 64
  uint64_t meta_offset;  // = header_size
  uint64_t meta_size;    // bytes of the FlatBuffer
  uint64_t blob_offset;  // multiple of kBlobAlign, >= meta_offset + meta_size
  uint64_t blob_size;    // bytes of the tensor blob; the file ends at blob_offset + blob_size
  uint64_t reserved[2];  // zero
};
static_assert(sizeof(FileHeader) == 64, "FileHeader must be 64 bytes");

class ModelFile {
 public:
  struct OpenOptions {
    // true: map the file read-only and use it in place (no copy). The file must then stay as
    // it is while the model is loaded: replace it atomically (write the new file elsewhere,
    // rename it over the old one). An in-place overwrite changes the weights under the running
    // process, a truncation kills it with SIGBUS.
    // false: read the whole file into memory owned by the ModelFile; nothing depends on the
    // file afterwards (costs the file's size in RAM and the time to read it).
    bool map = true;
    // Check the tensor blob against the content hash written at conversion (verify_blob_hash).
    bool verify = false;
  };
  // Maps (or reads) `path` and verifies it. On failure *out is untouched.
  static Status open(const std::string& path, std::unique_ptr<ModelFile>* out);
  static Status open(const std::string& path, const OpenOptions& options, std::unique_ptr<ModelFile>* out);
  // Verifies a file image already in memory (not copied; must outlive the ModelFile).
  static Status from_memory(const uint8_t* data, uint64_t size, std::unique_ptr<ModelFile>* out);

  ~ModelFile();
  ModelFile(const ModelFile&) = delete;
  ModelFile& operator=(const ModelFile&) = delete;

  const ModelSpec& spec() const { return spec_; }
  const FileHeader& header() const { return header_; }
  uint64_t file_size() const { return size_; }
  const std::string& path() const { return path_; }
  // Pointer to the tensor's bytes inside the mapping (64-byte aligned when mapped).
  const uint8_t* tensor_data(const TensorInfo& t) const { return data_ + header_.blob_offset + t.offset; }
  const uint8_t* blob() const { return data_ + header_.blob_offset; }  // [header().blob_size]
  const TensorInfo* find_tensor(const std::string& name) const { return spec_.find_tensor(name); }
  bool mapped() const { return mapped_; }  // false: read into memory (OpenOptions::map = false)

  // Recomputes the tensor blob's hash and compares it with the one written at conversion:
  // kInvalidFile (naming both digests) on a mismatch, kUnsupported when the file records none.
  Status verify_blob_hash() const;

 private:
  ModelFile() = default;
  static Status parse(const uint8_t* data, uint64_t size, ModelFile* mf);

  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  bool mapped_ = false;
  bool owned_ = false;  // data_ was allocated by open() (OpenOptions::map = false)
  FileHeader header_{};
  ModelSpec spec_;
};

struct WriteOptions {
  // Validate the spec before writing (default). Tests that make corrupt files turn this off.
  bool validate = true;
  // Keep the offsets and sizes given in spec.tensors instead of laying tensors out
  // (tests only); blob_size then defaults to the end of the last tensor.
  bool keep_layout = false;
  uint64_t blob_size = 0;  // with keep_layout: 0 = derive
  // An existing regular file at `path` is replaced; false: the write is refused if one exists,
  // also one that another process finishes first (AtomicFile::commit).
  bool replace = true;
};

// Writes `spec` and the tensor bytes to `path`. tensor_data[i] holds spec.tensors[i]'s bytes;
// a null pointer leaves a hole of zeros (sparse where the filesystem allows). Offsets and
// sizes are assigned unless opts.keep_layout, and then the blob's content hash is computed
// and recorded (spec.blob_hash is written as given with keep_layout). The file is written as
// an AtomicFile (file_io.h): a failed or interrupted write leaves no partial file at `path`,
// and `path` must be a regular file or absent.
Status write_model_file(const std::string& path, const ModelSpec& spec,
                        const std::vector<const void*>& tensor_data, const WriteOptions& opts = {});

// XXH3-128 of `size` bytes (the tensor blob), as recorded in BlobHash.
Status compute_blob_hash(const uint8_t* blob, uint64_t size, BlobHash* out);

// Lays out tensors: assigns 64-byte-aligned offsets in order and byte sizes; returns the blob size.
Status layout_tensors(std::vector<TensorInfo>* tensors, uint64_t* blob_size);

}  // namespace phasekv
