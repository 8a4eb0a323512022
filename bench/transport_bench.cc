// Controller <-> actor round trip: rlforge's framing against bare cppzmq.
//
// Both sides use DEALER -> ROUTER over tcp on 127.0.0.1, one echo thread, the
// same payload sizes, interleaved rounds (A B A B ...) so machine noise hits
// both alike. "rlforge" = ZmqServerTransport/ZmqClientTransport with an
// Envelope (protobuf header) plus one raw tensor frame, Decode's checks and
// zero-copy TensorFrames; "bare" = one raw frame each way.
//
//   build/bench/transport_bench [--rounds 5] [--small-iters 20000] [--large-iters 40] [--curve]
//
// Prints p50/p99 latency and GB/s per size and the ratios rlforge / bare. With --curve, a
// third run per round does the same through CURVE sockets (a job's keys, the ZAP check: what a
// job binding beyond loopback pays) and the ratios curve / plain rlforge are printed too.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "proto/curve_keys.h"
#include "proto/zmq_transport.h"
#include "zmq.hpp"
#include "zmq_addon.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Stats {
  std::vector<double> us;
  double Percentile(double q) const {
    std::vector<double> v = us;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1,
                      static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5))];
  }
  double total_s = 0;
};

// Bare: ROUTER echoes [id][payload] back.
Stats RunBare(size_t bytes, int iters) {
  zmq::context_t ctx;
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.bind("tcp://127.0.0.1:*");
  std::string ep = router.get(zmq::sockopt::last_endpoint);
  std::atomic<bool> stop{false};
  std::thread server([&] {
    while (!stop) {
      zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(50)) <= 0) continue;
      std::vector<zmq::message_t> f;
      (void)zmq::recv_multipart(router, std::back_inserter(f));
      zmq::send_multipart(router, f);
    }
  });
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.connect(ep);
  std::string payload(bytes, 'x');
  Stats s;
  auto t_all = Clock::now();
  for (int i = -std::min(iters, 50); i < iters; ++i) {  // negative: warm-up
    auto t0 = Clock::now();
    // Zero-copy, like rlforge's borrowed tensors: the baseline pays no copy either.
    zmq::message_t m(
        payload.data(), payload.size(), [](void*, void*) {}, nullptr);
    dealer.send(m, zmq::send_flags::none);
    zmq::message_t r;
    (void)dealer.recv(r);
    if (r.size() != bytes) std::abort();
    if (i == 0) t_all = Clock::now();
    if (i >= 0)
      s.us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  s.total_s = std::chrono::duration<double>(Clock::now() - t_all).count();
  stop = true;
  server.join();
  return s;
}

// A job's keys, made once in a temporary run folder: {controller.key, actor.key}.
struct BenchKeys {
  rlforge::CurveKeys controller, actor;
};

BenchKeys MakeKeys() {
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("rlforge_transport_bench_" + std::to_string(getpid())))
                        .string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  if (!rlforge::WriteJobKeys(dir).ok()) std::abort();
  BenchKeys k{
      rlforge::LoadControllerKeys(rlforge::JobKeyPath(dir, rlforge::kControllerKeyFile)).value(),
      rlforge::LoadActorKeys(rlforge::JobKeyPath(dir, rlforge::kActorKeyFile)).value()};
  std::filesystem::remove_all(dir);
  return k;
}

