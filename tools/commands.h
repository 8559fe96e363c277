// Sub-commands of the `phasekv` tool. Each registers its options on the CLI11 app and
// returns the process exit code from its run function.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <utility>
#include <vector>

#include "backends.h"
#include "model.h"
#include "phase_guard.h"
#include "status.h"

namespace phasekv {
namespace tools {

// Exit codes shared by all sub-commands.
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;     // internal error, out of memory
constexpr int kExitBadInput = 2;    // usage errors, bad files, bad arguments, I/O on inputs

// Prints "phasekv <command>: error: ..." to stderr and maps the status to an exit code.
int report(const char* command, const Status& s);

// Reads a text input named by an option (-f, --template) whole. Refused with kIoError naming
// the option and path: a missing or unreadable file, a directory, anything that is not a
// regular file (a FIFO or device would block or never end), a file over kMaxTextFileBytes.
constexpr size_t kMaxTextFileBytes = size_t(64) << 20;
Status read_text_file(const char* option, const std::string& path, std::string* out);

// Writes an output named by an option (--json, --html) so that a reader never sees a partial
// file and an interrupted or failed write leaves the previous file (if any) as it was
// (file_io.h AtomicFile: an exclusive temporary in the same directory, flushed, renamed).
// Refused with kIoError naming the option and path: an existing path that is not a regular
// file (a directory, FIFO or device), an unwritable directory, a failed write (a full disk).
Status write_file_atomic(const char* option, const std::string& path, const std::string& data);

// An option and the path it names.
using NamedPath = std::pair<const char*, std::string>;
// Checks a command's outputs before any work (empty paths are skipped): each must be a regular
// file (or a symbolic link to one) or absent, in a writable directory (kIoError otherwise),
// and none may be one of `inputs` or another output, however spelled -- symlinks, `..`, hard
// links (kInvalidArgument, naming both).
Status check_outputs(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs);

// Reads a self-test report (selftest --json) as the phase profile --phase-align and
// --phase-guard act on: period, accuracy per residue averaged over the protocols, the flagged
// residues, the strongest residue. kInvalidFile naming the missing or malformed field.
Status read_phase_profile(const std::string& path, PhaseProfile* out);

// Flushes stdout; kIoError naming the reason when anything written to it was lost (a full
// disk, /dev/full, a closed pipe end).
Status flush_stdout();

// Exit code of a command stopped by SIGINT (128 + 2, as a shell reports it).
constexpr int kExitInterrupted = 130;

// --backend / --device / --cuda-weights, shared by run, bench, selftest and inspect.
struct BackendOptions {
  std::string backend = "cpu";
  int device = 0;
  std::string cuda_weights = "auto";
  std::string kernels;  // --kernels SPEC; empty: the command's default (kernels_default)
  bool no_mmap = false;  // --no-mmap
  bool verify = false;   // --verify
  BackendKind kind() const;
  // How to load the model: --no-mmap reads it into memory, --verify checks its content hash.
  Model::LoadOptions load_options() const;
  // The CPU kernel spec to use: --kernels, else $PHASEKV_KERNELS, else `command_default`.
  const char* kernel_spec(const char* command_default) const;
  CudaWeights weights() const;
};
// The kernels run, bench and perplexity use when neither --kernels nor $PHASEKV_KERNELS names any
// (README, "The q8x2 mode"); pass it to both add_backend_options and kernel_spec.
inline constexpr const char* kCommandKernels = "q8x2";
// `kernels_default` is what --help says --kernels defaults to (kCommandKernels for run, bench and perplexity).
void add_backend_options(CLI::App* cmd, BackendOptions* o, const char* kernels_default = "reference");
// Strict number options (CLI11 alone wraps "-1" into a uint64, saturates 2^64, and takes
// "nan" and "inf" as floats):
bool parse_unsigned(const std::string& text, uint64_t* out);   // decimal digits only, <= 2^64-1
bool parse_byte_size(const std::string& text, uint64_t* out);  // 4096, 64KiB, 512M, 2GB (K = 1024)
CLI::Validator unsigned_integer();  // checks an option's text with parse_unsigned
CLI::Validator byte_size();         // converts "64MiB" to bytes, refusing negatives and overflow
CLI::Validator finite_number();     // refuses nan, inf and out-of-range floats

// --no-mmap / --verify (commands that load a model to run it).
void add_load_options(CLI::App* cmd, BackendOptions* o);

// The tool's description, and every command registered on `app`. Each command's callback
// stores its exit code in *exit_code; with exit_code == nullptr the callbacks do nothing, so
// a parse checks the arguments only (the CLI fuzz target).
constexpr const char* kAppDescription =
    "PhaseKV: an embedded LLM runtime with chunked compressed KV caches and a phase self-test";
void register_commands(CLI::App& app, int* exit_code);

void register_convert(CLI::App& app, int* exit_code);
void register_inspect(CLI::App& app, int* exit_code);
void register_run(CLI::App& app, int* exit_code);
void register_bench(CLI::App& app, int* exit_code);
void register_selftest(CLI::App& app, int* exit_code);
void register_perplexity(CLI::App& app, int* exit_code);
void register_tokenize(CLI::App& app, int* exit_code);

}  // namespace tools
}  // namespace phasekv
