#include "models/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace rlforge::models {
namespace {

std::string TempPath(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("rlforge_st_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// A file made of a hand-written header and `data_bytes` zero bytes.
std::string WithHeader(const std::string& name, const std::string& header, size_t data_bytes) {
  std::string bytes(8, '\0');
  uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes += header + std::string(data_bytes, '\0');
  std::string path = TempPath(name);
  WriteAll(path, bytes);
  return path;
}

void ExpectOpenError(const std::string& path, const std::string& needle) {
  auto f = SafetensorsFile::Open(path);
  ASSERT_FALSE(f.ok()) << path;
  std::string msg(f.status().message());
  EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST(SafetensorsTest, RoundTripKeepsDtypesShapesValuesAndMetadata) {
  std::vector<std::pair<std::string, torch::Tensor>> tensors = {
      {"a.f32", torch::randn({3, 4})},
      {"b.bf16", torch::randn({5}).to(torch::kBFloat16)},
      {"c.i64", torch::arange(6, torch::kInt64).view({2, 3})},
      {"d.scalar", torch::tensor(2.5f)},
      {"e.empty", torch::zeros({0, 3})},
      {"f.strided", torch::randn({4, 4}).t()},
  };
  const std::string path = TempPath("round.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"format", "pt"}}).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  EXPECT_EQ((*f)->names().size(), tensors.size());
  for (const auto& [name, want] : tensors) {
    auto got = (*f)->Read(name);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->scalar_type(), want.scalar_type()) << name;
    EXPECT_EQ(got->sizes(), want.sizes()) << name;
    EXPECT_TRUE(torch::equal(*got, want)) << name;
  }
  EXPECT_EQ((*f)->Info("b.bf16")->dtype, "BF16");
  EXPECT_FALSE((*f)->Read("missing").ok());
}

TEST(SafetensorsTest, TruncatedFileIsAClearError) {
  const std::string path = TempPath("full.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"w", torch::randn({16, 16})}}).ok());
  std::string bytes = ReadAll(path);
  // Cut inside the data, inside the header, inside the length prefix.
  const std::string data_cut = TempPath("data_cut.safetensors");
  WriteAll(data_cut, bytes.substr(0, bytes.size() - 10));
  ExpectOpenError(data_cut, "truncated");
  const std::string header_cut = TempPath("header_cut.safetensors");
  WriteAll(header_cut, bytes.substr(0, 20));
  ExpectOpenError(header_cut, "header length");
  const std::string tiny = TempPath("tiny.safetensors");
  WriteAll(tiny, bytes.substr(0, 5));
  ExpectOpenError(tiny, "shorter than");
  ExpectOpenError(TempPath("absent.safetensors"), "cannot open");
}

TEST(SafetensorsTest, CorruptHeadersAreClearErrors) {
  ExpectOpenError(WithHeader("garbage.st", "{not json", 0), "not a JSON object");
  ExpectOpenError(WithHeader("nodtype.st", R"({"w": {"shape": [2], "data_offsets": [0, 8]}})", 8),
                  "'w'");
  ExpectOpenError(WithHeader("baddtype.st",
                             R"({"w": {"dtype": "Q7", "shape": [2], "data_offsets": [0, 8]}})", 8),
                  "Q7");
  ExpectOpenError(
      WithHeader("size.st", R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8),
      "do not hold 12 bytes");
  ExpectOpenError(
      WithHeader("neg.st", R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8),
      "shape entry");
  ExpectOpenError(WithHeader("overlap.st",
                             R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                 "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                             12),
                  "overlap");
  ExpectOpenError(
      WithHeader("past.st", R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8),
      "truncated");
}

TEST(SafetensorsTest, WriteRejectsRepeatedNames) {
  auto s = WriteSafetensors(TempPath("dup.st"), {{"x", torch::ones({1})}, {"x", torch::ones({1})}});
  EXPECT_FALSE(s.ok());
}

}  // namespace
}  // namespace rlforge::models
