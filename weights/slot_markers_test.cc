#include "weights/slot_markers.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace rlforge {
namespace {

std::string Name(const char* tag) {
  return "/rlforge-test-markers-" + std::to_string(getpid()) + tag;
}

TEST(SlotMarkersTest, AReaderSeesAVersionOnlyOnceItsWriteEnded) {
  auto writer = SlotMarkerWriter::Create(Name("a"));
  ASSERT_TRUE(writer.ok()) << writer.status();
  auto reader = SlotMarkerReader::Open((*writer)->name());
  ASSERT_TRUE(reader.ok()) << reader.status();
  (*writer)->BeginWrite(3);
  absl::Status early = (*reader)->AwaitVersion(3, 0.01);
  EXPECT_EQ(early.code(), absl::StatusCode::kDeadlineExceeded) << early;
  EXPECT_NE(early.message().find("version 3 was not published in " + (*writer)->name() +
                                 " within 0.01 s (weights.timeout_s)"),
            std::string::npos)
      << early;
  (*writer)->EndWrite(3);
  EXPECT_TRUE((*reader)->AwaitVersion(3, 1).ok());
  (*writer)->BeginWrite(4);  // the other slot: version 3's copy is untouched
  EXPECT_TRUE((*reader)->CheckStill(3).ok());
}

TEST(SlotMarkersTest, ASlotRewrittenDuringTheCopyIsATornRead) {
  auto writer = SlotMarkerWriter::Create(Name("b"));
  ASSERT_TRUE(writer.ok());
  auto reader = SlotMarkerReader::Open((*writer)->name());
  ASSERT_TRUE(reader.ok());
  (*writer)->BeginWrite(2);
  (*writer)->EndWrite(2);
  ASSERT_TRUE((*reader)->AwaitVersion(2, 1).ok());
  (*writer)->BeginWrite(4);  // version 2's slot, while the reader copies it
  absl::Status torn = (*reader)->CheckStill(2);
  EXPECT_EQ(torn.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(torn.message(), "version 2's slot in " + (*writer)->name() +
                                " was rewritten while it was copied (it holds a version being "
                                "written): a torn read, refused");
  (*writer)->EndWrite(4);
  EXPECT_NE((*reader)->CheckStill(2).message().find("(it holds version 4)"), std::string::npos);
  // Waiting for version 2 now is pointless: the publisher moved on.
  absl::Status gone = (*reader)->AwaitVersion(2, 5);
  EXPECT_EQ(gone.code(), absl::StatusCode::kAborted) << gone;
  EXPECT_NE(gone.message().find("holds version 4 in version 2's slot: the publisher moved on"),
            std::string::npos)
      << gone;
}

TEST(SlotMarkersTest, AMissingHeaderSaysTheEnginesMustShareTheTrainersHost) {
  auto reader = SlotMarkerReader::Open(Name("none"));
  ASSERT_FALSE(reader.ok());
  EXPECT_NE(reader.status().message().find("cuda_ipc needs the engines on the trainer's host"),
            std::string::npos)
      << reader.status();
}

}  // namespace
}  // namespace rlforge
