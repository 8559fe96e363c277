#include "tokenizer.h"

#include <algorithm>
#include <utility>

namespace phasekv {

Status make_bpe_tokenizer(const TokenizerData& d, std::unique_ptr<Tokenizer>* out);
Status make_spm_tokenizer(const TokenizerData& d, std::unique_ptr<Tokenizer>* out);

Status Tokenizer::create(const TokenizerData& d, std::unique_ptr<Tokenizer>* out) {
  // Model files are validated at load, but this is public API: special ids that encode/decode
  // emit must lie inside the vocabulary whoever built the data (-1 = none).
  const int64_t n = int64_t(d.tokens.size());
  const std::pair<const char*, int32_t> ids[] = {
      {"bos_id", d.bos_id}, {"eos_id", d.eos_id}, {"eot_id", d.eot_id}, {"pad_id", d.pad_id}, {"unk_id", d.unk_id}};
  for (const auto& [name, id] : ids)
    if (id < -1 || id >= n)
      return make_error(StatusCode::kInvalidArgument, "tokenizer.%s = %d is outside the vocabulary [0, %lld)", name, id,
                        static_cast<long long>(n));
  std::unique_ptr<Tokenizer> t;
  switch (d.type) {
    case TokenizerType::ByteLevelBPE: PKV_RETURN_IF_ERROR(make_bpe_tokenizer(d, &t)); break;
    case TokenizerType::SentencePiece: PKV_RETURN_IF_ERROR(make_spm_tokenizer(d, &t)); break;
    case TokenizerType::None:
      return make_error(StatusCode::kUnsupported, "the model file has no tokenizer");
    default:
      return make_error(StatusCode::kUnsupported, "tokenizer.type = %u is unknown", unsigned(d.type));
  }
  t->tokens_ = d.tokens;
  t->special_.assign(d.tokens.size(), false);
  t->ids_.reserve(d.tokens.size());
  for (size_t i = 0; i < d.tokens.size(); ++i) {
    t->ids_.emplace(d.tokens[i], int32_t(i));  // first id wins for duplicate texts
    const int32_t type = i < d.token_types.size() ? d.token_types[i] : 1;
    if ((type == 3 || type == 4) && !d.tokens[i].empty()) {
      t->special_[i] = true;
      t->specials_by_length_.push_back(int32_t(i));
      t->special_lead_[static_cast<unsigned char>(d.tokens[i][0])] = true;
    }
  }
  for (int32_t id = 0; id < t->n_tokens(); ++id)
    t->max_token_bytes_ = std::max(t->max_token_bytes_, t->covered_bytes_bound(id));
  std::stable_sort(t->specials_by_length_.begin(), t->specials_by_length_.end(),
                   [&](int32_t a, int32_t b) { return d.tokens[size_t(a)].size() > d.tokens[size_t(b)].size(); });
  t->bos_ = d.bos_id;
  t->eos_ = d.eos_id;
  t->eot_ = d.eot_id >= 0 ? d.eot_id : d.eos_id;
  t->add_bos_ = d.add_bos;
  *out = std::move(t);
  return Status::Ok();
}

uint64_t Tokenizer::min_tokens(std::string_view text) const {
  if (max_token_bytes_ == 0) return 0;
  bool dropped[256];
  for (int b = 0; b < 256; ++b) dropped[b] = byte_dropped(uint8_t(b));
  uint64_t counted = 0;
  for (unsigned char c : text) counted += dropped[c] ? 0 : 1;
  return (counted + max_token_bytes_ - 1) / max_token_bytes_;
}

int32_t Tokenizer::find(const std::string& text) const {
  auto it = ids_.find(text);
  return it == ids_.end() ? -1 : it->second;
}

Status Tokenizer::encode(std::string_view text, bool parse_special, std::vector<int32_t>* out) const {
  return encode_impl(text, parse_special, nullptr, out);
}

Status Tokenizer::encode_masked(std::string_view text, const std::vector<uint8_t>& special_ok,
                                std::vector<int32_t>* out) const {
  if (special_ok.size() != text.size())
    return make_error(StatusCode::kInvalidArgument, "special-token mask of %zu bytes for a text of %zu",
                      special_ok.size(), text.size());
  return encode_impl(text, true, &special_ok, out);
}

Status Tokenizer::encode_impl(std::string_view text, bool parse_special, const std::vector<uint8_t>* special_ok,
                              std::vector<int32_t>* out) const {
  const int64_t bad = utf8_first_invalid(text);
  if (bad >= 0)
    return make_error(StatusCode::kInvalidArgument, "text is not valid UTF-8 (byte 0x%02x at offset %lld)",
                      unsigned(static_cast<unsigned char>(text[size_t(bad)])), (long long)bad);
  std::vector<int32_t> ids;
  size_t start = 0, i = 0;
  while (i < text.size()) {
    int32_t hit = -1;
    // Only bytes that start some special are compared against the specials: text without
    // them costs one table lookup a byte.
    if (parse_special && special_lead_[static_cast<unsigned char>(text[i])]) {
      for (int32_t id : specials_by_length_) {
        const std::string& s = tokens_[size_t(id)];
        if (text.compare(i, s.size(), s) == 0) {
          // With a mask, a special counts only where all of its bytes may be special.
          if (special_ok && std::find(special_ok->begin() + std::ptrdiff_t(i),
                                      special_ok->begin() + std::ptrdiff_t(i + s.size()), 0) !=
                                special_ok->begin() + std::ptrdiff_t(i + s.size()))
            continue;
          hit = id;
          break;
        }
      }
    }
    if (hit < 0) {
      ++i;
      continue;
    }
    if (i > start) PKV_RETURN_IF_ERROR(encode_plain(text.substr(start, i - start), &ids));
    ids.push_back(hit);
    i += tokens_[size_t(hit)].size();
    start = i;
  }
  if (start < text.size()) PKV_RETURN_IF_ERROR(encode_plain(text.substr(start), &ids));
  out->insert(out->end(), ids.begin(), ids.end());
  return Status::Ok();
}

Status Tokenizer::token_bytes(int32_t id, std::string* out) const {
  if (id < 0 || id >= n_tokens())
    return make_error(StatusCode::kInvalidArgument, "token id %d is outside the vocabulary [0, %d)", id, n_tokens());
  out->clear();
  if (special_[size_t(id)]) {
    *out = tokens_[size_t(id)];
  } else {
    append_token_bytes(id, out);
  }
  return Status::Ok();
}

Status Tokenizer::decode(const std::vector<int32_t>& ids, std::string* out) const {
  std::string s, piece;
  for (int32_t id : ids) {
    PKV_RETURN_IF_ERROR(token_bytes(id, &piece));
    s += piece;
  }
  *out = std::move(s);
  return Status::Ok();
}

Status StreamDecoder::push(int32_t id, std::string* out) {
  std::string piece;
  PKV_RETURN_IF_ERROR(tok_.token_bytes(id, &piece));
  pending_ += piece;
  drain(out, false);
  return Status::Ok();
}

void StreamDecoder::flush(std::string* out) { drain(out, true); }

void StreamDecoder::drain(std::string* out, bool final) {
  const unsigned char* s = reinterpret_cast<const unsigned char*>(pending_.data());
  size_t i = 0;
  while (i < pending_.size()) {
    const int l = utf8_sequence_length(s + i, pending_.size() - i);
    if (l > 0) {
      out->append(pending_, i, size_t(l));
      i += size_t(l);
    } else if (l < 0) {
      out->append("\xEF\xBF\xBD");  // U+FFFD for a byte that can never start a valid character here
      ++i;
    } else if (final) {
      out->append("\xEF\xBF\xBD");  // an unfinished character at the end of the stream
      i = pending_.size();
    } else {
      break;  // wait for the rest of the character
    }
  }
  pending_.erase(0, i);
}

}  // namespace phasekv
