// phasekv: the PhaseKV command-line tool (convert, inspect, run, bench, selftest).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "commands.h"

namespace phasekv {
namespace tools {

int report(const char* command, const Status& s) {
  if (s.ok()) return kExitOk;
  std::fprintf(stderr, "phasekv %s: error: %s\n", command, s.to_string().c_str());
  switch (s.code()) {
    case StatusCode::kInternal:
    case StatusCode::kOutOfMemory:
      return kExitFailure;
    default:
      return kExitBadInput;
  }
}

Status read_text_file(const char* option, const std::string& path, std::string* out) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0)
    return make_error(StatusCode::kIoError, "cannot read %s '%s': %s", option, path.c_str(), std::strerror(errno));
  if (S_ISDIR(st.st_mode))
    return make_error(StatusCode::kIoError, "cannot read %s '%s': it is a directory", option, path.c_str());
  if (!S_ISREG(st.st_mode))
    return make_error(StatusCode::kIoError, "cannot read %s '%s': not a regular file", option, path.c_str());
  if (uint64_t(st.st_size) > kMaxTextFileBytes)
    return make_error(StatusCode::kIoError, "cannot read %s '%s': %llu bytes, at most %zu MiB are read", option,
                      path.c_str(), static_cast<unsigned long long>(st.st_size), kMaxTextFileBytes >> 20);
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error(StatusCode::kIoError, "cannot read %s '%s'", option, path.c_str());
  std::string text(size_t(st.st_size), '\0');
  f.read(text.data(), std::streamsize(text.size()));
  if (size_t(f.gcount()) != text.size())
    return make_error(StatusCode::kIoError, "cannot read %s '%s': short read", option, path.c_str());
  *out = std::move(text);
  return Status::Ok();
}

Status write_file_atomic(const char* option, const std::string& path, const std::string& data) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    return make_error(StatusCode::kIoError, "cannot write %s '%s': %s", option, path.c_str(),
                      S_ISDIR(st.st_mode) ? "it is a directory" : "not a regular file");
  std::string tmp = path + ".XXXXXX";
  const int fd = mkstemp(&tmp[0]);
  if (fd < 0)
    return make_error(StatusCode::kIoError, "cannot write %s '%s': %s", option, path.c_str(), std::strerror(errno));
  // mkstemp creates the file 0600; a report is as readable as any file the user creates.
  const mode_t mask = umask(0);
  umask(mask);
  fchmod(fd, 0666 & ~mask);
  size_t off = 0;
  int err = 0;
  while (off < data.size()) {
    const ssize_t n = write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    off += size_t(n);
  }
  if (err == 0 && fsync(fd) != 0) err = errno;
  if (close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    unlink(tmp.c_str());
    return make_error(StatusCode::kIoError, "cannot write %s '%s': %s", option, path.c_str(), std::strerror(err));
  }
  return Status::Ok();
}

void add_backend_options(CLI::App* cmd, BackendOptions* o, const char* kernels_default) {
  cmd->add_option("--kernels", o->kernels,
                  std::string("CPU kernels: q8 (8-bit activations, integer dot products) or reference (f32), "
                              "optionally :ISA (avx2, avx512vnni, neon, portable), e.g. q8:avx2 (default: "
                              "$PHASEKV_KERNELS, else ") +
                      kernels_default + ")");
  cmd->add_option("--backend", o->backend,
                  "Where to compute: cpu, cuda, or auto (CUDA when a device is present, else the CPU)")
      ->default_val("cpu")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  cmd->add_option("--device", o->device, "CUDA device ordinal")->default_val(0)->check(CLI::Range(0, 1023));
  cmd->add_option("--cuda-weights", o->cuda_weights,
                  "CUDA weights: auto (device copy on a discrete GPU, mapped pinned host copy on an integrated "
                  "one), device, or mapped")
      ->default_val("auto")
      ->check(CLI::IsMember({"auto", "device", "mapped"}));
}

const char* BackendOptions::kernel_spec(const char* command_default) const {
  if (!kernels.empty()) return kernels.c_str();
  const char* env = std::getenv("PHASEKV_KERNELS");
  return env && *env ? env : command_default;
}

BackendKind BackendOptions::kind() const {
  BackendKind k = BackendKind::Cpu;
  backend_kind_from_name(backend.c_str(), &k);
  return k;
}

CudaWeights BackendOptions::weights() const {
  CudaWeights w = CudaWeights::Auto;
  cuda_weights_from_name(cuda_weights.c_str(), &w);
  return w;
}

}  // namespace tools
}  // namespace phasekv

int main(int argc, char** argv) {
  using namespace phasekv::tools;
  CLI::App app{"PhaseKV: an embedded LLM runtime with chunked compressed KV caches and a phase self-test"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "phasekv 0.1.0 (model format 1)");
  int exit_code = kExitOk;
  register_convert(app, &exit_code);
  register_inspect(app, &exit_code);
  register_run(app, &exit_code);
  register_bench(app, &exit_code);
  register_selftest(app, &exit_code);
  register_perplexity(app, &exit_code);
  register_tokenize(app, &exit_code);
  // CLI11 only says "A subcommand is required" for a mistyped command: name it.
  if (argc > 1 && argv[1][0] != '-' &&
      app.get_subcommands([&](const CLI::App* c) { return c->check_name(argv[1]); }).empty()) {
    std::fprintf(stderr, "phasekv: unknown command '%s' (convert, inspect, run, bench, selftest; see --help)\n",
                 argv[1]);
    return kExitBadInput;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);  // prints help / the usage error
    return rc == 0 ? kExitOk : kExitBadInput;
  }
  return exit_code;
}
