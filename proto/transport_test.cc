#include <gtest/gtest.h>

#include "proto/memory_transport.h"
#include "proto/zmq_transport.h"

namespace rlforge {
namespace {

Message Heartbeat(const std::string& sender) {
  Message m;
  m.envelope.set_sender(sender);
  m.envelope.mutable_heartbeat()->set_state(proto::Heartbeat::IDLE);
  return m;
}

TEST(ZmqTransportTest, ClientAndServerExchangeTensors) {
  zmq::context_t ctx;
  auto server = ZmqServerTransport::Bind(ctx, "tcp://127.0.0.1:0", ZmqOptions{});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_NE((*server)->endpoint().find("tcp://127.0.0.1:"), std::string::npos);
  auto client = ZmqClientTransport::Connect(ctx, (*server)->endpoint(), ZmqOptions{});
  ASSERT_TRUE(client.ok());

  Message m = Heartbeat("a");
  m.tensors.push_back(TensorFrame::FromVector<float>("x", {1, 2, 3}));
  ASSERT_TRUE((*client)->Send(std::move(m)).ok());
  auto got = (*server)->Receive(5000);
  ASSERT_TRUE(got.has_value());
  ASSERT_TRUE(got->message.ok()) << got->message.status();
  EXPECT_EQ(got->message->envelope.seq(), 1u);
  EXPECT_EQ(got->message->tensors[0].ToVector<float>(), (std::vector<float>{1, 2, 3}));

  ASSERT_TRUE((*server)->Send(got->peer, Heartbeat("controller")).ok());
  auto back = (*client)->Receive(5000);
  ASSERT_TRUE(back.has_value());
  ASSERT_TRUE(back->ok());
  EXPECT_EQ((*back)->envelope.sender(), "controller");
}

TEST(ZmqTransportTest, SendToUnknownPeerIsAnErrorNotADrop) {
  zmq::context_t ctx;
  auto server = ZmqServerTransport::Bind(ctx, "tcp://127.0.0.1:0", ZmqOptions{});
  ASSERT_TRUE(server.ok());
  EXPECT_FALSE((*server)->Send("nobody", Heartbeat("controller")).ok());
}

TEST(ZmqTransportTest, ReceiveTimesOutWithNothing) {
  zmq::context_t ctx;
  auto server = ZmqServerTransport::Bind(ctx, "tcp://127.0.0.1:0", ZmqOptions{});
  ASSERT_TRUE(server.ok());
  EXPECT_FALSE((*server)->Receive(10).has_value());
}

TEST(ZmqTransportTest, BindFailureNamesTheAddress) {
  zmq::context_t ctx;
  auto s = ZmqServerTransport::Bind(ctx, "tcp://300.1.1.1:5", ZmqOptions{});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("300.1.1.1"), std::string::npos);
}

TEST(MemoryTransportTest, DeliversInjectedAndRecordsSent) {
  MemoryServerTransport t;
  t.Inject("p1", Heartbeat("a"));
  auto r = t.Receive(0);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->peer, "p1");
  EXPECT_FALSE(t.Receive(0).has_value());
  ASSERT_TRUE(t.Send("p1", Heartbeat("controller")).ok());
  auto sent = t.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].first, "p1");
  t.Disconnect("p1");
  EXPECT_FALSE(t.Send("p1", Heartbeat("controller")).ok());
}

}  // namespace
}  // namespace rlforge
