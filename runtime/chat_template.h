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

namespace phasekv {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant"
  std::string content;
};

// Renders `messages`; with add_generation_prompt the text ends where the assistant's reply
// starts. The result contains special tokens written literally (encode with parse_special).
Status apply_chat_template(const std::string& jinja_template, const std::vector<ChatMessage>& messages,
                           bool add_generation_prompt, std::string* out);

// "chatml", "llama3", or "" when the family is not recognised.
std::string chat_template_family(const std::string& jinja_template);

}  // namespace phasekv
