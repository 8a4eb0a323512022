#include "dashboard/tensorboard_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "proto/tensorboard.pb.h"

namespace rlforge::dashboard {
namespace {

uint64_t ReadLe(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(s[at + i])} << (8 * i);
  return v;
}

TEST(Crc32cTest, MatchesPublishedCheckValues) {
  // RFC 3720 (iSCSI) appendix B.4 and the CRC catalogue's check value.
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  std::string ones(32, '\xff');
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(MaskCrc(0), 0xa282ead8u);
}

TEST(EventFileWriterTest, RecordsAreFramedAndParseBack) {
  auto dir = std::filesystem::temp_directory_path() / ("rlforge_tb_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::string path;
  {
    auto w = EventFileWriter::Create(dir.string(), 1700000000.5, "host");
    ASSERT_TRUE(w.ok()) << w.status();
    path = (*w)->path();
    EXPECT_NE(path.find("events.out.tfevents.1700000000.host"), std::string::npos);
    ASSERT_TRUE((*w)->WriteScalars(3, 1700000001.0, {{"metrics/a", 0.0}, {"metrics/b", 2.5}}).ok());
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string bytes = ss.str();
  std::vector<tensorboard::Event> events;
  size_t at = 0;
  while (at < bytes.size()) {
    ASSERT_LE(at + 12, bytes.size());
    uint64_t len = ReadLe(bytes, at, 8);
    EXPECT_EQ(ReadLe(bytes, at + 8, 4), MaskCrc(Crc32c(bytes.data() + at, 8)));
    ASSERT_LE(at + 12 + len + 4, bytes.size());
    std::string data = bytes.substr(at + 12, len);
    EXPECT_EQ(ReadLe(bytes, at + 12 + len, 4), MaskCrc(Crc32c(data.data(), data.size())));
    tensorboard::Event e;
    ASSERT_TRUE(e.ParseFromString(data));
    events.push_back(e);
    at += 12 + len + 4;
  }
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_EQ(events[1].step(), 3);
  ASSERT_EQ(events[1].summary().value_size(), 2);
  // A zero must still be written: TensorBoard ignores a Value without simple_value.
  EXPECT_TRUE(events[1].summary().value(0).has_simple_value());
  EXPECT_EQ(events[1].summary().value(0).tag(), "metrics/a");
  EXPECT_FLOAT_EQ(events[1].summary().value(1).simple_value(), 2.5f);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rlforge::dashboard