// rlforge: Envelope + tensor frame through the real transports and Decode; CURVE with `keys`.
Stats RunRlforge(size_t bytes, int iters, const BenchKeys* keys) {
  zmq::context_t server_ctx, client_ctx;
  rlforge::ZmqOptions opt;
  opt.limits.max_message_bytes = size_t{1} << 31;
  rlforge::ZmqOptions client_opt = opt;
  if (keys != nullptr) {
    opt.curve = keys->controller;
    client_opt.curve = keys->actor;
  }
  auto server = rlforge::ZmqServerTransport::Bind(server_ctx, "tcp://127.0.0.1:0", opt).value();
  std::atomic<bool> stop{false};
  std::thread echo([&] {
    while (!stop) {
      auto r = server->Receive(50);
      if (!r || !r->message.ok()) continue;
      rlforge::Message reply;
      reply.envelope.set_sender("controller");
      reply.envelope.set_job_id("bench");
      reply.envelope.mutable_work_request()->set_work_id(
          r->message->envelope.work_result().work_id());
      reply.tensors = std::move(r->message->tensors);
      (void)server->Send(r->peer, std::move(reply));
    }
  });
  auto client =
      rlforge::ZmqClientTransport::Connect(client_ctx, server->endpoint(), client_opt).value();
  std::string payload(bytes, 'x');
  Stats s;
  auto t_all = Clock::now();
  for (int i = -std::min(iters, 50); i < iters; ++i) {
    auto t0 = Clock::now();
    rlforge::Message m;
    m.envelope.set_sender("bench-actor");
    m.envelope.set_job_id("bench");
    m.envelope.mutable_work_result()->set_work_id(static_cast<uint64_t>(i + 100));
    // Borrowed: the payload is not copied into the message (as a role sends a tensor).
    m.tensors.push_back(rlforge::TensorFrame::Borrow(
        "payload", rlforge::proto::U8, {static_cast<int64_t>(bytes)}, payload.data(), {}));
    (void)client->Send(std::move(m));
    std::optional<absl::StatusOr<rlforge::Message>> r;
    while (!(r = client->Receive(1000))) {
    }
    if (!r->ok() || (*r)->tensors[0].nbytes() != bytes) std::abort();
    if (i == 0) t_all = Clock::now();
    if (i >= 0)
      s.us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  s.total_s = std::chrono::duration<double>(Clock::now() - t_all).count();
  stop = true;
  echo.join();
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5, small_iters = 20000, large_iters = 30;
  bool curve = false;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--curve") {
      curve = true;
      continue;
    }
    int* target = k == "--rounds"        ? &rounds
                  : k == "--small-iters" ? &small_iters
                  : k == "--large-iters" ? &large_iters
                                         : nullptr;
    if (target == nullptr || i + 1 >= argc) {
      std::fprintf(stderr, "unknown option or missing value: %s\n", argv[i]);
      return 2;
    }
    *target = std::atoi(argv[++i]);
  }
  struct Size {
    const char* name;
    size_t bytes;
    int iters;
  };
  const BenchKeys keys = curve ? MakeKeys() : BenchKeys{};
  std::printf("round trip DEALER<->ROUTER over tcp://127.0.0.1, %d interleaved rounds%s\n", rounds,
              curve ? ", with CURVE runs" : "");
  for (Size size : {Size{"64 B", 64, small_iters}, Size{"64 MiB", size_t{64} << 20, large_iters}}) {
    Stats bare, ours, cur;
    auto add = [](Stats& to, const Stats& from) {
      to.us.insert(to.us.end(), from.us.begin(), from.us.end());
      to.total_s += from.total_s;
    };
    for (int r = 0; r < rounds; ++r) {
      add(bare, RunBare(size.bytes, size.iters));
      add(ours, RunRlforge(size.bytes, size.iters, nullptr));
      if (curve) add(cur, RunRlforge(size.bytes, size.iters, &keys));
    }
    auto gbs = [&](const Stats& s) {
      return 2.0 * static_cast<double>(size.bytes) * static_cast<double>(s.us.size()) / s.total_s /
             1e9;
    };
    auto ratio = [&](const Stats& a, const Stats& b, const char* what) {
      std::printf("ratio   %10.3f %10.3f %10.3f   (%s)\n", a.Percentile(0.5) / b.Percentile(0.5),
                  a.Percentile(0.99) / b.Percentile(0.99), gbs(a) / gbs(b), what);
    };
    std::printf("\n%-7s %10s %10s %10s\n", size.name, "p50 us", "p99 us", "GB/s");
    std::printf("bare    %10.1f %10.1f %10.3f\n", bare.Percentile(0.5), bare.Percentile(0.99),
                gbs(bare));
    std::printf("rlforge %10.1f %10.1f %10.3f\n", ours.Percentile(0.5), ours.Percentile(0.99),
                gbs(ours));
    if (curve) {
      std::printf("curve   %10.1f %10.1f %10.3f\n", cur.Percentile(0.5), cur.Percentile(0.99),
                  gbs(cur));
    }
    ratio(ours, bare, "rlforge / bare");
    std::printf("extra p50: %+.1f us; throughput overhead: %.1f%%\n",
                ours.Percentile(0.5) - bare.Percentile(0.5), 100.0 * (1.0 - gbs(ours) / gbs(bare)));
    if (curve) ratio(cur, ours, "curve / plain rlforge");
  }
  return 0;
}
