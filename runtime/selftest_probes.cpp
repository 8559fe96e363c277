// Probes of the phase self-test; the design is in selftest_probes.h.
#include "selftest_probes.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "chat_template.h"
#include "selftest_stats.h"

namespace phasekv {

// ---- template ------------------------------------------------------------------------------

Status parse_template(const Tokenizer& tok, const std::string& text, ProbeTemplate* out) {
  // An editor's byte-order mark would be tokenized as content before the slot and silently
  // shift the slot's phase (and the deployed prompt has no BOM).
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0)
    return make_error(StatusCode::kInvalidArgument,
                      "the template starts with a UTF-8 byte-order mark (EF BB BF), which would be tokenized before "
                      "the slot and shift its phase; save the file without a BOM");
  const std::string slot = kContentSlot;
  const size_t first = text.find(slot);
  if (first == std::string::npos)
    return make_error(StatusCode::kInvalidArgument, "the template has no %s slot (exactly one is needed)",
                      kContentSlot);
  size_t count = 0;
  for (size_t at = first; at != std::string::npos; at = text.find(slot, at + slot.size())) ++count;
  if (count > 1)
    return make_error(StatusCode::kInvalidArgument, "the template has %zu %s slots (exactly one is allowed)", count,
                      kContentSlot);
  ProbeTemplate t;
  t.prefix_text = text.substr(0, first);
  t.suffix_text = text.substr(first + slot.size());
  // A slot inside a special token's text ("<|im_st{{content}}art|>") splits the special.
  const std::string joined = t.prefix_text + t.suffix_text;
  const size_t cut = t.prefix_text.size();
  for (int32_t id = 0; id < tok.n_tokens(); ++id) {
    if (!tok.is_special(id)) continue;
    std::string s;
    if (!tok.token_bytes(id, &s).ok() || s.size() < 2) continue;
    const size_t lo = cut >= s.size() ? cut - s.size() + 1 : 0;
    for (size_t start = lo; start < cut; ++start)
      if (start + s.size() <= joined.size() && joined.compare(start, s.size(), s) == 0)
        return make_error(StatusCode::kInvalidArgument,
                          "the %s slot is inside the special token '%s' (template byte %zu)", kContentSlot,
                          s.c_str(), first);
  }
  Status s = tok.encode(t.prefix_text, true, &t.prefix);
  if (!s.ok()) return s.with_context("template text before the slot");
  s = tok.encode(t.suffix_text, true, &t.suffix);
  if (!s.ok()) return s.with_context("template text after the slot");
  if (tok.add_bos() && tok.bos() >= 0) t.prefix.insert(t.prefix.begin(), tok.bos());
  *out = std::move(t);
  return Status::Ok();
}

Status chat_probe_template(const Model& model, std::string* text) {
  const std::string& jinja = model.spec().chat_template;
  if (jinja.empty())
    return make_error(StatusCode::kInvalidArgument, "--chat: the model file has no chat template (use --template)");
  return apply_chat_template(jinja, {ChatMessage{"user", kContentSlot}}, true, text);
}

// ---- probe vocabulary ------------------------------------------------------------------------

const char* protocol_name(Protocol p) { return p == Protocol::Outer ? "outer" : "in_sequence"; }

namespace {

bool encodes_to(const Tokenizer& tok, const std::string& text, const std::vector<int32_t>& ids) {
  std::vector<int32_t> got;
  return tok.encode(text, false, &got).ok() && got == ids;
}

int32_t single_token(const Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> got;
  if (!tok.encode(text, false, &got).ok() || got.size() != 1) return -1;
  return got[0];
}

// Neutral filler: everyday sentences with nothing to look up, drawn at random so the filler
// is not one repeated block. Short ones let a region be filled to the exact token count.
constexpr const char* kSentences[] = {
    " The kettle is on the stove.",
    " It rained for most of the afternoon.",
    " The bus was late again.",
    " A cat slept on the warm windowsill.",
    " We walked along the river after lunch.",
    " The library closes at six.",
    " Fresh bread was sold out by noon.",
    " The garden needs more water.",
    " Nobody answered the phone.",
    " The train left on time.",
    " Children played in the park.",
    " The meeting moved to Tuesday.",
    " Snow covered the hills overnight.",
    " The old bridge was repaired last year.",
    " She painted the fence green.",
    " The shop on the corner sells maps.",
    " Coffee tastes better in the morning.",
    " The wind came from the north.",
    " He forgot his umbrella at work.",
    " The museum opened a new wing.",
    " Birds gathered on the roof.",
    " The road to the village is narrow.",
    " A letter arrived in the afternoon.",
    " The lamp flickered twice.",
    " Dinner was ready before seven.",
    " The river rose after the storm.",
    " Our neighbour fixed the gate.",
    " The clock in the hall runs slow.",
    " Apples fell from the tree.",
    " The tea had gone cold.",
    " Everyone agreed to meet again next week.",
    " The lights in the office stayed on late.",
    " A small boat drifted past the pier.",
    " The soup needed a little more salt.",
    " Yes.",
    " Fine.",
    " Okay.",
    " Thanks.",
    " Not yet.",
    " See you soon.",
};

}  // namespace

