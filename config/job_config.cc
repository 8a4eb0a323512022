#include "config/job_config.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "config/control_config.h"
#include "config/dashboard_config.h"
#include "config/engine_config.h"
#include "config/grpo_config.h"
#include "config/launch_config.h"
#include "config/lm_config.h"
#include "config/lm_weights_config.h"
#include "config/policy_loss_registry.h"
#include "config/reward_config.h"
#include "config/run_config.h"
#include "config/trainer_config.h"
#include "config/worker_config.h"

namespace rlforge {

namespace {

using config::Schema;
using config::SchemaBuilder;

// Whether the job's algorithm leaves `section` unread: another algorithm's section.
bool Unread(const JobConfig& c, const std::string& section) {
  return c.job.algorithm != nullptr && IsAlgorithmSection(section) &&
         !c.job.algorithm->Reads(section);
}

// A section that some algorithm reads, written for one that does not, would do nothing: an
// error however little it says (`env: {id: CartPole-v1}` in a grpo job holds only a default).
// The resolved config leaves such sections out (ResolvedYaml), so it loads again.
void CheckAlgorithmSections(const JobConfig& c, config::CheckContext& ctx) {
  for (const config::Field& f : JobSchema().fields) {
    if (f.kind != config::Field::Kind::kSection || !Unread(c, f.name) || !ctx.Written(f.name)) {
      continue;
    }
    ctx.Error(f.name, absl::StrCat("job.algorithm ", c.job.algorithm->name,
                                   " does not read this section (it reads: ",
                                   absl::StrJoin(c.job.algorithm->sections, ", "), "); remove it"));
  }
}

std::shared_ptr<const Schema> BuildJobSchema() {
  SchemaBuilder<JobConfig> b("An rlforge job.");
  b.Section("job", &JobConfig::job, JobSection());
  b.Section("controller", &JobConfig::controller, ControllerSection());
  b.Section("launch", &JobConfig::launch, LaunchSection());
  b.Section("checkpoint", &JobConfig::checkpoint, CheckpointSection());
  b.Section("trainer", &JobConfig::trainer, TrainerSection());
  b.Section("echo", &JobConfig::echo, EchoSection());
  AddControlSections(b);
  AddEngineSection(b);
  AddGrpoSection(b);
  AddRewardSections(b);
  AddDashboardSection(b);
  AddLmSections(b);
  b.Check([](const JobConfig& c, config::CheckContext& ctx) {
    CheckAlgorithmSections(c, ctx);
    CheckLaunch(c, ctx);
    CheckWorkerFleets(c, ctx);
    CheckTrainerPlacement(c, ctx);
    CheckLmWeights(c, ctx);
    CheckLmEngineCount(c, ctx);
    CheckRunKeys(c, ctx);
  });
  return b.Build();
}

// Defaults that depend on the algorithm or the launch backend, filled in once they are known, so
// the resolved config states them.
void ApplyDerivedDefaults(JobConfig& c) {
  ApplyLaunchDefaults(c);
  if (c.job.algorithm == nullptr || !c.job.algorithm->default_policy_loss.has_value()) return;
  // The kLmRl algorithms: the policy loss, then its aggregation.
  if (!c.grpo.policy_loss.has_value()) c.grpo.policy_loss = c.job.algorithm->default_policy_loss;
  if (!c.grpo.loss_aggregation.has_value()) {
    c.grpo.loss_aggregation =
        PolicyLossOf(*c.grpo.policy_loss)
            .default_loss_aggregation.value_or(c.job.algorithm->default_loss_aggregation);
  }
}

}  // namespace

const config::Schema& JobSchema() {
  static const std::shared_ptr<const Schema> schema = BuildJobSchema();
  return *schema;
}

LoadedJob LoadJobFile(const std::string& path, const std::vector<std::string>& overrides,
                      const std::vector<JobCheck>& checks) {
  LoadedJob out;
  std::vector<std::function<void(const void*, config::CheckContext&)>> untyped;
  for (const JobCheck& check : checks) {
    untyped.push_back([check](const void* obj, config::CheckContext& ctx) {
      check(*static_cast<const JobConfig*>(obj), ctx);
    });
  }
  out.errors = config::LoadFileInto(JobSchema(), &out.config, path, overrides, std::move(untyped),
                                    &out.warnings);
  ApplyDerivedDefaults(out.config);
  if (out.config.job.name.empty()) {
    out.config.job.name = std::filesystem::path(path).stem().string();
  }
  return out;
}

LoadedJob LoadJobText(const std::string& yaml_text, const std::string& origin) {
  LoadedJob out;
  out.errors = config::LoadInto(JobSchema(), &out.config,
                                config::LoadInput{yaml_text, origin, {}, {}, &out.warnings});
  ApplyDerivedDefaults(out.config);
  return out;
}

std::string ResolvedYaml(const JobConfig& config) {
  YAML::Node tree = config::Dump(JobSchema(), &config);
  for (const config::Field& f : JobSchema().fields) {
    if (f.kind == config::Field::Kind::kSection && Unread(config, f.name)) tree.remove(f.name);
  }
  YAML::Emitter e;
  e << tree;
  return std::string(e.c_str()) + "\n";
}

std::string ConfigReferenceMarkdown() {
  static const JobConfig defaults;
  return config::MarkdownReference(JobSchema(), &defaults);
}

}  // namespace rlforge
