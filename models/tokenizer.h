// Tokenizers: text <-> token ids, torch-free (library rlforge_text).
//
// text -> added/special tokens split out -> normalizer -> pre-tokenizer -> BPE merges -> ids
//
// Two kinds share one interface:
//  - byte-level BPE read from a Hugging Face tokenizer.json (GPT-2 / Qwen2 / Llama-3 style:
//    Split regex and ByteLevel pre-tokenizers, NFC normalizer, merges, added and special tokens
//    recognised in text, byte fallback to <0xXX> tokens);
//  - a character-level tokenizer for synthetic tasks (one token per Unicode code point of a
//    fixed alphabet, plus named special tokens), stored in rlforge's own tokenizer.json format
//    (docs/tokenizers.md).
// eos / bos / pad come from tokenizer_config.json when the directory has one.
//
// A Tokenizer is immutable after loading: every const method may be called from any number of
// threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace rlforge::models {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Special and added tokens written in `text` ("<|im_end|>") become their ids. No bos/eos is
  // added: callers add bos_id()/eos_id() where their format wants them.
  virtual std::vector<int32_t> Encode(std::string_view text) const = 0;
  // Special tokens are written out as their text. Ids outside [0, vocab_size()) are skipped
  // (model vocabularies are often padded beyond the tokenizer's), as Hugging Face does.
  virtual std::string Decode(const std::vector<int32_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  // The id of an exact token string (a vocabulary entry such as "Ġthe", or an added token).
  virtual std::optional<int32_t> TokenId(std::string_view token) const = 0;
  // The token string of `id` as stored in the vocabulary; "" when out of range.
  virtual std::string TokenText(int32_t id) const = 0;
  // "bpe" or "char".
  virtual std::string kind() const = 0;

  int32_t eos_id() const { return eos_id_; }
  int32_t bos_id() const { return bos_id_; }  // -1 if the tokenizer has none
  int32_t pad_id() const { return pad_id_; }  // the eos id when tokenizer_config names no pad

  // The checkpoint's Jinja chat template ("" when it has none) and where it was read, for
  // errors: "DIR/chat_template.jinja" or "DIR/tokenizer_config.json: chat_template".
  const std::string& chat_template() const { return chat_template_; }
  const std::string& chat_template_origin() const { return chat_template_origin_; }

 protected:
  friend absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& dir);
  int32_t eos_id_ = -1;
  int32_t bos_id_ = -1;
  int32_t pad_id_ = -1;
  std::string chat_template_;
  std::string chat_template_origin_;
};

// Reads DIR/tokenizer.json (a Hugging Face byte-level BPE, or rlforge's char-level format)
// and, when present, DIR/tokenizer_config.json for eos_token / bos_token / pad_token. A BPE
// tokenizer must name its eos_token there. Errors name the file and the key. The chat
// template comes from DIR/chat_template.jinja (as transformers 5 saves it) or else from
// tokenizer_config.json's chat_template (a string, or a list of {name, template} of which
// "default" is taken).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& dir);

// The special tokens of a char-level tokenizer; their ids are 0..n-1 in this order, the
// alphabet's characters follow. eos, pad and unk are required; bos may be "" (none).
struct CharTokenizerOptions {
  std::vector<std::string> special_tokens = {"<pad>", "<bos>", "<eos>", "<unk>"};
  std::string pad_token = "<pad>";
  std::string bos_token = "<bos>";
  std::string eos_token = "<eos>";
  // Characters outside the alphabet encode as this token.
  std::string unk_token = "<unk>";
  // A Jinja chat template the tokenizer carries (and SaveTokenizer writes), and where it came
  // from, for errors.
  std::string chat_template;
  std::string chat_template_origin;
};

// `alphabet`: UTF-8 text whose distinct code points become the vocabulary, in order
// (a repeated character is an error).
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeCharTokenizer(
    const std::string& alphabet, const CharTokenizerOptions& options = {});

// Writes DIR/tokenizer.json and DIR/tokenizer_config.json (creating DIR), and the chat
// template, when there is one, to DIR/chat_template.jinja. A BPE tokenizer writes back the
// tokenizer.json it was loaded from.
absl::Status SaveTokenizer(const Tokenizer& tokenizer, const std::string& dir);

}  // namespace rlforge::models