int32_t neutral_pad(const Tokenizer& tok, std::string* text) {
  const int32_t newline = single_token(tok, "\n");
  if (newline < 0) return -1;
  for (const char* f : {" -", " *", " ~", " |", " =", " +", " ."}) {
    const int32_t id = single_token(tok, f);
    if (id < 0) continue;
    std::string run;
    for (int i = 0; i < 40; ++i) run += f;
    if (encodes_to(tok, run, std::vector<int32_t>(40, id)) &&
        encodes_to(tok, "\n" + std::string(f) + f + "\n", {newline, id, id, newline})) {
      if (text) *text = f;
      return id;
    }
  }
  return -1;
}

Status build_probe_vocab(const Tokenizer& tok, size_t per_side, ProbeVocab* out) {
  ProbeVocab v;
  v.sep = single_token(tok, " =");
  v.newline = single_token(tok, "\n");
  if (v.sep < 0 || v.newline < 0)
    return make_error(StatusCode::kUnsupported, "the tokenizer has no single token for ' =' or a newline");
  std::string pad_text;
  v.pad = neutral_pad(tok, &pad_text);
  if (v.pad < 0) return make_error(StatusCode::kUnsupported, "no neutral padding token round-trips in this vocabulary");
  size_t shortest = SIZE_MAX;
  for (const char* sentence : kSentences) {
    std::vector<int32_t> ids;
    if (!tok.encode(sentence, false, &ids).ok() || ids.empty()) continue;
    std::vector<int32_t> line = {v.newline};
    line.insert(line.end(), ids.begin(), ids.end());
    line.push_back(v.newline);
    std::vector<int32_t> padded = {v.pad, v.pad};
    padded.insert(padded.end(), ids.begin(), ids.end());
    padded.push_back(v.pad);
    if (!encodes_to(tok, "\n" + std::string(sentence) + "\n", line) ||
        !encodes_to(tok, pad_text + pad_text + sentence + pad_text, padded))
      continue;
    shortest = std::min(shortest, ids.size());
    v.sentences.push_back(std::move(ids));
  }
  if (v.sentences.size() < 8 || shortest > 3)
    return make_error(StatusCode::kUnsupported,
                      "only %zu of the %zu filler sentences keep their tokens in this vocabulary (8 needed, one "
                      "of at most 3 tokens)",
                      v.sentences.size(), std::size(kSentences));
  // Words " abcd".." abcdefgh" that stay one token next to ' =' and newlines, in BPE merge
  // order (frequency) after skipping the 300 most frequent (function words), alternately keys
  // and values.
  int32_t n = 0, skipped = 0;
  per_side = std::max<size_t>(per_side, 64);
  for (int32_t id = 0; id < tok.n_tokens() && v.values.size() < per_side; ++id) {
    if (tok.is_special(id)) continue;
    std::string s;
    if (!tok.token_bytes(id, &s).ok() || s.size() < 5 || s.size() > 9 || s[0] != ' ') continue;
    bool word = true;
    for (size_t i = 1; i < s.size(); ++i) word &= s[i] >= 'a' && s[i] <= 'z';
    if (!word) continue;
    if (!encodes_to(tok, s, {id}) || !encodes_to(tok, "\n" + s + " =", {v.newline, id, v.sep}) ||
        !encodes_to(tok, " =" + s + "\n", {v.sep, id, v.newline}))
      continue;
    if (skipped++ < 300) continue;
    (n % 2 == 0 ? v.keys : v.values).push_back(id);
    ++n;
  }
  if (v.values.size() < per_side)
    return make_error(StatusCode::kUnsupported, "the vocabulary has only %zu usable single-token words (%zu needed)",
                      v.keys.size() + v.values.size(), 2 * per_side);
  *out = std::move(v);
  return Status::Ok();
}

