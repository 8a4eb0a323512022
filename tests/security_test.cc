// End-to-end: CURVE on the control plane (docs/multi_host.md#security). Jobs that bind beyond
// loopback make their keys, their own actors join with them, and an actor without them is
// refused with a message while the job carries on; loopback jobs stay key-free.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <regex>
#include <sstream>

#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "dashboard/server.h"
#include "tests/job_process.h"

namespace rlforge::testing {
namespace {

namespace fs = std::filesystem;

std::string EchoConfig() { return SourceDir() + "/configs/echo.yaml"; }

int Mode(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

void ExpectPrivateKeys(const std::string& run_dir) {
  EXPECT_EQ(Mode(run_dir + "/keys"), 0700);
  EXPECT_EQ(Mode(run_dir + "/keys/controller.key"), 0600);
  EXPECT_EQ(Mode(run_dir + "/keys/actor.key"), 0600);
}

// One command line of the doc's example: environment assignments, then argv.
struct DocCommand {
  std::map<std::string, std::string> env;
  std::vector<std::string> args;  // without the leading `rlforge`
};

// The ```sh block after <!-- tested: security-example --> in docs/multi_host.md, with the
// doc's placeholders mapped onto this test: the run root, the controller's host and port.
std::vector<DocCommand> DocExample(const std::string& root, const std::string& port) {
  std::string doc = ReadFile(SourceDir() + "/docs/multi_host.md");
  size_t at = doc.find("<!-- tested: security-example -->");
  EXPECT_NE(at, std::string::npos) << "docs/multi_host.md lost its tested example";
  size_t begin = doc.find("```sh\n", at) + 6;
  std::string block = doc.substr(begin, doc.find("```", begin) - begin);
  block = absl::StrReplaceAll(block, {{"CONTROLLER_HOST", "127.0.0.1"},
                                      {"5555", port},
                                      {"runs/", root + "/"},
                                      {"configs/", SourceDir() + "/configs/"}});
  std::vector<DocCommand> out;
  for (absl::string_view line : absl::StrSplit(block, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    DocCommand c;
    bool seen_rlforge = false;
    for (absl::string_view w : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      std::string word(w);
      size_t eq = word.find('=');
      if (!seen_rlforge && word == "rlforge") {
        seen_rlforge = true;
      } else if (!seen_rlforge && eq != std::string::npos) {
        c.env[word.substr(0, eq)] = word.substr(eq + 1);
      } else {
        c.args.push_back(word);
      }
    }
    EXPECT_TRUE(seen_rlforge) << line;
    out.push_back(std::move(c));
  }
  return out;
}

// The doc's example, as written: a job binding 0.0.0.0, two actors joining with the key (one by
// --keys, one by RLFORGE_KEYS), and one without it, refused with exit code 2 and a message that
// says what to pass; the job finishes as if it had never come.
TEST(SecurityTest, DocExampleJoinsWithKeysAndRefusesAnActorWithout) {
  std::string root = FreshDir("security_doc");
  std::vector<DocCommand> cmds = DocExample(root, "0");
  ASSERT_EQ(cmds.size(), 4u);
  std::vector<std::string> run = cmds[0].args;
  for (const char* o : {"job.iterations=2", "echo.payload_bytes=4096"}) run.push_back(o);
  run.push_back("job.run_root=" + root);
  JobProcess job(run, root + "/job.txt");
  ASSERT_TRUE(job.WaitForOutput("waiting for echo-1 to join", 30)) << job.Output();
  std::smatch m;
  std::string out = job.Output();
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(listening on tcp://0\.0\.0\.0:([0-9]+))")))
      << out;
  const std::string run_dir = root + "/secure";
  ExpectPrivateKeys(run_dir);
  EXPECT_NE(out.find("--keys " + run_dir + "/keys/actor.key"), std::string::npos)
      << "the join hint names the key file: " << out;

  cmds = DocExample(root, m[1]);
  JobProcess stranger(cmds[3].args, root + "/stranger.txt");
  EXPECT_EQ(stranger.Wait(30), 2) << stranger.Output();
  EXPECT_NE(stranger.Output().find("the controller at tcp://127.0.0.1:" + std::string(m[1]) +
                                   " refused the handshake: the job requires its CURVE keys "
                                   "(pass --keys runs/NAME/keys/actor.key or set RLFORGE_KEYS)"),
            std::string::npos)
      << stranger.Output();

  // The dashboard counts the refusals (refreshed every 200 ms while the controller waits).
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(dashboard at (http://[0-9.]+:[0-9]+)/)")));
  const std::string dashboard = m[1];
  const std::regex counted(R"(rlforge_dropped_messages_total\{reason="unauthenticated"\} [1-9])");
  std::string prometheus;
  for (int64_t until = RealClock::Get()->NowMicros() + 10'000'000;
       RealClock::Get()->NowMicros() < until && !std::regex_search(prometheus, counted);) {
    auto r = dashboard::HttpGet(dashboard, "/metrics", "");
    if (r.ok()) prometheus = r->body;
    usleep(50'000);
  }
  EXPECT_TRUE(std::regex_search(prometheus, counted)) << prometheus;

  JobProcess a(cmds[1].args, root + "/a.txt", cmds[1].env);
  JobProcess b(cmds[2].args, root + "/b.txt", cmds[2].env);
  ASSERT_FALSE(cmds[2].env.empty()) << "the third line passes the key through RLFORGE_KEYS";
  auto code = job.Wait(60);
  ASSERT_TRUE(code.has_value()) << job.Output();
  EXPECT_EQ(*code, 0) << job.Output();
  EXPECT_EQ(a.Wait(15), 0) << a.Output();
  EXPECT_EQ(b.Wait(15), 0) << b.Output();
  EXPECT_EQ(ReadMetricsJsonl(run_dir).size(), 2u);
  std::string log = ReadFile(run_dir + "/logs/controller.log");
  EXPECT_NE(log.find("controller socket: refused a connection from "), std::string::npos) << log;
  // The stranger retries until it sees the refusal itself: one or more connections.
  EXPECT_TRUE(std::regex_search(
      log, std::regex(R"(refused [1-9][0-9]* connection\(s\) without this job's CURVE key)")))
      << log;
}

// Actors the controller starts get RLFORGE_KEYS and connect over CURVE; the wildcard bind is
// reached over 127.0.0.1, still CURVE.
TEST(SecurityTest, LaunchedActorsGetTheKeysOfAJobBindingBeyondLoopback) {
  std::string root = FreshDir("security_launched");
  auto [code, out] =
      RunRlforge({"run", EchoConfig(), "job.run_root=" + root, "job.name=w", "job.iterations=2",
                  "echo.payload_bytes=4096", "controller.host=0.0.0.0"});
  ASSERT_EQ(code, 0) << out;
  ExpectPrivateKeys(root + "/w");
  EXPECT_NE(out.find("control plane: CURVE (controller.security auto)"), std::string::npos) << out;
  EXPECT_EQ(ReadMetricsJsonl(root + "/w").size(), 2u);
}

TEST(SecurityTest, LoopbackJobHasNoKeysUnlessAsked) {
  std::string root = FreshDir("security_loopback");
  auto [code, out] = RunRlforge({"run", EchoConfig(), "job.run_root=" + root, "job.name=l",
                                 "job.iterations=1", "echo.payload_bytes=1024"});
  ASSERT_EQ(code, 0) << out;
  EXPECT_FALSE(fs::exists(root + "/l/keys")) << "a loopback-only job stays key-free";

  auto [code2, out2] =
      RunRlforge({"run", EchoConfig(), "job.run_root=" + root, "job.name=c", "job.iterations=1",
                  "echo.payload_bytes=1024", "controller.security=curve"});
  ASSERT_EQ(code2, 0) << out2;
  ExpectPrivateKeys(root + "/c");
}

TEST(SecurityTest, PlaintextBeyondLoopbackIsAnExplicitChoiceWithAWarning) {
  std::string root = FreshDir("security_none");
  auto [code, out] = RunRlforge({"run", EchoConfig(), "job.run_root=" + root, "job.name=n",
                                 "job.iterations=1", "echo.payload_bytes=1024",
                                 "controller.host=0.0.0.0", "controller.security=none"});
  ASSERT_EQ(code, 0) << out;
  EXPECT_FALSE(fs::exists(root + "/n/keys"));
  EXPECT_NE(out.find("the control plane is PLAINTEXT and UNAUTHENTICATED"), std::string::npos)
      << out;
}

}  // namespace
}  // namespace rlforge::testing
