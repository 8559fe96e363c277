// Shared helpers of the libFuzzer targets (docs/FUZZING.md): invariant checks that crash
// loudly, a scratch directory for round trips through files, and the tokenizer the
// tokenizer and template targets build once per process.
#pragma once

#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gguf.h"
#include "gguf_import.h"
#include "model_file.h"
#include "status.h"
#include "tokenizer.h"

namespace phasekv {
namespace fuzz {

// An invariant of the code under test does not hold: report it and abort, so that libFuzzer
// records the input as a crash.
#define FUZZ_CHECK(cond, ...)                                                                 \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::fprintf(stderr, "fuzz invariant failed at %s:%d: %s\n  ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                      \
      std::fprintf(stderr, "\n");                                                             \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)

// A failed call must say what failed: a known code and a message.
inline void check_error(const Status& s, const char* what) {
  FUZZ_CHECK(!s.ok(), "%s: expected an error", what);
  const int c = int(s.code());
  FUZZ_CHECK(c >= 1 && c <= 7, "%s: status code %d is not a StatusCode", what, c);
  FUZZ_CHECK(!s.message().empty(), "%s: error %s without a message", what, status_code_name(s.code()));
  FUZZ_CHECK(s.code() != StatusCode::kInternal, "%s: internal error on fuzzed input: %s", what,
             s.to_string().c_str());
}

// A per-process scratch directory (on tmpfs when there is one) for files the targets write
// and read back. Removed at exit.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::string base = "/dev/shm";
    struct stat st;
    if (stat(base.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || access(base.c_str(), W_OK) != 0) {
      const char* t = std::getenv("TMPDIR");
      base = t && *t ? t : "/tmp";
    }
    std::string tmpl = base + "/phasekv-fuzz-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data())) {
      std::fprintf(stderr, "fuzz: cannot create a scratch directory under %s\n", base.c_str());
      std::abort();
    }
    static std::string made(buf.data());
    std::atexit([] {
      for (const char* f : {"/a.pkv", "/b.pkv", "/a.pkv.partial", "/b.pkv.partial"})
        unlink((made + f).c_str());
      rmdir(made.c_str());
    });
    return made;
  }();
  return dir;
}

// The input as a file path: one memfd per process (named `name`), rewritten for each input,
// so readers that take a path see exactly the fuzzer's bytes without touching the disk.
inline std::string input_as_file(const char* name, const uint8_t* data, size_t size) {
  static int fd = -1;
  if (fd < 0) {
    fd = memfd_create(name, 0);
    FUZZ_CHECK(fd >= 0, "memfd_create: %s", std::strerror(errno));
  }
  FUZZ_CHECK(ftruncate(fd, 0) == 0, "ftruncate: %s", std::strerror(errno));
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pwrite(fd, data + done, size - done, off_t(done));
    FUZZ_CHECK(n > 0, "pwrite: %s", std::strerror(errno));
    done += size_t(n);
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

inline bool read_file(const std::string& path, std::string* out) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return false;
  out->clear();
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) out->append(buf, n);
  return true;
}

// ---- the tokenizer under test ------------------------------------------------------------

// The model whose tokenizer the tokenizer and template targets use: $PHASEKV_FUZZ_MODEL (a
// GGUF or a .pkv), else the default model scripts/fetch-model.sh caches.
inline std::string fuzz_model_path() {
  if (const char* p = std::getenv("PHASEKV_FUZZ_MODEL"); p && *p) return p;
  std::string cache;
  if (const char* c = std::getenv("PHASEKV_CACHE"); c && *c) cache = c;
  else cache = std::string(std::getenv("HOME") ? std::getenv("HOME") : "/root") + "/.cache/phasekv";
  return cache + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// The vocabulary of the model at `path` (GGUF or .pkv, told apart by the magic). Exits the
// process with a clear message when the file is missing or unusable: without it the target
// would fuzz nothing.
inline TokenizerData load_tokenizer_data(const std::string& path) {
  auto die = [&](const std::string& why) {
    std::fprintf(stderr,
                 "fuzz: cannot load the tokenizer from '%s': %s\n"
                 "fuzz: set PHASEKV_FUZZ_MODEL to a GGUF or .pkv with a tokenizer (scripts/fetch-model.sh "
                 "downloads the default, SmolLM2-135M-Instruct Q4_1)\n",
                 path.c_str(), why.c_str());
    std::exit(2);
  };
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) die(std::strerror(errno));
  char magic[4] = {0, 0, 0, 0};
  const size_t got = std::fread(magic, 1, 4, f);
  std::fclose(f);
  if (got == 4 && std::memcmp(magic, "GGUF", 4) == 0) {
    std::unique_ptr<GgufFile> g;
    Status s = GgufFile::open(path, &g);
    if (!s.ok()) die(s.to_string());
    ModelSpec spec;
    std::vector<const void*> data;
    std::vector<std::vector<float>> owned;
    s = import_gguf(*g, ImportOptions(), &spec, &data, &owned);
    if (!s.ok()) die(s.to_string());
    return spec.tokenizer;
  }
  std::unique_ptr<ModelFile> mf;
  Status s = ModelFile::open(path, &mf);
  if (!s.ok()) die(s.to_string());
  return mf->spec().tokenizer;
}

// ---- UTF-8 and the byte-level alphabet -----------------------------------------------------

inline bool valid_utf8(const std::string& s) { return utf8_first_invalid(s) < 0; }

// GPT-2's byte -> code point map (printable bytes stand for themselves, the others are
// numbered from U+0100 up), as UTF-8 text: what a byte-level vocabulary calls each byte.
inline std::vector<std::string> gpt2_byte_texts() {
  std::vector<std::string> out(256);
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const unsigned cp = printable ? unsigned(b) : unsigned(256 + n++);
    if (cp < 0x80) out[size_t(b)] = std::string(1, char(cp));
    else out[size_t(b)] = std::string{char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
  }
  return out;
}

}  // namespace fuzz
}  // namespace phasekv