// ---- probes ----------------------------------------------------------------------------------

namespace {

constexpr uint32_t kRecord = 4;      // key ' =' value '\n'
constexpr uint32_t kDemos = 4;       // lookups of other records shown before the query
constexpr uint32_t kMinRecords = 8;  // the target, the demonstrated ones and a few more

// Deterministic per (seed, cluster).
uint64_t cluster_seed(uint64_t seed, int32_t cluster, uint64_t salt) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + uint64_t(cluster) * 0xBF58476D1CE4E5B9ull + salt;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// k distinct draws from [0, n).
std::vector<int32_t> distinct(selftest::Rng& rng, size_t n, size_t k) {
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  for (size_t i = 0; i < k; ++i) std::swap(idx[i], idx[i + size_t(rng.below(uint64_t(n - i)))]);
  idx.resize(k);
  return idx;
}

// The probe's arithmetic, shared by probe_records and make_cluster.
struct Budget {
  uint64_t query = 0;      // template suffix + demonstrations + the K lookups ("key =" each, and
                           // the teacher-forced "value \n" of all but the last)
  uint64_t haystack = 0;   // tokens for records and filler (the targets' lines included)
  uint64_t min_after = 0;  // tokens the haystack must hold after the targets' lines
};

Budget probe_budget(const ProbeTemplate& t, const ProbeLayout& L) {
  Budget b;
  const uint32_t slack = 2 * L.period - 2;
  const uint64_t K = std::max<uint32_t>(L.targets, 1);
  // Up to the first lookup's "key =": the distance every target must keep is to that query.
  const uint64_t first_query = uint64_t(t.suffix.size()) + kDemos * kRecord + 2;
  b.query = first_query + (K - 1) * kRecord;
  const uint64_t fixed = uint64_t(t.prefix.size()) + b.query + slack;
  b.haystack = L.length > fixed ? L.length - fixed : 0;
  // Tokens after the last target's value: its newline, the lines after it, the remaining slack
  // (>= 0) and the query section up to the first lookup, whose "=" is the first query position.
  b.min_after = L.min_distance > first_query + 1 ? L.min_distance - first_query - 1 : 0;
  return b;
}

// One region of the haystack: `n_records` record lines (indices into the cluster's records)
// and filler lines, `budget` tokens in all; what no sentence fits into is returned as pads.
void fill_region(selftest::Rng& rng, const ProbeVocab& v, uint64_t budget, const std::vector<uint32_t>& recs,
                 std::vector<std::vector<int32_t>>* lines, std::vector<int32_t>* line_record, uint64_t* pads) {
  uint64_t left = budget - uint64_t(recs.size()) * kRecord;
  lines->clear();
  line_record->clear();
  for (;;) {
    // A random sentence among those that still fit (with their newline).
    uint32_t fits = 0;
    for (const auto& s : v.sentences) fits += s.size() + 1 <= left ? 1 : 0;
    if (fits == 0) break;
    uint64_t pick = rng.below(fits);
    for (const auto& s : v.sentences) {
      if (s.size() + 1 > left) continue;
      if (pick-- == 0) {
        lines->push_back(s);
        lines->back().push_back(v.newline);
        line_record->push_back(-1);
        left -= s.size() + 1;
        break;
      }
    }
  }
  // Records between random lines.
  for (uint32_t r : recs) {
    const size_t at = size_t(rng.below(uint64_t(lines->size()) + 1));
    lines->insert(lines->begin() + std::ptrdiff_t(at), std::vector<int32_t>());
    line_record->insert(line_record->begin() + std::ptrdiff_t(at), int32_t(r));
  }
  *pads = left;
}

}  // namespace

