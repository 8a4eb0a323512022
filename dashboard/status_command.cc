#include "dashboard/status_command.h"

#include <sys/stat.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/net_address.h"
#include "common/process_identity.h"
#include "dashboard/progress.h"
#include "dashboard/server.h"

namespace rlforge::dashboard {

namespace {

namespace fs = std::filesystem;

std::string Num(const nlohmann::json& v) {
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) return absl::StrFormat("%.4g", v.get<double>());
  if (v.is_null()) return "-";
  return v.is_string() ? v.get<std::string>() : v.dump();
}

std::string KeyValues(const nlohmann::json& obj) {
  std::string out;
  for (const auto& [k, v] : obj.items())
    absl::StrAppend(&out, out.empty() ? "" : "  ", k, "=", Num(v));
  return out;
}

absl::StatusOr<nlohmann::json> GetJson(const std::string& base, const std::string& path,
                                       const std::string& token) {
  auto reply = HttpGet(base, path, token);
  if (!reply.ok()) return reply.status();
  if (reply->status == 401) {
    return absl::PermissionDeniedError(
        absl::StrCat(base, " needs a token: pass --token or set RLFORGE_DASHBOARD_TOKEN"));
  }
  if (reply->status != 200) {
    return absl::UnavailableError(absl::StrCat("GET ", base, path, ": HTTP ", reply->status));
  }
  nlohmann::json j = nlohmann::json::parse(reply->body, nullptr, false);
  if (j.is_discarded()) return absl::DataLossError(absl::StrCat(base, path, ": not JSON"));
  return j;
}

absl::StatusOr<std::string> FromUrl(const std::string& url, const std::string& token) {
  auto status = GetJson(url, "/api/status", token);
  if (!status.ok()) return status.status();
  auto actors = GetJson(url, "/api/actors", token);
  if (!actors.ok()) return actors.status();
  return FormatStatus(*status, *actors);
}

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// When the run last wrote status.json or metrics.jsonl, in UTC ("" when neither is there).
std::string LastWritten(const fs::path& dir) {
  time_t newest = 0;
  for (const char* name : {"status.json", "metrics.jsonl"}) {
    struct stat st {};
    if (::stat((dir / name).c_str(), &st) == 0 && st.st_mtime > newest) newest = st.st_mtime;
  }
  if (newest == 0) return "";
  struct tm utc {};
  gmtime_r(&newest, &utc);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &utc);
  return buf;
}

// The state of a run whose files say it is going (starting, running, waiting): dead when
// its controller is gone, "unknown" when that cannot be told here (another host).
std::string CheckedState(const std::string& state, const LivenessCheck& live, const fs::path& dir) {
  switch (live.liveness) {
    case Liveness::kAlive:
      return state;
    case Liveness::kGone: {
      const std::string when = LastWritten(dir);
      return absl::StrCat("dead (", live.why, when.empty() ? "" : "; last written ", when,
                          "; status.json still says ", state, ")");
    }
    case Liveness::kUnknown:
      break;
  }
  return absl::StrCat("unknown (", live.why, "; status.json says ", state, ")");
}

// The controller status.json names.
ProcessIdentity ControllerOf(const nlohmann::json& file) {
  ProcessIdentity p;
  auto int_of = [&](const char* key) {
    return file.contains(key) && file[key].is_number_integer() ? file[key].get<int64_t>() : 0;
  };
  p.pid = int_of("pid");
  p.start_ticks = int_of("pid_start_ticks");
  if (file.contains("host") && file["host"].is_string()) p.host = file["host"].get<std::string>();
  if (file.contains("boot_id") && file["boot_id"].is_string())
    p.boot_id = file["boot_id"].get<std::string>();
  return p;
}

bool Going(const std::string& state) {
  return state == "running" || state == "starting" || state == "waiting";
}

// The run as its files tell it, when no dashboard answers; `live`: its controller's liveness
// (for a run the files say is going).
absl::StatusOr<std::string> FromRunDir(const fs::path& dir, const LivenessCheck& live) {
  nlohmann::json file = nlohmann::json::parse(ReadAll(dir / "status.json"), nullptr, false);
  if (!file.is_object()) file = nlohmann::json::object();
  std::string state = file.value("state", "unknown");
  const bool going = Going(state);
  if (going) state = CheckedState(state, live, dir);
  nlohmann::json status = {{"run", dir.filename().string()},
                           {"run_dir", dir.string()},
                           {"state", state},
                           {"message", file.value("message", "")},
                           {"algorithm", file.value("algorithm", "")},
                           {"total", file.value("total", 0)}};
  // The last whole record: a line a crash cut short (until the log is next opened) is not.
  std::ifstream metrics(dir / "metrics.jsonl");
  std::string line;
  nlohmann::json rec;
  while (std::getline(metrics, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object()) rec = std::move(j);
  }
  if (rec.is_object()) {
    status["step"] = rec.value("step", 0);
    status["latest"] = {{"metrics", rec.value("metrics", nlohmann::json::object())},
                        {"timings", rec.value("timings", nlohmann::json::object())}};
    if (rec.contains("timings")) status["elapsed_s"] = rec["timings"].value("elapsed_s", 0.0);
    // A live run's pace, this attempt's (elapsed_s counts from its start).
    const int64_t step = status["step"].get<int64_t>(), total = status["total"].get<int64_t>();
    const int64_t resumed_from = file.value("resumed_from", int64_t{0});
    if (going && live.liveness == Liveness::kAlive && status.contains("elapsed_s") &&
        step > resumed_from && total >= step) {
      status["eta_s"] = EtaSeconds(step, resumed_from, total, status["elapsed_s"].get<double>());
    }
  }
  return FormatStatus(status, nlohmann::json::array());
}

}  // namespace

