// phasekv: the PhaseKV command-line tool (convert, inspect, run, bench, selftest).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <csignal>
#include <string>

#include "commands.h"
#include "cpu_kernels.h"
#include "file_io.h"

namespace phasekv {
namespace tools {

int report(const char* command, const Status& s) {
  if (s.ok()) return kExitOk;
  // Paths and strings from files are escaped where messages name them; this catches the rest:
  // no control character reaches the terminal (line breaks of multi-line messages stay).
  std::fprintf(stderr, "phasekv %s: error: %s\n", command, display_escape(s.to_string(), true).c_str());
  switch (s.code()) {
    case StatusCode::kInternal:
    case StatusCode::kOutOfMemory:
      return kExitFailure;
    default:
      return kExitBadInput;
  }
}

Status read_text_file(const char* option, const std::string& path, std::string* out) {
  int fd = -1;
  uint64_t size = 0;
  PKV_RETURN_IF_ERROR(open_regular_file(path, option, &fd, &size));
  const std::string shown = display_escape(path);
  if (size > kMaxTextFileBytes) {
    ::close(fd);
    return make_error(StatusCode::kIoError, "cannot read %s '%s': %llu bytes, at most %zu MiB are read", option,
                      shown.c_str(), static_cast<unsigned long long>(size), kMaxTextFileBytes >> 20);
  }
  std::string text(size_t(size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, &text[done], text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : 0;
      ::close(fd);
      return make_error(StatusCode::kIoError, "cannot read %s '%s': %s", option, shown.c_str(),
                        e ? std::strerror(e) : "the file shrank while it was read");
    }
    done += size_t(n);
  }
  ::close(fd);
  *out = std::move(text);
  return Status::Ok();
}

Status write_file_atomic(const char* option, const std::string& path, const std::string& data) {
  return phasekv::write_file_atomic(path, option, data);
}

namespace {

// Where an output named `path` will be written, spelled canonically: the real directory plus
// the file name, or, for a symbolic link, the real path of its target (AtomicFile writes
// there). Empty when the directory does not exist.
std::string output_target(const std::string& path) {
  char* real = realpath(path.c_str(), nullptr);
  if (real) {
    std::string r = real;
    std::free(real);
    return r;
  }
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  real = realpath(dir.c_str(), nullptr);
  if (!real) return std::string();
  std::string r = real;
  std::free(real);
  return (r == "/" ? "" : r) + "/" + base;
}

}  // namespace

Status check_outputs(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const char* opt = outputs[i].first;
    const std::string& path = outputs[i].second;
    if (path.empty()) continue;
    const std::string shown = display_escape(path);
    struct stat st;
    if (lstat(path.c_str(), &st) == 0) {
      struct stat target;
      if (S_ISLNK(st.st_mode) && stat(path.c_str(), &target) != 0)
        return make_error(StatusCode::kIoError, "cannot write %s '%s': it is a symbolic link to nothing", opt,
                          shown.c_str());
      const bool link = S_ISLNK(st.st_mode);
      if (link) st = target;
      if (!S_ISREG(st.st_mode))
        return make_error(StatusCode::kIoError, "cannot write %s '%s': it is %s%s, not a regular file", opt,
                          shown.c_str(), link ? "a symbolic link to " : "", file_kind_name(st.st_mode));
    }
    const std::string where = output_target(path);
    const size_t slash = path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    if (where.empty() || access(dir.c_str(), W_OK) != 0)
      return make_error(StatusCode::kIoError, "cannot write %s '%s': directory '%s' does not exist or is not writable",
                        opt, shown.c_str(), display_escape(dir).c_str());
    // An output never replaces an input or another output, however either is spelled.
    for (const NamedPath& in : inputs) {
      if (in.second.empty()) continue;
      if (same_file(path, in.second) || output_target(in.second) == where)
        return make_error(StatusCode::kInvalidArgument, "%s '%s' is the %s file '%s': an output never replaces an input",
                          opt, shown.c_str(), in.first, display_escape(in.second).c_str());
    }
    for (size_t j = 0; j < i; ++j) {
      if (outputs[j].second.empty()) continue;
      if (output_target(outputs[j].second) == where)
        return make_error(StatusCode::kInvalidArgument, "%s '%s' and %s '%s' name the same file", outputs[j].first,
                          display_escape(outputs[j].second).c_str(), opt, shown.c_str());
    }
  }
  return Status::Ok();
}

Status flush_stdout() {
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    const int e = errno ? errno : EIO;
    return make_error(StatusCode::kIoError, "cannot write the output (standard output): %s", std::strerror(e));
  }
  return Status::Ok();
}

