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

TEST(SafetensorsTest, ReadRangeCopiesThatSliceOfTheFlatTensor) {
  const torch::Tensor w = torch::randn({6, 5});
  const torch::Tensor h = torch::randn({7}).to(torch::kBFloat16);
  const std::string path = TempPath("range.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"w", w}, {"h", h}}).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  for (auto [begin, count] : {std::pair<int64_t, int64_t>{0, 30}, {7, 11}, {29, 1}, {30, 0}}) {
    auto got = (*f)->ReadRange("w", begin, count);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(torch::equal(*got, w.reshape(-1).narrow(0, begin, count))) << begin;
  }
  auto bf = (*f)->ReadRange("h", 2, 3);
  ASSERT_TRUE(bf.ok()) << bf.status();
  EXPECT_EQ(bf->scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(*bf, h.narrow(0, 2, 3)));
}

TEST(SafetensorsTest, ReadRangeOutOfBoundsNamesFileAndTensor) {
  const std::string path = TempPath("range_bounds.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"w", torch::zeros({4, 3})}}).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  for (auto [begin, count] : {std::pair<int64_t, int64_t>{10, 3}, {-1, 2}, {0, 13}, {13, 0}}) {
    auto got = (*f)->ReadRange("w", begin, count);
    ASSERT_FALSE(got.ok()) << begin << "+" << count;
    const std::string msg(got.status().message());
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("'w'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("outside its 12"), std::string::npos) << msg;
  }
  EXPECT_FALSE((*f)->ReadRange("missing", 0, 1).ok());
}

TEST(SafetensorsTest, WriterTakesPiecesInAnyOrder) {
  const torch::Tensor a = torch::randn({4, 6}), b = torch::arange(10, torch::kInt64);
  const std::string path = TempPath("pieces.safetensors");
  auto w = SafetensorsWriter::Create(
      path, {{"a", torch::kFloat32, {4, 6}}, {"b", torch::kInt64, {10}}}, {{"format", "pt"}});
  ASSERT_TRUE(w.ok()) << w.status();
  const torch::Tensor flat = a.reshape(-1);
  ASSERT_TRUE((*w)->Write("b", 0, b).ok());
  ASSERT_TRUE((*w)->Write("a", 13, flat.narrow(0, 13, 11)).ok());
  ASSERT_TRUE((*w)->Write("a", 0, flat.narrow(0, 0, 7).view({7, 1})).ok());
  ASSERT_TRUE((*w)->Write("a", 5, flat.narrow(0, 5, 8)).ok());  // overlaps both
  EXPECT_FALSE(std::filesystem::exists(path)) << "visible before Finish";
  ASSERT_TRUE((*w)->Finish().ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(torch::equal(*(*f)->Read("a"), a));
  EXPECT_TRUE(torch::equal(*(*f)->Read("b"), b));
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
}

TEST(SafetensorsTest, WriterRejectsBadPiecesAndUnwrittenElements) {
  const std::string path = TempPath("holes.safetensors");
  auto w = SafetensorsWriter::Create(path, {{"a", torch::kFloat32, {8}}});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_FALSE((*w)->Write("a", 0, torch::zeros({2}, torch::kFloat64)).ok()) << "dtype";
  EXPECT_FALSE((*w)->Write("a", 7, torch::zeros({2})).ok()) << "past the end";
  EXPECT_FALSE((*w)->Write("nope", 0, torch::zeros({1})).ok());
  ASSERT_TRUE((*w)->Write("a", 0, torch::zeros({3})).ok());
  ASSERT_TRUE((*w)->Write("a", 4, torch::zeros({4})).ok());
  absl::Status s = (*w)->Finish();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("'a': not every element written"), std::string::npos)
      << s;
  w->reset();
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp")) << "an abandoned writer cleans up";
}

}  // namespace
}  // namespace rlforge::models
