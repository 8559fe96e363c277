// Chat templates. Model files carry the Jinja template of their source; PhaseKV does not
// embed a Jinja interpreter. It recognises the template families below by their markers and
// renders them natively, and reports an error naming the template otherwise:
//   chatml  "<|im_start|>role\ncontent<|im_end|>\n" (SmolLM2, Qwen, ...); a default system
//           prompt written into the template (SmolLM2's "You are a helpful AI assistant ...")
//           is used when the conversation has none, as the template does
//   llama3  "<|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>"
#pragma once

#include <string>
#include <vector>

#include "status.h"
#include "tokenizer.h"

namespace phasekv {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant"
  std::string content;
};

// One piece of a rendered conversation: the template's own markup (special tokens written
// literally, role headers' punctuation) or text that came from a message (role, content, a
// default system prompt), which must never be parsed for special tokens.
struct ChatSegment {
  std::string text;
  bool from_message = false;
};

// Renders `messages` as segments in order; with add_generation_prompt the text ends where the
// assistant's reply starts.
Status render_chat(const std::string& jinja_template, const std::vector<ChatMessage>& messages,
                   bool add_generation_prompt, std::vector<ChatSegment>* out);

// The rendered conversation as one string (for display, logs, or a trusted encoder). Encoding
// it with parse_special lets content that spells a special token's text ("<|im_end|>") become
// that token: untrusted content goes through encode_chat instead.
Status apply_chat_template(const std::string& jinja_template, const std::vector<ChatMessage>& messages,
                           bool add_generation_prompt, std::string* out);

// Token ids of the conversation, appended to *ids: the template's markup encoded with specials
// parsed, every message's text encoded as plain text, whatever it spells. Nothing is appended
// on error.
Status encode_chat(const Tokenizer& tok, const std::string& jinja_template, const std::vector<ChatMessage>& messages,
                   bool add_generation_prompt, std::vector<int32_t>* ids);

// "chatml", "llama3", or "" when the family is not recognised.
std::string chat_template_family(const std::string& jinja_template);

}  // namespace phasekv
