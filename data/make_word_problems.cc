// Writes the committed word-problem files: make_word_problems DIR -> DIR/train.jsonl,
// DIR/heldout.jsonl and DIR/train_careless.jsonl (see data/word_problems.h).
#include <cstdio>

#include "data/word_problems.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR   (writes DIR/{train,heldout,train_careless}.jsonl)\n",
                 argv[0]);
    return 2;
  }
  const absl::Status s = rlforge::WriteWordProblems(
      argv[1], rlforge::kWordProblemsSeed, rlforge::kWordProblemsTrain,
      rlforge::kWordProblemsHeldout, rlforge::kWordProblemsCarelessShare);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
