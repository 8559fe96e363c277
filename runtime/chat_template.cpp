#include "chat_template.h"

namespace phasekv {

std::string chat_template_family(const std::string& t) {
  if (t.find("<|im_start|>") != std::string::npos) return "chatml";
  if (t.find("<|start_header_id|>") != std::string::npos) return "llama3";
  return "";
}

namespace {

// The default system prompt a ChatML template writes when messages[0] is not "system":
// the text between "<|im_start|>system\n" and "<|im_end|>" inside the template.
std::string chatml_default_system(const std::string& t) {
  if (t.find("!= 'system'") == std::string::npos && t.find("!= \"system\"") == std::string::npos) return "";
  const std::string open = "<|im_start|>system\n";
  const size_t a = t.find(open);
  if (a == std::string::npos) return "";
  const size_t b = t.find("<|im_end|>", a + open.size());
  if (b == std::string::npos) return "";
  return t.substr(a + open.size(), b - a - open.size());
}

}  // namespace

Status apply_chat_template(const std::string& tmpl, const std::vector<ChatMessage>& messages,
                           bool add_generation_prompt, std::string* out) {
  for (size_t i = 0; i < messages.size(); ++i)
    if (messages[i].role.empty())
      return make_error(StatusCode::kInvalidArgument, "chat message %zu has an empty role", i);
  const std::string family = chat_template_family(tmpl);
  std::string s;
  if (family == "chatml") {
    const std::string def = chatml_default_system(tmpl);
    if (!def.empty() && (messages.empty() || messages[0].role != "system"))
      s += "<|im_start|>system\n" + def + "<|im_end|>\n";
    for (const ChatMessage& m : messages) s += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    if (add_generation_prompt) s += "<|im_start|>assistant\n";
  } else if (family == "llama3") {
    s += "<|begin_of_text|>";
    for (const ChatMessage& m : messages)
      s += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
    if (add_generation_prompt) s += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  } else {
    if (tmpl.empty()) return make_error(StatusCode::kUnsupported, "the model file has no chat template");
    return make_error(StatusCode::kUnsupported,
                      "chat template not recognised (supported families: chatml, llama3); it starts with '%.60s'",
                      tmpl.c_str());
  }
  *out = std::move(s);
  return Status::Ok();
}

}  // namespace phasekv
