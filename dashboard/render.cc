#include "dashboard/render.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dashboard/progress.h"

namespace rlforge::dashboard {

namespace {

int64_t LatestStep(const Snapshot& s) {
  return s.iterations.empty() ? 0 : s.iterations.back()->value("step", int64_t{0});
}

double ElapsedSeconds(const Snapshot& s) {
  return static_cast<double>(s.now_us - s.start_us) * 1e-6;
}

// Seconds since the actor was last heard from; null when never.
nlohmann::json HeartbeatAge(const Snapshot& s, const ActorRow& a) {
  if (a.last_heard_us == 0) return nullptr;
  return static_cast<double>(s.now_us - a.last_heard_us) * 1e-6;
}

std::string Escape(const std::string& label) {
  std::string out;
  for (char c : label) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return absl::StrFormat("%.17g", v);
}

class PromWriter {
 public:
  void Family(const std::string& name, const std::string& type, const std::string& help) {
    absl::StrAppend(&out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
  void Sample(const std::string& name, const std::string& labels, double v) {
    absl::StrAppend(&out_, name, labels.empty() ? "" : absl::StrCat("{", labels, "}"), " ",
                    Number(v), "\n");
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

std::string ActorLabels(const ActorRow& a) {
  return absl::StrCat("role=\"", Escape(a.role), "\",rank=\"", a.rank, "\"");
}

}  // namespace

std::string PrometheusName(const std::string& key) {
  std::string out;
  for (char c : key) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    out += ok ? c : '_';
  }
  return out;
}

nlohmann::json StatusJson(const Snapshot& s) {
  nlohmann::json j;
  j["run"] = s.info.name;
  j["algorithm"] = s.info.algorithm;
  j["job_id"] = s.info.job_id;
  j["run_dir"] = s.info.run_dir;
  j["state"] = s.state;
  j["message"] = s.message;
  int64_t step = LatestStep(s);
  j["step"] = step;
  j["total"] = s.info.total_iterations;
  double elapsed = ElapsedSeconds(s);
  j["elapsed_s"] = elapsed;
  nlohmann::json eta = nullptr;
  if (!s.iterations.empty() && step > s.info.resumed_from && s.info.total_iterations >= step) {
    // This attempt's pace: its elapsed_s counts from its start, after resumed_from.
    double run_s =
        s.iterations.back()->value("timings", nlohmann::json::object()).value("elapsed_s", 0.0);
    eta = EtaSeconds(step, s.info.resumed_from, s.info.total_iterations, run_s);
  }
  j["eta_s"] = eta;
  nlohmann::json latest = nlohmann::json::object();
  if (!s.iterations.empty()) {
    latest["metrics"] = s.iterations.back()->value("metrics", nlohmann::json::object());
    latest["timings"] = s.iterations.back()->value("timings", nlohmann::json::object());
  }
  j["latest"] = latest;
  nlohmann::json actors = {{"total", s.actors.size()}};
  for (const ActorRow& a : s.actors) actors[a.state] = actors.value(a.state, 0) + 1;
  j["actors"] = actors;
  uint64_t dropped = 0;
  for (const auto& [reason, n] : s.drops) dropped += n;
  j["dropped_messages"] = dropped;
  return j;
}

nlohmann::json MetricsJson(const Snapshot& s) {
  nlohmann::json records = nlohmann::json::array();
  for (const auto& r : s.iterations) records.push_back(*r);
  return {{"records", records}, {"dropped", s.iterations_dropped}};
}

nlohmann::json ActorsJson(const Snapshot& s) {
  nlohmann::json out = nlohmann::json::array();
  for (const ActorRow& a : s.actors) {
    out.push_back({{"id", a.id},
                   {"role", a.role},
                   {"rank", a.rank},
                   {"host", a.host},
                   {"pid", a.pid},
                   {"state", a.state},
                   {"heartbeat_age_s", HeartbeatAge(s, a)},
                   {"restarts", a.restarts},
                   {"current_work", a.current_work_id},
                   {"policy_version", a.policy_version},
                   {"works_done", a.works_done},
                   {"external", a.external},
                   {"joined", a.joined},
                   {"metrics", a.metrics}});
  }
  return out;
}

nlohmann::json SamplesJson(const Snapshot& s) {
  nlohmann::json out = nlohmann::json::array();
  for (const SampleRow& r : s.samples) {
    out.push_back(
        {{"step", r.step}, {"prompt", r.prompt}, {"response", r.response}, {"reward", r.reward}});
  }
  return {{"samples", out}};
}

nlohmann::json ConfigJson(const Snapshot& s) { return {{"yaml", s.info.config_yaml}}; }

std::string PrometheusText(const Snapshot& s) {
  PromWriter w;
  w.Family("rlforge_up", "gauge",
           "1 while the run is starting, running or waiting for workers, 0 once it ended.");
  w.Sample("rlforge_up", "",
           s.state == "running" || s.state == "starting" || s.state == "waiting" ? 1 : 0);
  w.Family("rlforge_iteration", "gauge", "Latest finished iteration.");
  w.Sample("rlforge_iteration", "", static_cast<double>(LatestStep(s)));
  w.Family("rlforge_iterations_total", "gauge", "Iterations the run will do.");
  w.Sample("rlforge_iterations_total", "", static_cast<double>(s.info.total_iterations));
  w.Family("rlforge_uptime_seconds", "gauge", "Seconds since the controller started.");
  w.Sample("rlforge_uptime_seconds", "", ElapsedSeconds(s));
  if (!s.iterations.empty()) {
    const nlohmann::json& last = *s.iterations.back();
    for (const char* part : {"metrics", "timings"}) {
      if (!last.contains(part)) continue;
      for (const auto& [k, v] : last[part].items()) {
        if (!v.is_number()) continue;
        std::string name =
            absl::StrCat(part == std::string("metrics") ? "rlforge_metric_" : "rlforge_timing_",
                         PrometheusName(k));
        w.Family(name, "gauge", absl::StrCat("Latest iteration's ", part, ".", k, "."));
        w.Sample(name, "", v.get<double>());
      }
    }
  }
  w.Family("rlforge_actor_up", "gauge", "1 if the actor is registered and alive.");
  for (const ActorRow& a : s.actors) {
    w.Sample("rlforge_actor_up", ActorLabels(a), a.state == "ready" || a.state == "busy" ? 1 : 0);
  }
  w.Family("rlforge_actor_busy", "gauge", "1 while the actor has work in flight.");
  for (const ActorRow& a : s.actors) {
    w.Sample("rlforge_actor_busy", ActorLabels(a), a.state == "busy" ? 1 : 0);
  }
  w.Family("rlforge_actor_heartbeat_age_seconds", "gauge",
           "Seconds since the actor was last heard from.");
  for (const ActorRow& a : s.actors) {
    if (a.last_heard_us == 0) continue;
    w.Sample("rlforge_actor_heartbeat_age_seconds", ActorLabels(a),
             static_cast<double>(s.now_us - a.last_heard_us) * 1e-6);
  }
  w.Family("rlforge_actor_policy_version", "gauge", "Policy version the actor serves.");
  for (const ActorRow& a : s.actors) {
    w.Sample("rlforge_actor_policy_version", ActorLabels(a), static_cast<double>(a.policy_version));
  }
  w.Family("rlforge_actor_works_done_total", "counter", "Units of work the actor finished.");
  for (const ActorRow& a : s.actors) {
    w.Sample("rlforge_actor_works_done_total", ActorLabels(a), static_cast<double>(a.works_done));
  }
  w.Family("rlforge_actor_restarts_total", "counter", "Times the actor was restarted.");
  for (const ActorRow& a : s.actors) {
    w.Sample("rlforge_actor_restarts_total", ActorLabels(a), a.restarts);
  }
  w.Family("rlforge_actor_metric", "gauge", "Latest value an actor reported, by name.");
  for (const ActorRow& a : s.actors) {
    for (const auto& [name, v] : a.metrics) {
      w.Sample("rlforge_actor_metric", absl::StrCat(ActorLabels(a), ",name=\"", Escape(name), "\""),
               v);
    }
  }
  w.Family("rlforge_dropped_messages_total", "counter",
           "Messages the controller refused, by reason.");
  for (const auto& [reason, n] : s.drops) {
    w.Sample("rlforge_dropped_messages_total", absl::StrCat("reason=\"", Escape(reason), "\""),
             static_cast<double>(n));
  }
  return w.Take();
}

}  // namespace rlforge::dashboard
