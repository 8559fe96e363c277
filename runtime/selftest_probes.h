// Probes of the phase self-test: the template split at its slot, the token material drawn from
// the model's vocabulary, and the key:value retrieval probes that sweep a target through every
// residue with two padding protocols (DESIGN.md section 6; the run is in selftest.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model.h"

namespace phasekv {

// ---- template ------------------------------------------------------------------------------

constexpr const char* kContentSlot = "{{content}}";

// A template split at its slot and tokenized with the model's tokenizer (specials written
// literally are parsed as specials; BOS is prepended when the tokenizer adds one).
struct ProbeTemplate {
  std::string prefix_text, suffix_text;
  std::vector<int32_t> prefix;  // tokens before the slot: the slot starts at t0 = prefix.size()
  std::vector<int32_t> suffix;  // tokens after the slot
};

// Errors (kInvalidArgument): no slot, more than one slot, a slot inside a special token,
// text that is not UTF-8, a leading UTF-8 byte-order mark.
Status parse_template(const Tokenizer& tok, const std::string& text, ProbeTemplate* out);
// The model's own chat template with the probe as the user message (and the generation
// prompt after it), as template text with a slot.
Status chat_probe_template(const Model& model, std::string* text);

// ---- probes ----------------------------------------------------------------------------------

enum class Protocol : uint8_t {
  Outer = 0,       // the whole content shifts by s pad tokens; slack before the query shrinks
  InSequence = 1,  // only the target record shifts: s pads before it, 2P-2-s after it (kept
                   // inside the neighbouring lines, so every record still follows a newline)
};
const char* protocol_name(Protocol p);

// Token material for probes, chosen from the vocabulary and checked to round-trip.
struct ProbeVocab {
  std::vector<int32_t> keys;    // single-token words (" apple")
  std::vector<int32_t> values;  // single-token words, disjoint from keys
  int32_t sep = -1;             // ":"
  int32_t newline = -1;         // "\n"
  int32_t pad = -1;             // neutral padding token that never merges (" -")
  // Filler lines (without their newline): neutral sentences (" The bus was late again."),
  // each checked to keep its ids between newlines and after pads.
  std::vector<std::vector<int32_t>> sentences;
};
// Collects at least `per_side` (and 64) keys and as many values, and the filler sentences
// that survive the round-trip checks (at least 8, one of them at most 3 tokens long).
Status build_probe_vocab(const Tokenizer& tok, size_t per_side, ProbeVocab* out);

// The neutral padding token: the first of " -", " *", " ~", " |", " =", " +", " ." that is
// one token, stays one token per copy in a run of 40, and keeps its neighbours' newlines; its
// text in *text. -1 when none does.
int32_t neutral_pad(const Tokenizer& tok, std::string* text = nullptr);

// One probe: the ids to evaluate (ending with the answer prefix "<key>:"), the gold value,
// and where the target sits.
// With K targets (ProbeLayout::targets) the probe holds K target records next to each other
// where one target would be, and the query section looks all K up, in a random order, each
// answer teacher-forced before the next lookup: target i is scored on the logits after
// ids[0, score_end[i]) against golds[i]. Every target moves with the shift, so over the P
// probes of a cluster each target visits every residue exactly once.
struct Probe {
  std::vector<int32_t> ids;
  int32_t gold = -1;        // the first target's value
  uint32_t value_pos = 0;   // position of the first target's value token
  uint32_t key_pos = 0;     // position of the first target's key token
  uint32_t shared = 0;      // leading tokens shared by every probe of its cluster
  int32_t residue = 0;      // value_pos mod P
  int32_t shift = 0;        // s
  // Per target, in scoring order (K = 1: the one target, score_end = ids.size()).
  std::vector<int32_t> golds;
  std::vector<uint32_t> score_end;   // ascending; the last is ids.size()
  std::vector<uint32_t> value_positions;
  std::vector<int32_t> residues;     // value_positions mod P
};

struct ProbeLayout {
  uint32_t period = 8;      // P
  uint32_t length = 512;    // tokens per probe (the query position is length - 1)
  uint32_t records = 16;    // key = value records per probe (fewer when they do not fit)
  uint32_t min_distance = 32;  // every target value lies at least this far before its query
  Protocol protocol = Protocol::InSequence;
  uint32_t targets = 1;     // K records looked up per probe (at most records - 4)
};

// How many records a probe of this layout holds: min(layout.records, what fits); the rest of
// the probe is filler sentences. kInvalidArgument, with the arithmetic, when the template, the
// padding and the target's distance from the query leave no room for 8 records.
Status probe_records(const ProbeTemplate& t, const ProbeLayout& layout, uint32_t* n_records);

// The P probes of logical sample `cluster`: shifts s = b..b+P-1 (every residue once), b in
// [0, P) chosen so that shift b puts the target value on residue (cluster mod P). Over any P
// consecutive samples each residue's mean target position is then the same: position(r) =
// base + ((r - cluster) mod P), and the second term sums to P(P-1)/2 for every r.
// Deterministic for (seed, cluster).
Status make_cluster(const ProbeTemplate& t, const ProbeVocab& v, const ProbeLayout& layout, uint64_t seed,
                    int32_t cluster, std::vector<Probe>* out);

}  // namespace phasekv
