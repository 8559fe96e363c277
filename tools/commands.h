// Sub-commands of the `phasekv` tool. Each registers its options on the CLI11 app and
// returns the process exit code from its run function.
#pragma once

#include <CLI/CLI.hpp>

#include "backends.h"
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
// file and an interrupted or failed write leaves the previous file (if any) as it was: the
// data goes to a temporary file in the same directory, is flushed to disk, and is renamed over
// the path. Refused with kIoError naming the option and path: an existing path that is not a
// regular file (a directory, FIFO or device), an unwritable directory, a failed write.
Status write_file_atomic(const char* option, const std::string& path, const std::string& data);

// Exit code of a command stopped by SIGINT (128 + 2, as a shell reports it).
constexpr int kExitInterrupted = 130;

// --backend / --device / --cuda-weights, shared by run, bench, selftest and inspect.
struct BackendOptions {
  std::string backend = "cpu";
  int device = 0;
  std::string cuda_weights = "auto";
  std::string kernels;  // --kernels SPEC; empty: the command's default (kernels_default)
  BackendKind kind() const;
  // The CPU kernel spec to use: --kernels, else $PHASEKV_KERNELS, else `command_default`.
  const char* kernel_spec(const char* command_default) const;
  CudaWeights weights() const;
};
// `kernels_default` is what --help says --kernels defaults to ("q8" for run and bench).
void add_backend_options(CLI::App* cmd, BackendOptions* o, const char* kernels_default = "reference");

void register_convert(CLI::App& app, int* exit_code);
void register_inspect(CLI::App& app, int* exit_code);
void register_run(CLI::App& app, int* exit_code);
void register_bench(CLI::App& app, int* exit_code);
void register_selftest(CLI::App& app, int* exit_code);
void register_perplexity(CLI::App& app, int* exit_code);
void register_tokenize(CLI::App& app, int* exit_code);

}  // namespace tools
}  // namespace phasekv