void add_backend_options(CLI::App* cmd, BackendOptions* o, const char* kernels_default) {
  cmd->add_option("--kernels", o->kernels,
                  std::string("CPU kernels: q8x2 (15-bit activations as two 8-bit halves, integer dot products: ~100x "
                              "closer to reference than q8), q8 (8-bit activations: the fastest, 10-25 % above "
                              "q8x2) or reference (f32), "
                              "optionally :ISA (") +
                      cpu::kKernelSetNames +
                      "; avx2 is the best x86 set, with VNNI where present, avx2-maddubs AVX2 only; on x86 the q8 modes read "
                      "Q4_0/Q4_1/Q8_0 matrices from R16 copies, an order of their own: avx2-rows and avx512vnni-r4 keep "
                      "the other instruction sets' bits), e.g. "
                      "q8:avx2-maddubs (default: $PHASEKV_KERNELS, else " +
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

bool parse_unsigned(const std::string& text, uint64_t* out) {
  if (text.empty()) return false;
  uint64_t v = 0;
  for (char ch : text) {
    if (ch < '0' || ch > '9') return false;
    const uint64_t d = uint64_t(ch - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

bool parse_byte_size(const std::string& text, uint64_t* out) {
  size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  uint64_t n = 0;
  if (!parse_unsigned(text.substr(0, i), &n)) return false;
  std::string unit;
  for (size_t k = i; k < text.size(); ++k) {
    if (text[k] == ' ' && unit.empty()) continue;
    unit += char(std::tolower(static_cast<unsigned char>(text[k])));
  }
  // CLI11's AsSizeValue(false) spelling: K, KB, KiB are all 1024 bytes (and so on up to E).
  static const char* const kUnits = "kmgtpe";
  int shift = 0;
  if (!unit.empty() && unit != "b") {
    const char* u = std::strchr(kUnits, unit[0]);
    if (!u || unit[0] == '\0') return false;
    const std::string rest = unit.substr(1);
    if (!rest.empty() && rest != "b" && rest != "i" && rest != "ib") return false;
    shift = 10 * int(u - kUnits + 1);
  }
  if (shift > 0 && n > (UINT64_MAX >> shift)) return false;
  *out = n << shift;
  return true;
}

CLI::Validator unsigned_integer() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        uint64_t v = 0;
        return parse_unsigned(s, &v) ? std::string()
                                     : "'" + s + "' is not an integer in [0, 18446744073709551615]";
      },
      "UINT64");
}

CLI::Validator byte_size() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        uint64_t v = 0;
        if (!parse_byte_size(s, &v))
          return "'" + s + "' is not a byte size (a whole number with an optional unit: 4096, 64KiB, 512MiB, 2GB; at "
                 "most 2^64-1 bytes)";
        s = std::to_string(v);
        return std::string();
      },
      "SIZE");
}

CLI::Validator finite_number() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || errno == ERANGE)
          return "'" + s + "' is not a finite number";
        return std::string();
      },
      "NUMBER");
}

void add_load_options(CLI::App* cmd, BackendOptions* o) {
  cmd->add_flag("--no-mmap", o->no_mmap,
                "Read the model into memory instead of mapping it (as llama.cpp's --no-mmap): the running "
                "process no longer depends on the file, which may then be replaced or deleted; costs its size in RAM");
  cmd->add_flag("--verify", o->verify,
                "Check the model's tensor data against the content hash written by convert before running");
}

Model::LoadOptions BackendOptions::load_options() const {
  Model::LoadOptions lo;
  lo.mmap = !no_mmap;
  lo.verify = verify;
  return lo;
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

void register_commands(CLI::App& app, int* exit_code) {
  app.require_subcommand(1);
  app.set_version_flag("--version", "phasekv 0.1.0 (model format 1)");
  register_convert(app, exit_code);
  register_inspect(app, exit_code);
  register_run(app, exit_code);
  register_bench(app, exit_code);
  register_selftest(app, exit_code);
  register_perplexity(app, exit_code);
  register_tokenize(app, exit_code);
}

}  // namespace tools
}  // namespace phasekv

