#include "launch/k8s_manifests.h"

#include <map>
#include <set>

#include "gtest/gtest.h"
#include "yaml-cpp/yaml.h"

namespace rlforge {
namespace {

K8sOptions Opts(const std::string& image, const std::string& ns = "default") {
  K8sOptions o;
  o.image = image;
  o.namespace_ = ns;
  return o;
}

K8sJob TwoRankJob() {
  K8sJob j;
  j.name = "GRPO_arith.v2";
  j.job_yaml = "job:\n  name: grpo_arith\n";
  j.controller_port = 29500;
  j.store_port = 29501;
  j.dashboard_port = 8265;
  j.roles = {{"trainer", 2, 1}, {"rollout", 3, 1}, {"reward", 2, 0}};
  j.controller_key = "public: a\nsecret: b\n";
  j.actor_key = "server_public: a\npublic: c\nsecret: d\n";
  j.dashboard_token = "0123";
  return j;
}

std::map<std::string, YAML::Node> ByKindAndName(const std::string& text) {
  std::map<std::string, YAML::Node> out;
  for (const YAML::Node& d : YAML::LoadAll(text)) {
    std::string key = d["kind"].as<std::string>() + "/" + d["metadata"]["name"].as<std::string>();
    EXPECT_EQ(out.count(key), 0u) << "two documents named " << key;
    out[key] = d;
  }
  return out;
}

// Every label the selector asks for is on the pods.
bool Selects(const YAML::Node& selector, const YAML::Node& labels) {
  if (!selector || selector.size() == 0) return false;
  for (const auto& kv : selector) {
    const YAML::Node v = labels[kv.first.as<std::string>()];
    if (!v || v.as<std::string>() != kv.second.as<std::string>()) return false;
  }
  return true;
}

TEST(K8sName, MakesDnsLabels) {
  EXPECT_EQ(*K8sName("GRPO_arith.v2"), "grpo-arith-v2");
  EXPECT_EQ(*K8sName("--a--"), "a");
  EXPECT_EQ(K8sName(std::string(80, 'x'))->size(), 40u);
  EXPECT_FALSE(K8sName("___").ok());
}

TEST(K8sManifests, ObjectsAndNames) {
  auto text = K8sManifests(TwoRankJob(), Opts("registry.local/rlforge:1"));
  ASSERT_TRUE(text.ok()) << text.status();
  auto docs = ByKindAndName(*text);
  std::set<std::string> names;
  for (const auto& [k, _] : docs) names.insert(k);
  EXPECT_EQ(names, (std::set<std::string>{
                       "ConfigMap/grpo-arith-v2-job", "Secret/grpo-arith-v2-keys",
                       "Service/grpo-arith-v2-controller", "Job/grpo-arith-v2-controller",
                       "Service/grpo-arith-v2-trainer", "Job/grpo-arith-v2-trainer",
                       "Deployment/grpo-arith-v2-rollout", "Deployment/grpo-arith-v2-reward"}));
  for (const auto& [k, d] : docs)
    EXPECT_EQ(d["metadata"]["namespace"].as<std::string>(), "default");
  EXPECT_EQ(docs["ConfigMap/grpo-arith-v2-job"]["data"]["job.yaml"].as<std::string>(),
            TwoRankJob().job_yaml);
  const YAML::Node secret = docs["Secret/grpo-arith-v2-keys"]["stringData"];
  EXPECT_EQ(secret["actor.key"].as<std::string>(), TwoRankJob().actor_key);
  EXPECT_EQ(secret["dashboard-token"].as<std::string>(), "0123");  // stays a string
}

TEST(K8sManifests, SelectorsAndPorts) {
  auto docs = ByKindAndName(*K8sManifests(TwoRankJob(), Opts("img")));
  const YAML::Node svc = docs["Service/grpo-arith-v2-controller"];
  const YAML::Node ctl = docs["Job/grpo-arith-v2-controller"]["spec"]["template"];
  EXPECT_TRUE(Selects(svc["spec"]["selector"], ctl["metadata"]["labels"]));
  std::map<std::string, int> svc_ports, pod_ports;
  for (const YAML::Node& p : svc["spec"]["ports"]) {
    svc_ports[p["targetPort"].as<std::string>()] = p["port"].as<int>();
  }
  for (const YAML::Node& p : ctl["spec"]["containers"][0]["ports"]) {
    pod_ports[p["name"].as<std::string>()] = p["containerPort"].as<int>();
  }
  EXPECT_EQ(svc_ports, pod_ports);
  EXPECT_EQ(pod_ports, (std::map<std::string, int>{
                           {"control", 29500}, {"store", 29501}, {"dashboard", 8265}}));
  for (const char* role : {"rollout", "reward"}) {
    const YAML::Node dep = docs[std::string("Deployment/grpo-arith-v2-") + role]["spec"];
    EXPECT_TRUE(Selects(dep["selector"]["matchLabels"], dep["template"]["metadata"]["labels"]));
  }
  const YAML::Node tsvc = docs["Service/grpo-arith-v2-trainer"]["spec"];
  const YAML::Node tjob = docs["Job/grpo-arith-v2-trainer"]["spec"];
  EXPECT_EQ(tsvc["clusterIP"].as<std::string>(), "None");
  EXPECT_TRUE(Selects(tsvc["selector"], tjob["template"]["metadata"]["labels"]));
  EXPECT_EQ(tjob["template"]["spec"]["subdomain"].as<std::string>(), "grpo-arith-v2-trainer");
  // Services select only their own component.
  EXPECT_FALSE(Selects(svc["spec"]["selector"], tjob["template"]["metadata"]["labels"]));
}

TEST(K8sManifests, ActorsJoinByAddressWithTheirKey) {
  auto docs = ByKindAndName(*K8sManifests(TwoRankJob(), Opts("img", "rl")));
  const YAML::Node tjob = docs["Job/grpo-arith-v2-trainer"]["spec"];
  EXPECT_EQ(tjob["completionMode"].as<std::string>(), "Indexed");
  EXPECT_EQ(tjob["completions"].as<int>(), 2);
  EXPECT_EQ(tjob["parallelism"].as<int>(), 2);
  const YAML::Node tc = tjob["template"]["spec"]["containers"][0];
  std::vector<std::string> cmd = tc["command"].as<std::vector<std::string>>();
  EXPECT_EQ(cmd,
            (std::vector<std::string>{"rlforge", "actor", "--role", "trainer", "--rank", "$(RANK)",
                                      "--connect", "tcp://grpo-arith-v2-controller.rl.svc:29500"}));
  std::map<std::string, YAML::Node> env;
  for (const YAML::Node& e : tc["env"]) env[e["name"].as<std::string>()] = e;
  EXPECT_EQ(env["RANK"]["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>(),
            "metadata.annotations['batch.kubernetes.io/job-completion-index']");
  EXPECT_EQ(env["RLFORGE_KEYS"]["value"].as<std::string>(), "/etc/rlforge/keys/actor.key");
  EXPECT_EQ(tc["resources"]["limits"]["nvidia.com/gpu"].as<int>(), 1);
  // Actors see actor.key only, never the controller's secret key.
  const YAML::Node vol = tjob["template"]["spec"]["volumes"][0]["secret"];
  ASSERT_EQ(vol["items"].size(), 1u);
  EXPECT_EQ(vol["items"][0]["key"].as<std::string>(), "actor.key");
  EXPECT_EQ(vol["defaultMode"].as<int>(), 0400);
  const YAML::Node rollout = docs["Deployment/grpo-arith-v2-rollout"]["spec"];
  EXPECT_EQ(rollout["replicas"].as<int>(), 3);
  const YAML::Node rc = rollout["template"]["spec"]["containers"][0];
  cmd = rc["command"].as<std::vector<std::string>>();
  EXPECT_EQ(cmd, (std::vector<std::string>{"rlforge", "actor", "--role", "rollout", "--connect",
                                           "tcp://grpo-arith-v2-controller.rl.svc:29500"}));
  const YAML::Node reward = docs["Deployment/grpo-arith-v2-reward"]["spec"]["template"];
  EXPECT_FALSE(reward["spec"]["containers"][0]["resources"]);  // gpus 0: no request
}

TEST(K8sManifests, RefusesWhatCannotWork) {
  K8sJob j = TwoRankJob();
  EXPECT_FALSE(K8sManifests(j, {}).ok());  // no image
  EXPECT_FALSE(K8sManifests(j, Opts("img", "Bad_NS")).ok());
  j.controller_port = 0;
  EXPECT_FALSE(K8sManifests(j, Opts("img")).ok());
}

}  // namespace
}  // namespace rlforge
