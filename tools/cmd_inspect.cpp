// phasekv inspect MODEL.pkv [--ctx N] [--json] [--tensors] [--gates TEXT]
#include <cinttypes>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "file_io.h"
#include "gate_analysis.h"
#include "context.h"
#include "memory_plan.h"
#include "model_file.h"

namespace phasekv {
namespace tools {

namespace {

using nlohmann::json;

struct InspectArgs {
  BackendOptions be;
  std::string model;
  uint32_t ctx = 0;
  uint32_t batch = 256;
  int threads = 0;
  bool beyond = false;
  bool json = false;
  bool tensors = false;
  bool verify = false;
  std::string gates_text;  // --gates: calibration text for the static gate analysis
};

const char* rope_style_name(RopeStyle s) { return s == RopeStyle::NeoX ? "neox" : "interleaved"; }
const char* rope_scaling_name(RopeScaling s) {
  switch (s) {
    case RopeScaling::None: return "none";
    case RopeScaling::Linear: return "linear";
    case RopeScaling::YaRN: return "yarn";
    case RopeScaling::Llama3: return "llama3";
  }
  return "unknown";
}

std::string mib(uint64_t b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f MiB", double(b) / (1024.0 * 1024.0));
  return buf;
}

std::string shape_str(const std::vector<uint64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

json layer_json(uint32_t i, const AttentionMemory& m, const LayerMemoryPlan& p) {
  json j = {{"layer", i}, {"kind", memory_kind_name(m.kind)}, {"describe", m.describe()}};
  if (m.kind != MemoryKind::Full) j["L"] = m.local;
  if (m.kind == MemoryKind::Compressed) {
    j["W"] = m.window;
    j["S"] = m.stride;
    j["gate"] = gate_kind_name(m.gate);
    j["gate_maps"] = m.gate_maps == MapSharing::Shared ? "shared" : "per_offset";
    j["payload"] = m.payload == PayloadSource::LayerProjection ? "layer_projection" : "compressor_map";
    j["payload_maps"] = m.payload_maps == MapSharing::Shared ? "shared" : "per_offset";
    j["kv_tied"] = m.kv_tied;
    j["entry_rope"] = m.entry_rope == EntryRope::RotateTokens ? "rotate_tokens" : "rotate_entry";
    j["entry_norm"] = m.entry_norm;
    j["sink"] = m.sink;
    j["gap_accepted"] = m.gap_accepted;
  }
  j["exact_entries"] = p.exact_entries;
  j["compressed_entries"] = p.compressed_entries;
  j["accumulator_bytes"] = p.accumulator_bytes;
  j["kv_bytes"] = p.kv_bytes;
  return j;
}

// --gates TEXT: the static gate analysis (gate_analysis.h) instead of the model summary.
int run_gate_analysis(const InspectArgs& a) {
  std::string text;
  Status s = read_text_file("--gates", a.gates_text, &text);
  if (!s.ok()) return report("inspect", s);
  std::unique_ptr<Model> model;
  s = Model::load(a.model, a.be.load_options(), &model);
  if (!s.ok()) return report("inspect", s);
  GateAnalysis g;
  s = analyze_gates(*model, text, a.threads, &g);
  if (!s.ok()) return report("inspect", s);
  const auto& layers = model->spec().layers;
  if (a.json) {
    json br = json::array();
    for (const GateBranchStats& b : g.branches) {
      const AttentionMemory& m = layers[b.layer];
      br.push_back({{"layer", b.layer}, {"branch", b.branch == 0 ? "k" : "v"}, {"kv_head", b.kv_head},
                    {"W", m.window}, {"S", m.stride}, {"gate", gate_kind_name(m.gate)}, {"entries", b.entries},
                    {"mean_alpha", b.mean_alpha}, {"n_static", b.n_static}, {"n_window", b.n_window},
                    {"favoured", b.favoured}});
    }
    json j = {{"model", a.model}, {"calibration_tokens", g.tokens}, {"period", g.period}, {"branches", br},
              {"cover", g.cover}, {"predicted_weak", g.predicted_weak},
              {"rule", "cover(r) = max over layers, KV heads of min(key gate weight at the slots of residue r-2, "
                       "value gate weight at the slots of residue r); weak when cover(r) < 0.5 max cover"}};
    std::printf("%s\n", j.dump(2, ' ', false, json::error_handler_t::replace).c_str());
  } else {
    std::printf("gate analysis of %s over %u calibration tokens (period %u)\n", a.model.c_str(), g.tokens, g.period);
    std::printf("%5s %6s %4s %4s %4s %8s %8s %8s  %s\n", "layer", "branch", "head", "W", "S", "entries", "N_static",
                "N_window", "favoured offsets (mean weight)");
    for (const GateBranchStats& b : g.branches) {
      const AttentionMemory& m = layers[b.layer];
      std::string fav;
      for (int i : b.favoured) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%s%d (%.2f)", fav.empty() ? "" : ", ", i, b.mean_alpha[size_t(i)]);
        fav += buf;
      }
      std::printf("%5u %6s %4d %4u %4u %8llu %8.2f %8.2f  %s\n", b.layer, b.branch == 0 ? "k" : "v", b.kv_head,
                  m.window, m.stride, static_cast<unsigned long long>(b.entries), b.n_static, b.n_window,
                  fav.empty() ? "none above 1.5/W" : fav.c_str());
    }
    std::printf("cover by residue (value token mod %u):", g.period);
    for (double c : g.cover) std::printf(" %.2f", c);
    std::printf("\npredicted weak residues:");
    if (g.predicted_weak.empty()) std::printf(" none");
    for (int r : g.predicted_weak) std::printf(" %d", r);
    std::printf("\n");
  }
  s = flush_stdout();
  return s.ok() ? kExitOk : report("inspect", s);
}

int run_inspect(const InspectArgs& a) {
  if (!a.gates_text.empty()) return run_gate_analysis(a);
  std::unique_ptr<ModelFile> mf;
  ModelFile::OpenOptions fo;
  fo.verify = a.verify;
  Status s = ModelFile::open(a.model, fo, &mf);
  if (!s.ok()) return report("inspect", s);
  const ModelSpec& spec = mf->spec();
  const ModelConfig& c = spec.config;
  const uint32_t n_ctx = a.ctx ? a.ctx : c.max_positions;
  MemoryPlan plan;
  PlanParams pp;
  pp.n_ctx = n_ctx;
  pp.n_batch = a.batch;
  pp.beyond_trained = a.beyond;
  pp.n_threads = a.threads > 0 ? a.threads : default_context_params().n_threads;
  // The plan of the backend asked for (where each buffer lives, its workspace).
  std::unique_ptr<Backend> backend;
  BackendParams bp;
  bp.kind = a.be.kind();
  bp.n_threads = 1;  // the CPU backend's workspace is sized from pp.n_threads below, not its pool
  bp.device = a.be.device;
  bp.cuda_weights = a.be.weights();
  if (bp.kind != BackendKind::Cpu) {
    s = make_backend(bp, &backend);
    if (!s.ok()) return report("inspect", s.with_context("--backend"));
    if (std::string(backend->name()) != "cpu") pp.backend = backend.get();
  }
  s = plan_memory(spec, mf->header().blob_size, pp, &plan);
  if (!s.ok()) return report("inspect", s.with_context("--ctx"));

  struct DTypeTotal { uint64_t count = 0, bytes = 0; };
  std::map<std::string, DTypeTotal> by_dtype;
  uint64_t tensor_bytes = 0;
  for (const TensorInfo& t : spec.tensors) {
    by_dtype[dtype_name(t.dtype)].count++;
    by_dtype[dtype_name(t.dtype)].bytes += t.size;
    tensor_bytes += t.size;
  }
  const TokenizerData& tok = spec.tokenizer;

  if (a.json) {
    json j;
    j["file"] = {{"path", a.model}, {"size_bytes", mf->file_size()}, {"format_version", mf->header().version},
                 {"blob_offset", mf->header().blob_offset}, {"metadata_bytes", mf->header().meta_size}};
    const BlobHash& h = spec.blob_hash;
    j["integrity"] = {{"algorithm", h.present() ? "XXH3_128" : json(nullptr)},
                      {"blob_hash", h.present() ? json(h.hex()) : json(nullptr)},
                      {"verified", a.verify}};
    j["provenance"] = {{"source_file", spec.provenance.source_file},
                       {"source_format", spec.provenance.source_format},
                       {"source_name", spec.provenance.source_name},
                       {"converter", spec.provenance.converter}};
    j["config"] = {{"architecture", c.architecture}, {"vocab_size", c.vocab_size}, {"d_model", c.d_model},
                   {"n_layers", c.n_layers}, {"n_heads", c.n_heads}, {"n_kv_heads", c.n_kv_heads},
                   {"head_dim", c.head_dim}, {"ffn_dim", c.ffn_dim}, {"norm_eps", c.norm_eps},
                   {"rope", {{"theta", c.rope.theta}, {"dim", c.rope.dim}, {"style", rope_style_name(c.rope.style)},
                             {"scaling", rope_scaling_name(c.rope.scaling)}, {"factor", c.rope.factor},
                             {"original_context", c.rope.original_context}}},
                   {"max_positions", c.max_positions}, {"tied_embeddings", c.tied_embeddings},
                   {"bos_id", c.bos_id}, {"eos_id", c.eos_id}, {"pad_id", c.pad_id}};
    j["tokenizer"] = {{"type", tokenizer_type_name(tok.type)}, {"model", tok.model}, {"pre", tok.pre},
                      {"tokens", tok.tokens.size()}, {"merges", tok.merges.size()}, {"scores", tok.scores.size()},
                      {"bos_id", tok.bos_id}, {"eos_id", tok.eos_id}, {"eot_id", tok.eot_id},
                      {"pad_id", tok.pad_id}, {"unk_id", tok.unk_id}, {"add_bos", tok.add_bos},
                      {"add_eos", tok.add_eos}};
    j["chat_template_chars"] = spec.chat_template.size();
    json dt = json::object();
    for (const auto& kv : by_dtype) dt[kv.first] = {{"count", kv.second.count}, {"bytes", kv.second.bytes}};
    j["tensors"] = {{"count", spec.tensors.size()}, {"bytes_total", tensor_bytes}, {"by_dtype", dt}};
    if (a.tensors) {
      json list = json::array();
      for (const TensorInfo& t : spec.tensors)
        list.push_back({{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape},
                        {"offset", t.offset}, {"size", t.size}});
      j["tensors"]["list"] = list;
    }
    json layers = json::array();
    for (uint32_t i = 0; i < spec.layers.size(); ++i) layers.push_back(layer_json(i, spec.layers[i], plan.layers[i]));
    j["layers"] = layers;
    json buffers = json::array();
    for (const PlanBuffer& b : plan.buffers)
      buffers.push_back({{"name", b.name}, {"bytes", b.bytes}, {"space", memory_space_name(b.space)}});
    j["plan"] = {{"n_ctx", plan.n_ctx}, {"n_batch", plan.n_batch}, {"n_threads", plan.n_threads},
                 {"kv_elem_bytes", plan.kv_elem_bytes}, {"kv_dtype", "f32"},
                 {"backend", plan.backend}, {"weights_bytes", plan.weights_bytes},
                 {"weights_source", plan.weights_space == MemorySpace::Host     ? "mmap"
                                    : plan.weights_space == MemorySpace::Device ? "device copy"
                                                                                : "mapped pinned host copy"},
                 {"space_bytes", {{"host", plan.space_bytes[0]}, {"pinned_host", plan.space_bytes[1]},
                                  {"device", plan.space_bytes[2]}}},
                 {"kv_bytes_total", plan.kv_bytes_total}, {"scratch_bytes", plan.scratch_bytes},
                 {"workspace_bytes", plan.workspace_bytes}, {"context_bytes", plan.arena_bytes},
                 {"total_bytes", plan.weights_bytes + plan.arena_bytes}, {"buffers", buffers}};
    // Strings from the file may hold invalid UTF-8: replaced (U+FFFD), never an exception.
    std::printf("%s\n", j.dump(2, ' ', false, json::error_handler_t::replace).c_str());
    return kExitOk;
  }

  // Strings from the file are shown escaped: a control character in a name cannot drive the terminal.
  auto esc = [](const std::string& x) { return display_escape(x); };
  std::printf("model       %s (%s, format %u)\n", esc(a.model).c_str(), mib(mf->file_size()).c_str(),
              mf->header().version);
  std::printf("source      %s (%s) %s; %s\n", esc(spec.provenance.source_file).c_str(),
              esc(spec.provenance.source_format).c_str(), esc(spec.provenance.source_name).c_str(),
              esc(spec.provenance.converter).c_str());
  if (spec.blob_hash.present())
    std::printf("integrity   XXH3-128 %s (%s)\n", spec.blob_hash.hex().c_str(),
                a.verify ? "verified: the tensor data matches" : "not checked; --verify checks it");
  else
    std::printf("integrity   no content hash recorded (converted by an older phasekv)\n");
  std::printf("\nhyper-parameters\n");
  std::printf("  architecture %-10s vocab_size %-8u d_model %-6u n_layers %u\n", esc(c.architecture).c_str(),
              c.vocab_size, c.d_model, c.n_layers);
  std::printf("  n_heads %-4u n_kv_heads %-4u head_dim %-4u ffn_dim %-6u norm_eps %g\n", c.n_heads, c.n_kv_heads,
              c.head_dim, c.ffn_dim, double(c.norm_eps));
  std::printf("  rope theta %g dim %u style %s scaling %s", double(c.rope.theta), c.rope.dim,
              rope_style_name(c.rope.style), rope_scaling_name(c.rope.scaling));
  if (c.rope.scaling != RopeScaling::None) std::printf(" factor %g", double(c.rope.factor));
  std::printf("\n  max_positions %u  tied_embeddings %s  bos %d eos %d pad %d\n", c.max_positions,
              c.tied_embeddings ? "yes" : "no", c.bos_id, c.eos_id, c.pad_id);
  std::printf("\ntokenizer   %s (model '%s', pre '%s'): %zu tokens, %zu merges; chat template %zu chars\n",
              tokenizer_type_name(tok.type), esc(tok.model).c_str(), esc(tok.pre).c_str(), tok.tokens.size(),
              tok.merges.size(), spec.chat_template.size());
  std::printf("\ntensors     %zu, %s\n", spec.tensors.size(), mib(tensor_bytes).c_str());
  for (const auto& kv : by_dtype)
    std::printf("  %-5s %5" PRIu64 " tensors %12" PRIu64 " bytes (%s)\n", kv.first.c_str(), kv.second.count,
                kv.second.bytes, mib(kv.second.bytes).c_str());
  if (a.tensors) {
    for (const TensorInfo& t : spec.tensors)
      std::printf("    %-32s %-5s %-16s offset %12" PRIu64 " size %10" PRIu64 "\n", esc(t.name).c_str(),
                  dtype_name(t.dtype), shape_str(t.shape).c_str(), t.offset, t.size);
  }

  std::printf("\nattention memory per layer, planned for n_ctx = %u (K and V in f32)\n", n_ctx);
  std::printf("  %-8s %-44s %13s %18s %14s\n", "layers", "memory", "exact_entries", "compressed_entries",
              "kv_bytes/layer");
  for (size_t i = 0; i < spec.layers.size();) {
    size_t j = i;
    while (j + 1 < spec.layers.size() && spec.layers[j + 1] == spec.layers[i]) ++j;
    const LayerMemoryPlan& p = plan.layers[i];
    std::string range = i == j ? std::to_string(i) : std::to_string(i) + "-" + std::to_string(j);
    std::printf("  %-8s %-44s %13" PRIu64 " %18" PRIu64 " %14" PRIu64 "\n", range.c_str(),
                spec.layers[i].describe().c_str(), p.exact_entries, p.compressed_entries, p.kv_bytes);
    i = j + 1;
  }
  std::printf("\n%s", plan.itemised().c_str());
  std::printf("  kv_bytes_total              %14" PRIu64 " B\n", plan.kv_bytes_total);
  std::printf("  total (context + weights)   %14" PRIu64 " B  %10.2f MiB\n", plan.arena_bytes + plan.weights_bytes,
              double(plan.arena_bytes + plan.weights_bytes) / (1 << 20));
  return kExitOk;
}

}  // namespace

void register_inspect(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* cmd = app.add_subcommand("inspect", "Show a model's hyper-parameters, memory layout and memory plan");
  cmd->add_option("MODEL", args->model, "PhaseKV model file (.pkv)")->required();
  cmd->add_option("--ctx", args->ctx, "Context length to plan memory for (default: the model's max_positions)")
      ->check(CLI::Range(1u, 1u << 24));
  cmd->add_option("-b,--batch", args->batch, "Prefill chunk the plan sizes activations for")
      ->default_val(256)
      ->check(CLI::Range(1u, 1u << 20));
  cmd->add_option("-t,--threads", args->threads, "CPU threads the plan sizes the backend scratch for (default: all)");
  add_backend_options(cmd, &args->be);
  cmd->add_flag("--beyond-trained", args->beyond, "Allow --ctx above the model's trained context (max_positions)");
  cmd->add_flag("--json", args->json, "Print JSON instead of tables");
  cmd->add_flag("--tensors", args->tensors, "List every tensor");
  cmd->add_option("--gates", args->gates_text,
                  "Static gate analysis over this calibration text instead of the summary: per compressed layer, "
                  "branch and KV head the effective offsets N_static = exp(H(E[alpha])) and N_window = "
                  "E[exp(H(alpha))], the favoured offsets, and the residues the gates predict weak");
  cmd->add_flag("--verify", args->verify,
                "Check the tensor data against the content hash written by convert (exit 2 on a mismatch, or "
                "for a file that records none)");
  cmd->callback([args, exit_code] {
    if (!exit_code) return;  // parse only (fuzz_cli)
    *exit_code = run_inspect(*args);
  });
}

}  // namespace tools
}  // namespace phasekv