Status probe_records(const ProbeTemplate& t, const ProbeLayout& L, uint32_t* n_records) {
  const uint32_t P = L.period;
  if (P < 2) return make_error(StatusCode::kInvalidArgument, "period %u: a sweep needs at least 2 residues", P);
  if (L.records < kMinRecords)
    return make_error(StatusCode::kInvalidArgument, "%u records per probe: at least %u are needed", L.records,
                      kMinRecords);
  const uint32_t K = std::max<uint32_t>(L.targets, 1);
  if (K + kDemos > L.records)
    return make_error(StatusCode::kInvalidArgument,
                      "%u targets per probe need at least %u records (the targets and %u demonstrated others); "
                      "%u were asked for",
                      K, K + kDemos, kDemos, L.records);
  const Budget b = probe_budget(t, L);
  // The targets' lines, the lines after them, and a record before them (in-sequence padding
  // hangs on the previous line's newline); the other records can go anywhere.
  // (Records are whole lines, so two regions may each leave up to 3 tokens unused.)
  const uint64_t need_haystack = std::max<uint64_t>(uint64_t(kRecord) * std::max(kMinRecords, K + kDemos) + 8,
                                                    (K + 1) * kRecord + b.min_after);
  if (b.haystack < need_haystack)
    return make_error(StatusCode::kInvalidArgument,
                      "a probe of %u tokens is too small: the template takes %zu + %zu tokens, the padding %u, the "
                      "query %llu, and %u records with the target %u tokens from the query need %llu more",
                      L.length, t.prefix.size(), t.suffix.size(), 2 * P - 2,
                      (unsigned long long)(b.query - t.suffix.size()), kMinRecords, L.min_distance,
                      (unsigned long long)(need_haystack - b.haystack));
  *n_records = uint32_t(std::min<uint64_t>(L.records, (b.haystack - 8) / kRecord));
  PKV_ASSERT(*n_records >= K + kDemos);
  return Status::Ok();
}

