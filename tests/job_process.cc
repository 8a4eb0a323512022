#include "tests/job_process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "rlforge_paths.h"

namespace rlforge::testing {

std::string RlforgeBin() {
  const char* b = std::getenv("RLFORGE_BIN");
  return b ? b : RLFORGE_BIN_DEFAULT;
}

std::string SourceDir() {
  const char* s = std::getenv("RLFORGE_SOURCE_DIR");
  return s ? s : RLFORGE_SOURCE_DIR_DEFAULT;
}

std::string FreshDir(const std::string& name) {
  auto p =
      std::filesystem::temp_directory_path() / ("rlforge_e2e_" + std::to_string(getpid())) / name;
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

JobProcess::JobProcess(const std::vector<std::string>& args, const std::string& output_path,
                       const std::map<std::string, std::string>& env)
    : output_path_(output_path) {
  std::vector<std::string> argv = {RlforgeBin()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::filesystem::remove(output_path);
  auto pid = launcher_.Start(ProcessSpec{"rlforge", argv, output_path, env, {}});
  if (pid.ok()) pid_ = *pid;
}

JobProcess::~JobProcess() = default;

bool JobProcess::WaitForOutput(const std::string& text, double timeout_s) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < until) {
    if (Output().find(text) != std::string::npos) return true;
    if (code_.has_value()) return false;
    for (const auto& e : launcher_.Reap()) code_ = e.signaled ? 128 + e.code : e.code;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::optional<int> JobProcess::Wait(double timeout_s) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!code_.has_value() && std::chrono::steady_clock::now() < until) {
    for (const auto& e : launcher_.Reap()) code_ = e.signaled ? 128 + e.code : e.code;
    if (!code_) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return code_;
}

void JobProcess::Signal(int sig) { kill(pid_, sig); }

std::pair<int, std::string> RunRlforge(const std::vector<std::string>& args, double timeout_s) {
  static int counter = 0;
  std::string out = FreshDir("run_" + std::to_string(counter++)) + "/output.txt";
  JobProcess p(args, out);
  auto code = p.Wait(timeout_s);
  return {code.value_or(-1), p.Output()};
}

std::vector<int> ActorPids(const std::string& output) {
  std::vector<int> pids;
  static const std::regex re(R"(started \S+ \(pid (\d+)\))");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), re);
       it != std::sregex_iterator(); ++it) {
    pids.push_back(std::stoi((*it)[1]));
  }
  return pids;
}

int StartedPid(const std::string& output, const std::string& actor) {
  std::smatch m;
  if (!std::regex_search(output, m, std::regex("started " + actor + R"( \(pid (\d+)\))"))) return 0;
  return std::stoi(m[1]);
}

bool ProcessExists(int pid) { return kill(pid, 0) == 0; }

std::vector<nlohmann::json> ReadMetricsJsonl(const std::string& run_dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

bool WaitForMetrics(const std::string& run_dir, size_t n, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (ReadMetricsJsonl(run_dir).size() < n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

std::vector<std::string> ReadEvents(const std::string& run_dir) {
  std::vector<std::string> events;
  std::ifstream in(run_dir + "/events.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto e = nlohmann::json::parse(line);
    events.push_back(e.value("event", "") + " " + e.value("actor", ""));
  }
  return events;
}

std::string WithLengthReward(const std::string& config, const std::string& path) {
  std::string text = ReadFile(config);
  const std::string exact = "kind: exact_answer\n      params:\n        extract: full\n";
  const size_t at = text.find(exact);
  EXPECT_NE(at, std::string::npos) << config << "'s reward section changed";
  if (at != std::string::npos) {
    text.replace(at, exact.size(),
                 "kind: length_penalty\n      params:\n        max_length: 4\n        buffer: 3\n");
  }
  std::ofstream(path) << text;
  return path;
}

}  // namespace rlforge::testing
