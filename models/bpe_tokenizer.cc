#include "models/bpe_tokenizer.h"

#include <algorithm>
#include <limits>
#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "common/status.h"

namespace rlforge::models {

namespace {

using Json = nlohmann::json;

// GPT-2's pre-tokenizer regex, used by a ByteLevel pre-tokenizer with use_regex.
struct ByteMap {
  char32_t byte_to_cp[256];
  std::unordered_map<char32_t, uint8_t> cp_to_byte;
  ByteMap() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      byte_to_cp[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      cp_to_byte[byte_to_cp[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteMap& Bytes() {
  static const ByteMap* m = new ByteMap();
  return *m;
}

std::string ToByteLevel(std::string_view s) {
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) AppendUtf8(Bytes().byte_to_cp[c], &out);
  return out;
}

std::string FromByteLevel(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    auto [cp, len] = Utf8Decode(s, i);
    auto it = Bytes().cp_to_byte.find(cp);
    if (it != Bytes().cp_to_byte.end()) {
      out.push_back(static_cast<char>(it->second));
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  return out;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsWordByte(unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; }

// "<0x41>" -> 0x41; -1 when `t` is not a byte token.
int ByteTokenValue(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (char c : t.substr(3, 2)) {
    v *= 16;
    if (c >= '0' && c <= '9') {
      v += c - '0';
    } else if (c >= 'A' && c <= 'F') {
      v += c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      v += c - 'a' + 10;
    } else {
      return -1;
    }
  }
  return v;
}

}  // namespace

std::optional<int32_t> BpeTokenizer::TokenId(std::string_view token) const {
  auto it = token_to_id_.find(std::string(token));
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

std::string BpeTokenizer::TokenText(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return id_to_token_[id];
}

std::vector<int32_t> BpeTokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> out;
  size_t seg_start = 0;
  size_t i = 0;
  while (i < text.size()) {
    const AddedToken* hit = nullptr;
    for (const AddedToken& a : added_) {
      if (text.compare(i, a.content.size(), a.content) != 0) continue;
      if (a.single_word) {
        const size_t e = i + a.content.size();
        if ((i > 0 && IsWordByte(text[i - 1])) || (e < text.size() && IsWordByte(text[e]))) {
          continue;
        }
      }
      hit = &a;
      break;
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    size_t begin = i, end = i + hit->content.size();
    if (hit->lstrip) {
      while (begin > seg_start && IsSpace(text[begin - 1])) --begin;
    }
    if (hit->rstrip) {
      while (end < text.size() && IsSpace(text[end])) ++end;
    }
    EncodeSegment(text.substr(seg_start, begin - seg_start), seg_start == 0, &out);
    out.push_back(hit->id);
    i = seg_start = end;
  }
  EncodeSegment(text.substr(seg_start), seg_start == 0, &out);
  return out;
}

void BpeTokenizer::EncodeSegment(std::string_view segment, bool at_start,
                                 std::vector<int32_t>* out) const {
  if (segment.empty()) return;
  std::string normalized(segment);
  for (const NormStep& n : normalizers_) {
    switch (n.kind) {
      case NormStep::Kind::kForm:
        normalized = Normalize(normalized, n.form);
        break;
      case NormStep::Kind::kPrepend:
        if (!normalized.empty()) normalized.insert(0, n.content);
        break;
      case NormStep::Kind::kReplace:
        if (n.regex) {
          std::string replaced;
          size_t pos = 0;
          for (const auto& [b, e] : n.regex->FindAll(normalized)) {
            replaced.append(normalized, pos, b - pos);
            replaced += n.content;
            pos = e;
          }
          replaced.append(normalized, pos, std::string::npos);
          normalized = std::move(replaced);
        } else {
          normalized = absl::StrReplaceAll(normalized, {{n.pattern, n.content}});
        }
        break;
    }
  }
  std::vector<std::string> pieces = {normalized};
  for (const PreStep& step : pre_) {
    std::vector<std::string> next;
    for (size_t p = 0; p < pieces.size(); ++p) {
      std::string& piece = pieces[p];
      if (step.kind == PreStep::Kind::kMetaspace) {
        piece = absl::StrReplaceAll(piece, {{" ", step.replacement}});
        const bool prepend = step.prepend_scheme == "always" ||
                             (step.prepend_scheme == "first" && at_start && p == 0);
        if (prepend && piece.compare(0, step.replacement.size(), step.replacement) != 0) {
          piece.insert(0, step.replacement);
        }
        if (!step.split) {
          next.push_back(std::move(piece));
          continue;
        }
        // MergedWithNext: every replacement character starts a new piece.
        size_t begin = 0;
        for (size_t at = piece.find(step.replacement, 1); at != std::string::npos;
             at = piece.find(step.replacement, at + 1)) {
          next.push_back(piece.substr(begin, at - begin));
          begin = at;
        }
        next.push_back(piece.substr(begin));
        continue;
      }
      if (step.kind == PreStep::Kind::kByteLevel && step.add_prefix_space &&
          (piece.empty() || piece[0] != ' ')) {
        piece.insert(piece.begin(), ' ');
      }
      if (!step.regex) {
        next.push_back(std::move(piece));
        continue;
      }
      size_t pos = 0;
      for (const auto& [b, e] : step.regex->FindAll(piece)) {
        if (b > pos) next.push_back(piece.substr(pos, b - pos));
        if (step.kind != PreStep::Kind::kSplitRemoved) next.push_back(piece.substr(b, e - b));
        pos = e;
      }
      if (pos < piece.size()) next.push_back(piece.substr(pos));
    }
    pieces = std::move(next);
  }
  for (const std::string& piece : pieces) {
    if (piece.empty()) continue;
    EncodeWord(byte_level_ ? ToByteLevel(piece) : piece, out);
  }
}

void BpeTokenizer::EncodeWord(std::string_view word, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    auto it = token_to_id_.find(std::string(word));
    if (it != token_to_id_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> symbols;
  bool last_unk = false;
  for (size_t i = 0; i < word.size();) {
    const size_t len = Utf8CharLen(word, i);
    auto it = token_to_id_.find(std::string(word.substr(i, len)));
    if (it != token_to_id_.end()) {
      symbols.push_back(it->second);
      last_unk = false;
    } else if (byte_fallback_) {
      for (size_t k = 0; k < len; ++k) {
        symbols.push_back(byte_ids_[static_cast<unsigned char>(word[i + k])]);
      }
      last_unk = false;
    } else if (unk_id_ >= 0) {
      if (!(fuse_unk_ && last_unk)) symbols.push_back(unk_id_);
      last_unk = true;
    }  // else: no way to represent it; Hugging Face drops it too.
    i += len;
  }
  // Merge the lowest-ranked adjacent pair (leftmost on ties) until none is left: a heap of
  // candidate pairs over a linked list of symbols, O(n log n) (a word can be a whole text when
  // there is no pre-tokenizer). Entries whose symbols changed since they were pushed are stale.
  if (symbols.size() < 2) {
    out->insert(out->end(), symbols.begin(), symbols.end());
    return;
  }
  const int n = static_cast<int>(symbols.size());
  std::vector<int> next(n), prev(n);
  for (int k = 0; k < n; ++k) {
    next[k] = k + 1 < n ? k + 1 : -1;
    prev[k] = k - 1;
  }
  struct Candidate {
    int32_t rank;
    int left;
    int32_t left_id, right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push = [&](int l) {
    if (l < 0 || next[l] < 0) return;
    const int32_t a = symbols[l], b = symbols[next[l]];
    auto it = merges_.find((static_cast<uint64_t>(a) << 32) | uint32_t(b));
    if (it != merges_.end()) heap.push({it->second.first, l, a, b});
  };
  for (int k = 0; k + 1 < n; ++k) push(k);
  std::vector<int8_t> alive(n, 1);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int r = next[c.left];
    if (!alive[c.left] || symbols[c.left] != c.left_id || r < 0 || symbols[r] != c.right_id) {
      continue;
    }
    const uint64_t key = (static_cast<uint64_t>(c.left_id) << 32) | uint32_t(c.right_id);
    symbols[c.left] = merges_.at(key).second;
    alive[r] = 0;
    next[c.left] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.left;
    push(prev[c.left]);
    push(c.left);
  }
  for (int k = 0; k >= 0; k = next[k]) out->push_back(symbols[k]);
}

std::string BpeTokenizer::DecodeTokens(const std::vector<std::string>& tokens) const {
  std::vector<std::string> cur = tokens;
  for (const DecodeStep& step : decoders_) {
    std::vector<std::string> next;
    switch (step.kind) {
      case DecodeStep::Kind::kReplace:
        for (const std::string& t : cur)
          next.push_back(absl::StrReplaceAll(t, {{step.from, step.to}}));
        break;
      case DecodeStep::Kind::kStrip:
        for (const std::string& t : cur) {
          size_t b = 0, e = t.size();
          for (int k = 0; k < step.start && t.compare(b, step.strip.size(), step.strip) == 0 &&
                          b + step.strip.size() <= e;
               ++k) {
            b += step.strip.size();
          }
          for (int k = 0; k < step.stop && e >= b + step.strip.size() &&
                          t.compare(e - step.strip.size(), step.strip.size(), step.strip) == 0;
               ++k) {
            e -= step.strip.size();
          }
          next.push_back(t.substr(b, e - b));
        }
        break;
      case DecodeStep::Kind::kMetaspace:
        // As Hugging Face: in the first token the replacement is dropped, elsewhere it is a space.
        for (size_t k = 0; k < cur.size(); ++k) {
          next.push_back(
              absl::StrReplaceAll(cur[k], {{step.from, k == 0 && step.prepend ? "" : " "}}));
        }
        break;
      case DecodeStep::Kind::kByteLevel: {
        std::string joined;
        for (const std::string& t : cur) joined += t;
        next.push_back(FromByteLevel(joined));
        break;
      }
      case DecodeStep::Kind::kByteFallback: {
        std::string bytes;
        auto flush = [&] {
          if (bytes.empty()) return;
          if (IsValidUtf8(bytes)) {
            next.push_back(bytes);
          } else {
            for (size_t k = 0; k < bytes.size(); ++k) next.push_back("\xEF\xBF\xBD");
          }
          bytes.clear();
        };
        for (const std::string& t : cur) {
          const int v = ByteTokenValue(t);
          if (v >= 0) {
            bytes.push_back(static_cast<char>(v));
          } else {
            flush();
            next.push_back(t);
          }
        }
        flush();
        break;
      }
      case DecodeStep::Kind::kFuse: {
        std::string joined;
        for (const std::string& t : cur) joined += t;
        next.push_back(std::move(joined));
        break;
      }
    }
    cur = std::move(next);
  }
  // Without a decoder Hugging Face joins tokens with spaces.
  std::string out;
  for (size_t k = 0; k < cur.size(); ++k) {
    if (k > 0 && decoders_.empty()) out += ' ';
    out += cur[k];
  }
  return out;
}

std::string BpeTokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id >= 0 && id < vocab_size()) tokens.push_back(id_to_token_[id]);
  }
  return DecodeTokens(tokens);
}

}  // namespace rlforge::models
