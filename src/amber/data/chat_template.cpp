// The templates are written out as code rather than parsed from Jinja: each is a few
// string concatenations, identical to what the reference template (plain ChatML, Llama
// 3.0's tokenizer_config.json) renders for a conversation without a generation prompt,
// less begin-of-text. Messages are rendered as given: no default system message is added.
#include "amber/data/chat_template.h"

#include <algorithm>

#include "amber/core/error.h"
#include "amber/data/utf8.h"

namespace amber::data {
namespace {

constexpr std::pair<ChatTemplate, std::string_view> kNames[] = {
    {ChatTemplate::none, "none"}, {ChatTemplate::chatml, "chatml"}, {ChatTemplate::llama3, "llama3"}};

// Jinja's trim, as Llama 3's template applies it to every content: leading and
// trailing Unicode whitespace removed.
std::string_view trim(std::string_view s) {
  size_t begin = s.size(), end = 0;
  for (size_t pos = 0; pos < s.size();) {
    const size_t at = pos;
    if (!is_unicode_whitespace(utf8_next(s, pos))) {
      begin = std::min(begin, at);
      end = pos;
    }
  }
  return begin < end ? s.substr(begin, end - begin) : std::string_view();
}

}  // namespace

ChatTemplate chat_template_from_name(std::string_view name) {
  for (const auto& [t, n] : kNames) {
    if (n == name) return t;
  }
  fail("unknown chat template \"", name, "\"; use chatml or llama3 (docs/data.md shows what each writes)");
}

std::string_view chat_template_name(ChatTemplate t) {
  for (const auto& [tt, n] : kNames) {
    if (tt == t) return n;
  }
  return "?";
}

std::vector<std::string_view> chat_template_markers(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::chatml:
      return {"<|im_start|>", "<|im_end|>"};
    case ChatTemplate::llama3:
      return {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
    case ChatTemplate::none:
      break;
  }
  return {};
}

std::string render_chat(ChatTemplate t, const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const ChatMessage& m : messages) {
    switch (t) {
      case ChatTemplate::chatml:
        out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
        break;
      case ChatTemplate::llama3:
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
        out += trim(m.content);
        out += "<|eot_id|>";
        break;
      case ChatTemplate::none:
        fail("render_chat needs a chat template");
    }
  }
  return out;
}

}  // namespace amber::data
