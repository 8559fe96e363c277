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

Status render_chat(const std::string& tmpl, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                   std::vector<ChatSegment>* out) {
  for (size_t i = 0; i < messages.size(); ++i)
    if (messages[i].role.empty())
      return make_error(StatusCode::kInvalidArgument, "chat message %zu has an empty role", i);
  const std::string family = chat_template_family(tmpl);
  std::vector<ChatSegment> s;
  auto markup = [&](const std::string& t) { s.push_back({t, false}); };
  auto text = [&](const std::string& t) {
    if (!t.empty()) s.push_back({t, true});
  };
  if (family == "chatml") {
    const std::string def = chatml_default_system(tmpl);
    if (!def.empty() && (messages.empty() || messages[0].role != "system")) {
      markup("<|im_start|>");
      text("system");
      markup("\n");
      text(def);
      markup("<|im_end|>\n");
    }
    for (const ChatMessage& m : messages) {
      markup("<|im_start|>");
      text(m.role);
      markup("\n");
      text(m.content);
      markup("<|im_end|>\n");
    }
    if (add_generation_prompt) {
      markup("<|im_start|>");
      text("assistant");
      markup("\n");
    }
  } else if (family == "llama3") {
    markup("<|begin_of_text|>");
    for (const ChatMessage& m : messages) {
      markup("<|start_header_id|>");
      text(m.role);
      markup("<|end_header_id|>\n\n");
      text(m.content);
      markup("<|eot_id|>");
    }
    if (add_generation_prompt) {
      markup("<|start_header_id|>");
      text("assistant");
      markup("<|end_header_id|>\n\n");
    }
  } else {
    if (tmpl.empty()) return make_error(StatusCode::kUnsupported, "the model file has no chat template");
    return make_error(StatusCode::kUnsupported,
                      "chat template not recognised (supported families: chatml, llama3); it starts with '%.60s'",
                      tmpl.c_str());
  }
  *out = std::move(s);
  return Status::Ok();
}

Status apply_chat_template(const std::string& tmpl, const std::vector<ChatMessage>& messages,
                           bool add_generation_prompt, std::string* out) {
  std::vector<ChatSegment> segs;
  PKV_RETURN_IF_ERROR(render_chat(tmpl, messages, add_generation_prompt, &segs));
  std::string s;
  for (const ChatSegment& g : segs) s += g.text;
  *out = std::move(s);
  return Status::Ok();
}

Status encode_chat(const Tokenizer& tok, const std::string& tmpl, const std::vector<ChatMessage>& messages,
                   bool add_generation_prompt, std::vector<int32_t>* ids) {
  std::vector<ChatSegment> segs;
  PKV_RETURN_IF_ERROR(render_chat(tmpl, messages, add_generation_prompt, &segs));
  // One string, one encode: the runs between the template's specials are tokenized whole, as
  // the rendered text would be, but a special token's text counts only inside the markup.
  std::string text;
  std::vector<uint8_t> special_ok;
  for (const ChatSegment& g : segs) {
    text += g.text;
    special_ok.insert(special_ok.end(), g.text.size(), g.from_message ? 0 : 1);
  }
  std::vector<int32_t> out;
  PKV_RETURN_IF_ERROR(tok.encode_masked(text, special_ok, &out));
  ids->insert(ids->end(), out.begin(), out.end());
  return Status::Ok();
}

}  // namespace phasekv