Status make_cluster(const ProbeTemplate& t, const ProbeVocab& v, const ProbeLayout& L, uint64_t seed,
                    int32_t cluster, std::vector<Probe>* out) {
  const uint32_t P = L.period;
  uint32_t n_records = 0;
  PKV_RETURN_IF_ERROR(probe_records(t, L, &n_records));
  const uint32_t slack = 2 * P - 2;
  const Budget b = probe_budget(t, L);
  if (n_records > v.keys.size() || n_records > v.values.size())
    return make_error(StatusCode::kInvalidArgument, "a probe of %u tokens needs %u distinct keys; the vocabulary has %zu",
                      L.length, n_records, std::min(v.keys.size(), v.values.size()));

  // Layout of the content (outer padding; in-sequence moves the shift next to the targets):
  //   [s pads] [extra pads] before-lines  (key = value \n) x K  after-lines [pads] [2P-2-s pads]
  // then the template suffix, kDemos demonstration lookups ("key = value" of other records)
  // and the K lookups "key =" of the targets (each but the last followed by its gold value).
  // Records are the K targets and n_records - K distractors spread over filler lines; the
  // targets' lines start anywhere that keeps the last of them min_distance from the first
  // lookup and leaves a record before them.
  selftest::Rng rng(cluster_seed(seed, cluster, uint64_t(L.protocol)));
  const std::vector<int32_t> ki = distinct(rng, v.keys.size(), n_records);
  const std::vector<int32_t> vi = distinct(rng, v.values.size(), n_records);
  const uint32_t K = std::max<uint32_t>(L.targets, 1);  // records 0..K-1 are the targets, the others distractors
  const uint64_t rest = b.haystack - uint64_t(K) * kRecord;  // lines other than the targets'
  const uint64_t after_lo = b.min_after, after_hi = rest - kRecord;
  const uint64_t after = after_lo + rng.below(after_hi - after_lo + 1);
  // Distractors: each on a side with probability proportional to its room, one before the
  // target at least, and no side holding more records than it has room for.
  std::vector<uint32_t> before_recs, after_recs;
  for (uint32_t i = K; i < n_records; ++i)
    (rng.below(rest) < after ? after_recs : before_recs).push_back(i);
  auto move_one = [](std::vector<uint32_t>* from, std::vector<uint32_t>* to) {
    to->push_back(from->back());
    from->pop_back();
  };
  // (n_records <= (haystack - 8) / 4 leaves room for all of them on the two sides.)
  if (before_recs.empty()) move_one(&after_recs, &before_recs);
  while (uint64_t(after_recs.size()) * kRecord > after) move_one(&after_recs, &before_recs);
  while (uint64_t(before_recs.size()) * kRecord > rest - after) move_one(&before_recs, &after_recs);
  PKV_ASSERT(uint64_t(after_recs.size()) * kRecord <= after && !before_recs.empty());
  std::vector<std::vector<int32_t>> before_lines, after_lines;
  std::vector<int32_t> before_rec, after_rec;
  uint64_t extra = 0, after_pads = 0;
  fill_region(rng, v, rest - after, before_recs, &before_lines, &before_rec, &extra);
  fill_region(rng, v, after, after_recs, &after_lines, &after_rec, &after_pads);
  // Demonstrations: kDemos distractors, in random order; then the targets' lookup order.
  std::vector<int32_t> demo = distinct(rng, n_records - K, kDemos);
  for (int32_t& d : demo) d += int32_t(K);
  const std::vector<int32_t> order = K > 1 ? distinct(rng, K, K) : std::vector<int32_t>{0};

  auto record = [&](uint32_t i, std::vector<int32_t>* ids) {
    ids->push_back(v.keys[size_t(ki[i])]);
    ids->push_back(v.sep);
    ids->push_back(v.values[size_t(vi[i])]);
    ids->push_back(v.newline);
  };
  auto region = [&](const std::vector<std::vector<int32_t>>& lines, const std::vector<int32_t>& rec,
                    std::vector<int32_t>* ids) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (rec[i] >= 0)
        record(uint32_t(rec[i]), ids);
      else
        ids->insert(ids->end(), lines[i].begin(), lines[i].end());
    }
  };
  uint64_t before_tokens = 0;
  for (size_t i = 0; i < before_lines.size(); ++i) before_tokens += before_rec[i] >= 0 ? kRecord : before_lines[i].size();
  // Value position of the first target at shift 0 (both protocols); the first shift puts it on
  // residue (cluster mod P), so over any P consecutive samples every residue's mean position of
  // the first target is the same (and of every other target, which sits 4i tokens after it).
  const uint32_t pos0 = uint32_t(t.prefix.size() + extra + before_tokens + 2);
  const uint32_t base = (uint32_t(cluster) % P + P - pos0 % P) % P;
  std::vector<Probe> probes;
  for (uint32_t k = 0; k < P; ++k) {
    const uint32_t s = base + k;
    Probe p;
    p.shift = int32_t(s);
    p.gold = v.values[size_t(vi[0])];
    std::vector<int32_t>& ids = p.ids;
    ids.reserve(L.length);
    ids = t.prefix;
    if (L.protocol == Protocol::Outer) {
      p.shared = uint32_t(t.prefix.size());
      ids.insert(ids.end(), s, v.pad);
      ids.insert(ids.end(), extra, v.pad);
      region(before_lines, before_rec, &ids);
      p.key_pos = uint32_t(ids.size());
      for (uint32_t i = 0; i < K; ++i) record(i, &ids);
      region(after_lines, after_rec, &ids);
      ids.insert(ids.end(), after_pads + slack - s, v.pad);
    } else {
      // The padding stays inside lines, so every line still starts after a newline:
      //   ... previous line [s pads] \n key = value [2P-2-s pads] \n next line ...
      ids.insert(ids.end(), extra, v.pad);
      region(before_lines, before_rec, &ids);
      ids.pop_back();  // the previous line's newline moves after the pads
      p.shared = uint32_t(ids.size());
      ids.insert(ids.end(), s, v.pad);
      ids.push_back(v.newline);
      p.key_pos = uint32_t(ids.size());
      for (uint32_t i = 0; i < K; ++i) record(i, &ids);
      ids.pop_back();
      ids.insert(ids.end(), slack - s, v.pad);
      ids.push_back(v.newline);
      region(after_lines, after_rec, &ids);
      ids.insert(ids.end(), after_pads, v.pad);
    }
    ids.insert(ids.end(), t.suffix.begin(), t.suffix.end());
    for (int32_t d : demo) record(uint32_t(d), &ids);
    p.value_pos = p.key_pos + 2;
    p.residue = int32_t(p.value_pos % P);
    const uint32_t first_query = uint32_t(ids.size()) + 1;  // the first lookup's "="
    for (size_t j = 0; j < order.size(); ++j) {
      const uint32_t i = uint32_t(order[j]);
      if (j > 0) {  // the previous answer, teacher-forced
        ids.push_back(p.golds.back());
        ids.push_back(v.newline);
      }
      ids.push_back(v.keys[size_t(ki[i])]);
      ids.push_back(v.sep);
      p.golds.push_back(v.values[size_t(vi[i])]);
      p.score_end.push_back(uint32_t(ids.size()));
      p.value_positions.push_back(p.value_pos + kRecord * i);
      p.residues.push_back(int32_t(p.value_positions.back() % P));
    }
    PKV_ASSERT(ids.size() == L.length);
    PKV_ASSERT(first_query - (p.value_pos + kRecord * (K - 1)) >= L.min_distance);
    probes.push_back(std::move(p));
  }
  *out = std::move(probes);
  return Status::Ok();
}

}  // namespace phasekv
