#include "sim_bridge/shm_channel.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

namespace rlforge::sim {
namespace {

std::string Address(const std::string& tag) {
  return "shm://rlforge-test-" + std::to_string(getpid()) + "-" + tag;
}

std::vector<zmq::message_t> Frames(std::initializer_list<std::string> parts) {
  std::vector<zmq::message_t> f;
  for (const auto& p : parts) f.emplace_back(p.data(), p.size());
  return f;
}

std::string Text(const zmq::message_t& m) { return std::string(m.data<char>(), m.size()); }

// A forked process that does `body` and then waits to be killed.
pid_t Fork(const std::function<void()>& body) {
  pid_t pid = fork();
  if (pid == 0) {
    body();
    pause();
    _exit(0);
  }
  return pid;
}

void Kill(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

TEST(ShmChannelTest, FramesRoundTripBothWaysInOrder) {
  std::string addr = Address("rt");
  auto server = ShmChannel::Create(addr, {});
  ASSERT_TRUE(server.ok()) << server.status();
  std::thread serve([&] {
    for (int i = 0; i < 500; ++i) {
      auto req = (*server)->Receive(5000);
      ASSERT_TRUE(req.ok()) << req.status();
      ASSERT_EQ(req->size(), 2u);
      // Echo back reversed, with an empty frame between.
      std::vector<zmq::message_t> rep;
      rep.emplace_back((*req)[1].data(), (*req)[1].size());
      rep.emplace_back();
      rep.emplace_back((*req)[0].data(), (*req)[0].size());
      ASSERT_TRUE((*server)->Send(rep).ok());
    }
  });
  auto client = ShmChannel::Open(addr, 1000, {});
  ASSERT_TRUE(client.ok()) << client.status();
  for (int i = 0; i < 500; ++i) {
    std::string big(static_cast<size_t>(i) * 97, static_cast<char>('a' + i % 26));
    ASSERT_TRUE((*client)->Send(Frames({"req " + std::to_string(i), big})).ok());
    auto rep = (*client)->Receive(5000);
    ASSERT_TRUE(rep.ok()) << rep.status();
    ASSERT_EQ(rep->size(), 3u);
    EXPECT_EQ(Text((*rep)[0]), big);
    EXPECT_EQ((*rep)[1].size(), 0u);
    EXPECT_EQ(Text((*rep)[2]), "req " + std::to_string(i));
  }
  serve.join();
}

TEST(ShmChannelTest, NoAnswerIsADeadlineAndNoServerIsNamed) {
  std::string addr = Address("quiet");
  auto server = ShmChannel::Create(addr, {});
  ASSERT_TRUE(server.ok());
  auto client = ShmChannel::Open(addr, 1000, {});
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->Send(Frames({"x"})).ok());
  auto rep = (*client)->Receive(150);
  EXPECT_EQ(rep.status().code(), absl::StatusCode::kDeadlineExceeded) << rep.status();
  // The server still sees the request and can answer late.
  ASSERT_TRUE((*server)->Receive(100).ok());

  auto none = ShmChannel::Open(Address("nobody"), 100, {});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(none.status().message().find("no sim server at " + Address("nobody")),
            std::string::npos)
      << none.status();
}

TEST(ShmChannelTest, OversizedMessagesAndBadNamesAreRefused) {
  ShmChannel::Options small;
  small.capacity = 1024;
  std::string addr = Address("small");
  auto server = ShmChannel::Create(addr, small);
  ASSERT_TRUE(server.ok());
  auto client = ShmChannel::Open(addr, 1000, {});
  ASSERT_TRUE(client.ok());
  absl::Status s = (*client)->Send(Frames({std::string(2000, 'z')}));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("capacity of 1024 bytes"), std::string::npos) << s;
  for (const char* bad : {"shm://", "shm://a/b", "shm://../etc", "tcp://x"}) {
    EXPECT_FALSE(ShmChannel::Create(bad, {}).ok()) << bad;
  }
}

TEST(ShmChannelTest, ASecondLiveClientIsRefusedAndADeadOnesClaimIsTaken) {
  std::string addr = Address("claim");
  auto server = ShmChannel::Create(addr, {});
  ASSERT_TRUE(server.ok());
  pid_t holder = Fork([&] {
    auto c = ShmChannel::Open(addr, 1000, {});
    if (!c.ok()) _exit(3);
    c->release();  // keep the claim until killed
  });
  // Wait until the child holds it: Open from here is refused meanwhile.
  absl::Status refused;
  for (int i = 0; i < 200; ++i) {
    auto c = ShmChannel::Open(addr, 1000, {});
    if (!c.ok()) {
      refused = c.status();
      break;
    }
    c->reset();  // the child was not there yet: let go and retry
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_NE(refused.message().find("already has a client (pid " + std::to_string(holder)),
            std::string::npos)
      << refused;
  Kill(holder);
  auto taken = ShmChannel::Open(addr, 1000, {});
  EXPECT_TRUE(taken.ok()) << taken.status();
}

TEST(ShmChannelTest, AServerThatDiesIsAnErrorNotAHang) {
  std::string addr = Address("dies");
  pid_t srv = Fork([&] {
    auto s = ShmChannel::Create(addr, {});
    if (!s.ok()) _exit(3);
    auto req = (*s)->Receive(10000);  // answer the first request only
    if (req.ok()) (void)(*s)->Send(*req);
    s->release();
  });
  auto client = ShmChannel::Open(addr, 5000, {});
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Send(Frames({"ping"})).ok());
  auto rep = (*client)->Receive(5000);
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(Text((*rep)[0]), "ping");
  ASSERT_TRUE((*client)->Send(Frames({"ping"})).ok());
  Kill(srv);
  rep = (*client)->Receive(20000);
  // Unavailable, not DeadlineExceeded: it noticed the death instead of waiting the time out.
  EXPECT_EQ(rep.status().code(), absl::StatusCode::kUnavailable) << rep.status();
  EXPECT_NE(rep.status().message().find("has exited"), std::string::npos) << rep.status();
  // The segment it left is not mistaken for a live server.
  client->reset();
  auto stale = ShmChannel::Open(addr, 200, {});
  EXPECT_FALSE(stale.ok());
  EXPECT_NE(stale.status().message().find("that has exited"), std::string::npos) << stale.status();
  unlink(("/dev/shm/" + addr.substr(6)).c_str());
}

}  // namespace
}  // namespace rlforge::sim
