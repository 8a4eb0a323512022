// Tokenizer encode/decode throughput of rlforge_text on one thread.
//
// text file -> LoadTokenizer(dir) -> Encode (repeated) -> Decode -> MB/s, tokens/s
//
// Run through bench/tokenizer_bench.py, which measures Hugging Face tokenizers on the same
// text in the same run and prints the ratio:
//   $(python3 bench/bench_env.py) bench/tokenizer_bench.py build/bench/tokenizer_bench
// Directly: build/bench/tokenizer_bench TOKENIZER_DIR TEXT_FILE REPEATS [lines]
// ("lines": encode each line on its own, as a dataset of short texts, instead of the whole file.)
// Prints one JSON line: {"bytes":..,"tokens":..,"encode_s":..,"decode_s":..,"ids_fnv":..}.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/clock.h"
#include "models/tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: tokenizer_bench TOKENIZER_DIR TEXT_FILE REPEATS [lines]\n");
    return 2;
  }
  auto tok = rlforge::models::LoadTokenizer(argv[1]);
  if (!tok.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  std::ifstream in(argv[2], std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const int repeats = std::atoi(argv[3]);
  std::vector<std::string> pieces;
  if (argc == 5 && std::string(argv[4]) == "lines") {
    std::string line;
    std::istringstream ls(text);
    while (std::getline(ls, line)) pieces.push_back(line + "\n");
  } else {
    pieces.push_back(text);
  }
  std::vector<std::vector<int32_t>> ids_per_piece(pieces.size());
  rlforge::Stopwatch timer;
  for (int r = 0; r < repeats; ++r) {
    for (size_t i = 0; i < pieces.size(); ++i) ids_per_piece[i] = (*tok)->Encode(pieces[i]);
  }
  const double encode_s = timer.Lap();
  std::string back;
  for (int r = 0; r < repeats; ++r) {
    back.clear();
    for (const auto& ids : ids_per_piece) back += (*tok)->Decode(ids);
  }
  const double decode_s = timer.Seconds();
  std::vector<int32_t> ids;
  for (const auto& p : ids_per_piece) ids.insert(ids.end(), p.begin(), p.end());
  uint64_t h = 0xcbf29ce484222325ull;
  for (int32_t id : ids) h = (h ^ static_cast<uint32_t>(id)) * 0x100000001b3ull;
  std::printf(
      "{\"bytes\": %zu, \"tokens\": %zu, \"encode_s\": %.6f, \"decode_s\": %.6f, "
      "\"roundtrip\": %s, \"ids_fnv\": \"%016llx\"}\n",
      text.size(), ids.size(), encode_s / repeats, decode_s / repeats,
      back == text ? "true" : "false", static_cast<unsigned long long>(h));
  return 0;
}
