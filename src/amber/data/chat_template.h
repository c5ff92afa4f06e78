// Chat corpora: a JSONL row's `messages` (a list of {role, content}) rendered into one
// document by a named built-in template, so conversations train with the turn markers a
// chat model will later see. The markers are tokenizer added tokens when it has them
// (cut out of the text before pre-tokenization), else they are tokenized as text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace amber::data {

enum class ChatTemplate {
  none,    // rows are read from their text field
  chatml,  // <|im_start|>ROLE\nCONTENT<|im_end|>\n per message (Qwen, many others)
  llama3,  // <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|> per message, content trimmed
};

ChatTemplate chat_template_from_name(std::string_view name);  // the error lists the names
std::string_view chat_template_name(ChatTemplate t);

// The marker texts the template writes, which should be added tokens of the tokenizer.
std::vector<std::string_view> chat_template_markers(ChatTemplate t);

struct ChatMessage {
  std::string role;
  std::string content;
};

// One document from a conversation. No begin-of-text marker: the loader puts the run's
// bos (data.bos) before every document.
std::string render_chat(ChatTemplate t, const std::vector<ChatMessage>& messages);

}  // namespace amber::data
