// Chat templates: each renders a conversation to exactly its model's text, the markers
// become single tokens of a tokenizer that has them as added tokens, and JSONL chat rows
// that are not lists of {role, content} are refused naming the file and line.
#include <gtest/gtest.h>

#include <algorithm>

#include "amber/data/bpe_trainer.h"
#include "amber/data/chat_template.h"
#include "amber/data/corpus.h"
#include "data/testing.h"

namespace amber::data {
namespace {

const std::vector<ChatMessage> kChat = {
    {"system", "Be brief."}, {"user", " \tHi there\n"}, {"assistant", "Hello! 数字"}};

TEST(ChatTemplate, EachTemplateRendersItsModelsExactText) {
  EXPECT_EQ(render_chat(ChatTemplate::chatml, kChat),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n \tHi there\n<|im_end|>\n"
            "<|im_start|>assistant\nHello! 数字<|im_end|>\n");
  // Llama 3 trims every content (its template's `| trim`), U+3000 (ideographic space) too.
  const std::vector<ChatMessage> spaced = {{"user", "\u3000 two\nlines \n"}, {"assistant", "ok"}};
  EXPECT_EQ(render_chat(ChatTemplate::llama3, spaced),
            "<|start_header_id|>user<|end_header_id|>\n\ntwo\nlines<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nok<|eot_id|>");
  EXPECT_EQ(render_chat(ChatTemplate::llama3, {{"user", " \n "}}),
            "<|start_header_id|>user<|end_header_id|>\n\n<|eot_id|>");
  EXPECT_EQ(render_chat(ChatTemplate::chatml, {}), "");
  EXPECT_EQ(chat_template_from_name("llama3"), ChatTemplate::llama3);
  testing::expect_error([] { chat_template_from_name("zephyr"); }, {"\"zephyr\"", "chatml", "llama3"});
}

TEST(ChatTemplate, MarkersAreSingleTokensWhenTheTokenizerHasThemAsAddedTokens) {
  BpeTrainerOptions o;
  o.vocab_size = 300;
  o.special_tokens = {"<|bos|>", "<|eos|>", "<|im_start|>", "<|im_end|>"};
  BpeTrainer trainer(o);
  trainer.add_documents({"Be brief. Hi there. Hello!", "system user assistant"});
  const Tokenizer tok = trainer.train();
  const int32_t start = *tok.token_to_id("<|im_start|>"), end = *tok.token_to_id("<|im_end|>");
  const std::string text = render_chat(ChatTemplate::chatml, kChat);
  const std::vector<int32_t> ids = tok.encode(text);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), start), 3);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), end), 3);
  EXPECT_EQ(tok.decode(ids), text);
  for (std::string_view marker : chat_template_markers(ChatTemplate::chatml)) {
    EXPECT_TRUE(marker == "<|im_start|>" || marker == "<|im_end|>") << marker;
  }
}

TEST(ChatTemplate, JsonlRowsRenderAndBadMessagesAreRefusedByLine) {
  testing::TempDir dir;
  testing::write_file(dir.file("chat.jsonl"),
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, "
                      "{\"role\": \"assistant\", \"content\": \"Yo\", \"extra\": 1}]}\n"
                      "{\"messages\": []}\n");
  CorpusOptions chat;
  chat.field = "messages";
  chat.chat_template = ChatTemplate::chatml;
  std::vector<std::string> docs;
  read_corpus({dir.file("chat.jsonl")}, chat, [&](std::string&& d) { docs.push_back(std::move(d)); });
  EXPECT_EQ(docs, (std::vector<std::string>{"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n"}))
      << "an empty conversation is an empty document, dropped";
  const std::vector<std::pair<std::string, std::vector<std::string>>> bad = {
      {"{\"messages\": \"hi\"}", {"not a list of messages"}},
      {"{\"messages\": [{\"role\": \"user\"}]}", {"message 0", "\"content\""}},
      {"{\"messages\": [{\"content\": \"x\", \"role\": 3}]}", {"message 0", "\"role\""}},
      {"{\"messages\": [\"hi\"]}", {"message 0"}},
      {"{\"text\": \"hi\"}", {"no field \"messages\""}},
  };
  for (const auto& [row, fragments] : bad) {  // after a good row, so the error names line 2
    testing::write_file(dir.file("bad.jsonl"), "{\"messages\": []}\n" + row + "\n");
    std::vector<std::string> f = fragments;
    f.push_back("bad.jsonl:2");
    testing::expect_error([&] { read_corpus({dir.file("bad.jsonl")}, chat, [](std::string&&) {}); }, f);
  }
  // Without a template a chat row's error says how to read it; a text file is not chat.
  testing::write_file(dir.file("rows.jsonl"), "{\"messages\": []}\n");
  testing::expect_error([&] { read_corpus({dir.file("rows.jsonl")}, {}, [](std::string&&) {}); },
                        {"rows.jsonl:1", "no field \"text\"", "--chat-template"});
  testing::write_file(dir.file("notes.txt"), "plain\n");
  testing::expect_error([&] { read_corpus({dir.file("notes.txt")}, chat, [](std::string&&) {}); },
                        {"notes.txt", "read as lines", "--chat-template"});
}

}  // namespace
}  // namespace amber::data
