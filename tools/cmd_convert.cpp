// phasekv convert --from gguf IN.gguf OUT.pkv [--kv SPEC]... [--gates FILE.safetensors]
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "file_io.h"
#include "gguf_import.h"
#include "model_file.h"
#include "safetensors.h"

namespace phasekv {
namespace tools {

namespace {

struct ConvertArgs {
  std::string from = "gguf";
  std::string in;
  std::string out;
  std::vector<std::string> kv;
  std::string gates;
  bool force = false;
};

int run_convert(const ConvertArgs& a) {
  if (a.from != "gguf")
    return report("convert", make_error(StatusCode::kInvalidArgument, "--from '%s': only 'gguf' is supported",
                                        a.from.c_str()));
  // Before any work: OUT must be a regular file or absent, and never one of the inputs.
  Status cs = check_outputs({{"OUT", a.out}}, {{"IN", a.in}, {"--gates", a.gates}});
  if (!cs.ok()) return report("convert", cs);
  struct stat so;
  if (!a.force && stat(a.out.c_str(), &so) == 0)
    return report("convert", make_error(StatusCode::kInvalidArgument, "OUT '%s' exists (pass --force to replace it)",
                                        display_escape(a.out).c_str()));
  ImportOptions opts;
  opts.kv_specs = a.kv;
  opts.replace = a.force;  // without --force, a file another writer finishes first is kept
  if (!a.gates.empty()) {
    Status gs = read_safetensors(a.gates, &opts.extra_tensors);
    if (!gs.ok()) return report("convert", gs.with_context("--gates"));
  }
  ModelSpec spec;
  const auto t0 = std::chrono::steady_clock::now();
  Status s = convert_gguf_to_pkv(a.in, a.out, opts, &spec);
  if (!s.ok()) return report("convert", s);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Re-open what was written: the file must pass the same verification as any user's load.
  std::unique_ptr<ModelFile> mf;
  ModelFile::OpenOptions check;
  check.verify = true;  // and its tensor data must match the content hash just recorded
  s = ModelFile::open(a.out, check, &mf);
  if (!s.ok()) return report("convert", s.with_context("verifying the written file"));
  std::printf("converted %s -> %s in %.2f s\n", display_escape(a.in).c_str(), display_escape(a.out).c_str(), secs);
  std::printf("  %zu tensors, %.1f MiB of weights, file %.1f MiB\n", spec.tensors.size(),
              double(mf->header().blob_size) / (1 << 20), double(mf->file_size()) / (1 << 20));
  std::printf("  content hash (XXH3-128) %s\n", mf->spec().blob_hash.hex().c_str());
  // Summarise the per-layer memory as runs of identical descriptors.
  const auto& L = spec.layers;
  for (size_t i = 0; i < L.size();) {
    size_t j = i;
    while (j + 1 < L.size() && L[j + 1] == L[i]) ++j;
    std::printf("  layers %zu-%zu: %s\n", i, j, L[i].describe().c_str());
    i = j + 1;
  }
  return kExitOk;
}

}  // namespace

void register_convert(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* cmd = app.add_subcommand("convert", "Convert a GGUF model into a PhaseKV model file (.pkv)");
  cmd->add_option("--from", args->from, "Source format")->default_val("gguf");
  cmd->add_option("IN", args->in, "Source model file (GGUF v2/v3, llama architecture)")->required();
  cmd->add_option("OUT", args->out, "PhaseKV model file to write")->required();
  cmd->add_option("--kv", args->kv,
                  "Attention memory per layer, repeatable, later wins: [LAYERS:]KIND[:PARAMS], e.g. full, "
                  "sliding:L=512, 0-1:full, 2-29:compressed:W=8,S=4,L=64,gate=uniform; planted gates "
                  "(last parameter): gate=planted:K=2,V=5[,strength=10] or gate=planted:weak=5[,6...]; see the "
                  "README for every parameter (default: full)")
      ->allow_extra_args(false)
      ->take_all();
  cmd->add_option("--gates", args->gates,
                  "safetensors file with trained compressor tensors (gates, payload maps, entry norms, sinks) "
                  "for the layers --kv declares gate=scalar|vector, payload=map, entry_norm=1 or sink=1; names "
                  "and shapes in the README")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--force", args->force, "Replace OUT if it exists");
  cmd->callback([args, exit_code] {
    if (!exit_code) return;  // parse only (fuzz_cli)
    *exit_code = run_convert(*args);
  });
}

}  // namespace tools
}  // namespace phasekv
