// Hostile input at a live controller's socket: garbage, truncated, empty,
// wrong-version, oversized and forged messages. The controller must drop each,
// stay up and keep serving its real actor to the end of the job.
#include <gtest/gtest.h>

#include <regex>

#include "proto/wire.h"
#include "tests/job_process.h"
#include "zmq.hpp"
#include "zmq_addon.hpp"

namespace rlforge::testing {
namespace {

void SendFrames(zmq::socket_t& s, std::vector<zmq::message_t> frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    s.send(frames[i], i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

std::vector<zmq::message_t> Frames(std::initializer_list<std::string> parts) {
  std::vector<zmq::message_t> f;
  for (const auto& p : parts) f.emplace_back(p.data(), p.size());
  return f;
}

TEST(WireRobustnessTest, ControllerSurvivesHostileFramesAndKeepsServing) {
  std::string root = FreshDir("hostile");
  JobProcess job(
      {"run", SourceDir() + "/configs/echo.yaml", "job.run_root=" + root, "job.name=h",
       "job.iterations=25", "echo.workers=1", "echo.requests_per_iteration=1",
       "echo.work_micros=60000", "echo.payload_bytes=1000", "controller.max_message_mb=1"},
      root + "/out.txt");
  ASSERT_TRUE(job.WaitForOutput("iter 2/25", 30)) << job.Output();
  std::smatch m;
  std::string out = job.Output();
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(listening on (tcp://[0-9.]+:[0-9]+))")));
  std::string addr = m[1];

  zmq::context_t ctx;
  auto dealer = [&] {
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.connect(addr);
    return s;
  };
  zmq::socket_t attacker = dealer();
  // 1. Random bytes, 2. an empty frame, 3. many frames of junk.
  SendFrames(attacker, Frames({std::string("\x12\x34\xff\xfe garbage \x00\x01", 16)}));
  SendFrames(attacker, Frames({""}));
  SendFrames(attacker, Frames({"a", "b", "c", "d"}));
  // 4. A valid envelope announcing two tensors, followed by one truncated frame.
  {
    Message msg;
    msg.envelope.set_sender("echo-0");
    msg.envelope.mutable_work_result()->set_work_id(1);
    msg.tensors.push_back(TensorFrame::FromVector<float>("x", std::vector<float>(100, 1.f)));
    msg.tensors.push_back(TensorFrame::FromVector<float>("y", std::vector<float>(100, 1.f)));
    auto frames = Encode(std::move(msg));
    frames.pop_back();
    frames[1] = zmq::message_t(frames[1].data(), 37);
    SendFrames(attacker, std::move(frames));
  }
  // 5. An envelope with no body, 6. a heartbeat from nobody, 7. a forged result
  // in the real actor's name from another connection.
  {
    proto::Envelope env;
    env.set_protocol_version(kProtocolVersion);
    SendFrames(attacker, Frames({env.SerializeAsString()}));
    Message hb;
    hb.envelope.set_sender("echo-9");
    hb.envelope.mutable_heartbeat();
    SendFrames(attacker, Encode(std::move(hb)));
    Message forged;
    forged.envelope.set_sender("echo-0");
    forged.envelope.mutable_work_result()->set_work_id(3);
    SendFrames(attacker, Encode(std::move(forged)));
  }
  // 8. Wrong protocol version: the controller answers with a Reject.
  zmq::socket_t old_peer = dealer();
  {
    Message reg;
    reg.envelope.mutable_register_()->set_role("echo");
    auto frames = Encode(std::move(reg));
    proto::Envelope env;
    ASSERT_TRUE(env.ParseFromArray(frames[0].data(), static_cast<int>(frames[0].size())));
    env.set_protocol_version(kProtocolVersion + 41);
    frames[0] = zmq::message_t(env.SerializeAsString());
    SendFrames(old_peer, std::move(frames));
    zmq::pollitem_t item{old_peer.handle(), 0, ZMQ_POLLIN, 0};
    ASSERT_EQ(zmq::poll(&item, 1, std::chrono::milliseconds(5000)), 1) << "no Reject came back";
    std::vector<zmq::message_t> reply;
    ASSERT_TRUE(zmq::recv_multipart(old_peer, std::back_inserter(reply)));
    auto decoded = Decode(std::move(reply), WireLimits{});
    ASSERT_TRUE(decoded.ok());
    EXPECT_NE(decoded->envelope.reject().reason().find("protocol version 42"), std::string::npos);
  }
  // 9. Oversized: 2 MiB against a 1 MiB limit (ZeroMQ drops the connection).
  {
    zmq::socket_t big = dealer();
    std::string payload(2 << 20, 'x');
    SendFrames(big, Frames({payload}));
    // 10. A Register for a role the job does not have.
    Message reg;
    reg.envelope.set_sender("intruder");
    reg.envelope.mutable_register_()->set_role("trainer");
    reg.envelope.mutable_register_()->set_instance_id("intruder");
    SendFrames(attacker, Encode(std::move(reg)));
  }

  auto code = job.Wait(60);
  ASSERT_TRUE(code.has_value()) << job.Output();
  EXPECT_EQ(*code, 0) << job.Output();
  out = job.Output();
  EXPECT_NE(out.find("iter 25/25"), std::string::npos);
  EXPECT_NE(out.find("dropped a message"), std::string::npos) << out;
  EXPECT_NE(out.find("from unregistered sender 'echo-9'"), std::string::npos) << out;
  EXPECT_NE(out.find("dropped work_result from echo-0: job id '' is not this job's"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("refused trainer actor"), std::string::npos) << out;
  EXPECT_NE(out.find("bad message(s) during the run"), std::string::npos) << out;
}

}  // namespace
}  // namespace rlforge::testing