std::string FormatStatus(const nlohmann::json& s, const nlohmann::json& actors) {
  std::string out;
  absl::StrAppend(&out, "run        ", s.value("run", ""), "  (", s.value("run_dir", ""), ")\n");
  absl::StrAppend(&out, "algorithm  ", s.value("algorithm", ""), "\n");
  int64_t step = s.value("step", int64_t{0}), total = s.value("total", int64_t{0});
  // 0: the loop has not said yet how many iterations it runs.
  std::string progress = absl::StrCat(step, "/", total > 0 ? absl::StrCat(total) : "?");
  if (s.contains("elapsed_s") && s["elapsed_s"].is_number()) {
    absl::StrAppend(&progress, "  elapsed ", FormatDuration(s["elapsed_s"].get<double>()));
  }
  if (s.contains("eta_s") && s["eta_s"].is_number()) {
    absl::StrAppend(&progress, "  eta ", FormatDuration(s["eta_s"].get<double>()));
  }
  absl::StrAppend(&out, "state      ", s.value("state", "unknown"), "  iteration ", progress, "\n");
  if (!s.value("message", "").empty())
    absl::StrAppend(&out, "message    ", s["message"].get<std::string>(), "\n");
  if (s.contains("latest")) {
    const nlohmann::json& l = s["latest"];
    if (l.contains("metrics")) absl::StrAppend(&out, "metrics    ", KeyValues(l["metrics"]), "\n");
    if (l.contains("timings")) absl::StrAppend(&out, "timings    ", KeyValues(l["timings"]), "\n");
  }
  if (!actors.is_array() || actors.empty()) {
    absl::StrAppend(&out,
                    "actors     (no live dashboard: the actor table is shown while the run "
                    "goes)\n");
    return out;
  }
  absl::StrAppend(&out, "actors     ", actors.size(), "\n");
  absl::StrAppendFormat(&out, "  %-14s %-9s %4s %-16s %8s %-8s %9s %8s %8s %8s\n", "ID", "ROLE",
                        "RANK", "HOST", "PID", "STATE", "HEARTBEAT", "RESTARTS", "WORK", "VERSION");
  for (const auto& a : actors) {
    std::string age = a["heartbeat_age_s"].is_number()
                          ? absl::StrFormat("%.1fs", a["heartbeat_age_s"].get<double>())
                          : "-";
    absl::StrAppendFormat(&out, "  %-14s %-9s %4d %-16s %8d %-8s %9s %8d %8s %8s\n",
                          a.value("id", ""), a.value("role", ""), a.value("rank", 0),
                          a.value("host", ""), a.value("pid", 0), a.value("state", ""), age,
                          a.value("restarts", 0), Num(a.value("current_work", nlohmann::json(0))),
                          Num(a.value("policy_version", nlohmann::json(-1))));
  }
  return out;
}

absl::StatusOr<std::string> StatusText(const std::string& target, const std::string& token) {
  if (absl::StartsWith(target, "http://") || absl::StartsWith(target, "https://")) {
    return FromUrl(target, token);
  }
  fs::path dir(target);
  if (!fs::exists(dir / "status.json")) {
    return absl::NotFoundError(absl::StrCat(
        target, " is neither a run directory (no status.json) nor an http:// dashboard URL"));
  }
  nlohmann::json file = nlohmann::json::parse(ReadAll(dir / "status.json"), nullptr, false);
  if (!file.is_object()) file = nlohmann::json::object();
  const std::string url = file.value("dashboard_url", "");
  const std::string state = file.value("state", "");
  // A run the files say is going may have lost its controller (SIGKILL, a crash, the node):
  // its pid, start time and boot tell.
  const LivenessCheck live = Going(state) ? CheckProcess(ControllerOf(file), LocalHostName())
                                          : LivenessCheck{Liveness::kUnknown, ""};
  std::string note;
  if (!url.empty() && Going(state) && live.liveness != Liveness::kGone) {
    auto from_url = FromUrl(url, token);
    if (from_url.ok()) return from_url;
    note = absl::StrCat("note       live dashboard not read: ", from_url.status().message(), "\n");
  }
  auto text = FromRunDir(dir, live);
  if (!text.ok()) return text;
  return *text + note;
}

}  // namespace rlforge::dashboard
