// BpeTokenizer: a Hugging Face tokenizer.json with a BPE model (internal to rlforge_text; users
// go through LoadTokenizer in models/tokenizer.h).
//
// text -> split on added tokens -> normalizer -> pre-tokenizer pieces -> byte-level map
//      -> BPE merges per piece (byte fallback / unk for unknown symbols) -> ids
//
// Supported tokenizer.json parts (anything else is a load error naming the part):
//   normalizer:    null, NFC, NFD, NFKC, NFKD, Prepend, Replace, Sequence of these
//   pre_tokenizer: null, ByteLevel (add_prefix_space, use_regex), Split (Regex or String
//                  pattern; behavior Isolated or Removed; invert false), Digits, Metaspace,
//                  Sequence
//   model:         BPE (merges as "a b" strings or [a, b] pairs, byte_fallback, unk_token,
//                  fuse_unk, ignore_merges; no dropout, no subword prefix/suffix)
//   decoder:       null, ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace, Sequence
// Like Hugging Face, Decode runs added tokens through the decoder too.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "models/tokenizer.h"
#include "models/unicode_text.h"
#include "nlohmann/json.hpp"

namespace rlforge::models {

class BpeTokenizer final : public Tokenizer {
 public:
  // `origin` names the file in errors; `raw` is its text, kept for SaveTokenizer.
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> FromJson(const nlohmann::json& spec,
                                                                const std::string& origin,
                                                                std::string raw);

  std::vector<int32_t> Encode(std::string_view text) const override;
  std::string Decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_token_.size()); }
  std::optional<int32_t> TokenId(std::string_view token) const override;
  std::string TokenText(int32_t id) const override;
  std::string kind() const override { return "bpe"; }
  const std::string& raw_json() const { return raw_; }

 private:
  struct AddedToken {
    int32_t id = 0;
    std::string content;
    bool special = false;
    bool lstrip = false;
    bool rstrip = false;
    bool single_word = false;
  };
  // Replace (string or regex) also serves Prepend (kind kPrepend, `content`).
  struct NormStep {
    enum class Kind { kForm, kPrepend, kReplace } kind;
    NormalForm form = NormalForm::kNFC;
    std::string pattern;                  // Replace with a String pattern
    std::shared_ptr<UnicodeRegex> regex;  // Replace with a Regex pattern
    std::string content;
  };
  struct PreStep {
    enum class Kind { kSplitIsolated, kSplitRemoved, kByteLevel, kDigits, kMetaspace } kind;
    std::shared_ptr<UnicodeRegex> regex;  // Split, ByteLevel with use_regex, Digits
    bool add_prefix_space = false;        // ByteLevel
    std::string replacement;              // Metaspace ("\u2581")
    std::string prepend_scheme;           // Metaspace: always | first | never
    bool split = true;                    // Metaspace
  };
  struct DecodeStep {
    enum class Kind { kByteLevel, kByteFallback, kFuse, kReplace, kStrip, kMetaspace } kind;
    std::string from, to;     // Replace; Metaspace (from = replacement)
    bool prepend = false;     // Metaspace: prepend_scheme is not never
    std::string strip;        // Strip: the character
    int start = 0, stop = 0;  // Strip: at most this many at each end
  };

  BpeTokenizer() = default;
  absl::Status ParseNormalizers(const nlohmann::json& spec, const std::string& origin);
  absl::Status ParseDecoders(const nlohmann::json& spec, const std::string& origin);
  // Text between added tokens -> ids, appended to out. `at_start`: the segment begins the text
  // (Metaspace's prepend_scheme first).
  void EncodeSegment(std::string_view segment, bool at_start, std::vector<int32_t>* out) const;
  void EncodeWord(std::string_view word, std::vector<int32_t>* out) const;
  // Token strings -> text, through the decoder steps.
  std::string DecodeTokens(const std::vector<std::string>& tokens) const;

  std::string raw_;
  std::vector<NormStep> normalizers_;
  std::vector<PreStep> pre_;
  bool byte_level_ = false;  // a ByteLevel pre-tokenizer maps bytes to printable characters
  std::vector<DecodeStep> decoders_;

  std::unordered_map<std::string, int32_t> token_to_id_;
  std::vector<std::string> id_to_token_;
  std::vector<int8_t> is_added_;   // per id
  std::vector<AddedToken> added_;  // longest content first
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  bool byte_fallback_ = false;
  int32_t byte_ids_[256] = {};  // <0xXX> token ids when byte_fallback_
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
};

}  // namespace rlforge::models
