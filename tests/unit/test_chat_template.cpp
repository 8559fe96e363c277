// Chat templates: SmolLM2's ChatML template rendered natively, against the text its Jinja
// produces (written out by hand from the template).
#include <doctest/doctest.h>

#include "chat_template.h"

using namespace phasekv;

namespace {
const char* kSmolTemplate =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
}

TEST_CASE("ChatML (SmolLM2): default system prompt, messages, generation prompt") {
  std::string out;
  REQUIRE(apply_chat_template(kSmolTemplate, {{"user", "Hi!"}}, true, &out).ok());
  CHECK(out ==
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n");
  REQUIRE(apply_chat_template(kSmolTemplate, {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}}, false,
                              &out)
              .ok());
  CHECK(out == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
               "Hello<|im_end|>\n");
  CHECK(chat_template_family(kSmolTemplate) == "chatml");
}

TEST_CASE("unknown templates and bad messages are reported") {
  std::string out;
  Status s = apply_chat_template("{{ messages[0].content }} [INST]", {{"user", "x"}}, true, &out);
  CHECK(s.code() == StatusCode::kUnsupported);
  CHECK(s.message().find("[INST]") != std::string::npos);
  CHECK(apply_chat_template("", {{"user", "x"}}, true, &out).message().find("no chat template") !=
        std::string::npos);
  CHECK(apply_chat_template(kSmolTemplate, {{"", "x"}}, true, &out).code() == StatusCode::kInvalidArgument);
}
