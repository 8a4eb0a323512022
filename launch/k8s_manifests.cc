#include "launch/k8s_manifests.h"

#include <cctype>

#include "absl/strings/str_cat.h"
#include "common/role_names.h"
#include "yaml-cpp/yaml.h"

namespace rlforge {

namespace {

// yaml-cpp writes a node; multi-line strings (the job file, the keys) as literal blocks so the
// manifests stay readable.
void Emit(YAML::Emitter& out, const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      out << YAML::BeginMap;
      for (const auto& kv : node) {
        out << YAML::Key << kv.first.as<std::string>() << YAML::Value;
        Emit(out, kv.second);
      }
      out << YAML::EndMap;
      break;
    case YAML::NodeType::Sequence:
      out << YAML::BeginSeq;
      for (const auto& item : node) Emit(out, item);
      out << YAML::EndSeq;
      break;
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      if (s.find('\n') != std::string::npos) {
        out << YAML::Literal << s;
      } else if (node.Tag() == "!") {  // set by Str(): always quoted, even "0400" or "true"
        out << YAML::DoubleQuoted << s;
      } else {
        out << s;
      }
      break;
    }
    default:
      out << YAML::Null;
  }
}

// A string scalar that must stay a string (an env value such as "1", a command argument).
YAML::Node Str(const std::string& s) {
  YAML::Node n(s);
  n.SetTag("!");
  return n;
}

YAML::Node Labels(const std::string& name, const std::string& component) {
  YAML::Node l;
  l["app.kubernetes.io/name"] = "rlforge";
  l["app.kubernetes.io/instance"] = name;
  l["app.kubernetes.io/component"] = component;
  return l;
}

YAML::Node Metadata(const std::string& name, const std::string& ns, const YAML::Node& labels) {
  YAML::Node m;
  m["name"] = name;
  m["namespace"] = ns;
  m["labels"] = labels;
  return m;
}

YAML::Node Env(const std::string& name, const std::string& value) {
  YAML::Node e;
  e["name"] = name;
  e["value"] = Str(value);
  return e;
}

YAML::Node Mount(const std::string& volume, const std::string& path, bool read_only) {
  YAML::Node m;
  m["name"] = volume;
  m["mountPath"] = path;
  if (read_only) m["readOnly"] = true;
  return m;
}

YAML::Node Port(const std::string& name, int64_t port) {
  YAML::Node p;
  p["name"] = name;
  p["containerPort"] = port;
  p["protocol"] = "TCP";
  return p;
}

// The Secret's `keys` volume: the controller sees every file, an actor only actor.key.
YAML::Node KeysVolume(const std::string& secret, bool actor_only) {
  YAML::Node v;
  v["name"] = "keys";
  v["secret"]["secretName"] = secret;
  v["secret"]["defaultMode"] = 0400;  // the key loader refuses group/world-readable files
  if (actor_only) {
    YAML::Node item;
    item["key"] = "actor.key";
    item["path"] = "actor.key";
    v["secret"]["items"].push_back(item);
  }
  return v;
}

struct Names {
  std::string job, ns, controller, trainer, secret, config_map, connect;
};

YAML::Node ConfigMap(const K8sJob& job, const Names& n) {
  YAML::Node d;
  d["apiVersion"] = "v1";
  d["kind"] = "ConfigMap";
  d["metadata"] = Metadata(n.config_map, n.ns, Labels(n.job, "config"));
  d["data"]["job.yaml"] = job.job_yaml;
  return d;
}

YAML::Node Secret(const K8sJob& job, const Names& n) {
  YAML::Node d;
  d["apiVersion"] = "v1";
  d["kind"] = "Secret";
  d["metadata"] = Metadata(n.secret, n.ns, Labels(n.job, "keys"));
  d["type"] = "Opaque";
  d["stringData"]["controller.key"] = job.controller_key;
  d["stringData"]["actor.key"] = job.actor_key;
  if (!job.dashboard_token.empty()) d["stringData"]["dashboard-token"] = Str(job.dashboard_token);
  return d;
}

YAML::Node ControllerContainer(const K8sJob& job, const K8sOptions& o, const Names& n) {
  YAML::Node c;
  c["name"] = "controller";
  c["image"] = o.image;
  c["command"].push_back(Str(o.rlforge));
  c["command"].push_back("run");
  c["command"].push_back(Str(absl::StrCat(kK8sJobDir, "/job.yaml")));
  c["ports"].push_back(Port("control", job.controller_port));
  if (job.store_port > 0) c["ports"].push_back(Port("store", job.store_port));
  if (job.dashboard_port > 0) {
    c["ports"].push_back(Port("dashboard", job.dashboard_port));
    YAML::Node token;
    token["name"] = "RLFORGE_DASHBOARD_TOKEN";
    token["valueFrom"]["secretKeyRef"]["name"] = n.secret;
    token["valueFrom"]["secretKeyRef"]["key"] = "dashboard-token";
    c["env"].push_back(token);
  }
  c["volumeMounts"].push_back(Mount("job", kK8sJobDir, true));
  c["volumeMounts"].push_back(Mount("keys", kK8sKeyDir, true));
  c["volumeMounts"].push_back(Mount("runs", kK8sRunRoot, false));
  return c;
}

YAML::Node ControllerJob(const K8sJob& job, const K8sOptions& o, const Names& n) {
  YAML::Node d;
  d["apiVersion"] = "batch/v1";
  d["kind"] = "Job";
  d["metadata"] = Metadata(n.controller, n.ns, Labels(n.job, "controller"));
  d["spec"]["backoffLimit"] = 0;         // a failed run is looked at, not retried blind
  YAML::Node t = d["spec"]["template"];  // a handle: writes go into d
  t["metadata"]["labels"] = Labels(n.job, "controller");
  t["spec"]["restartPolicy"] = "Never";
  t["spec"]["containers"].push_back(ControllerContainer(job, o, n));
  YAML::Node cm;
  cm["name"] = "job";
  cm["configMap"]["name"] = n.config_map;
  t["spec"]["volumes"].push_back(cm);
  t["spec"]["volumes"].push_back(KeysVolume(n.secret, false));
  YAML::Node runs;
  runs["name"] = "runs";
  if (o.run_claim.empty()) {
    runs["emptyDir"] = YAML::Node(YAML::NodeType::Map);
  } else {
    runs["persistentVolumeClaim"]["claimName"] = o.run_claim;
  }
  t["spec"]["volumes"].push_back(runs);
  return d;
}

YAML::Node ControllerService(const K8sJob& job, const Names& n) {
  YAML::Node d;
  d["apiVersion"] = "v1";
  d["kind"] = "Service";
  d["metadata"] = Metadata(n.controller, n.ns, Labels(n.job, "controller"));
  d["spec"]["selector"] = Labels(n.job, "controller");
  auto port = [&](const std::string& name, int64_t p) {
    YAML::Node s;
    s["name"] = name;
    s["port"] = p;
    s["targetPort"] = name;
    s["protocol"] = "TCP";
    d["spec"]["ports"].push_back(s);
  };
  port("control", job.controller_port);
  if (job.store_port > 0) port("store", job.store_port);
  if (job.dashboard_port > 0) port("dashboard", job.dashboard_port);
  return d;
}

YAML::Node TrainerService(const Names& n) {
  YAML::Node d;
  d["apiVersion"] = "v1";
  d["kind"] = "Service";
  d["metadata"] = Metadata(n.trainer, n.ns, Labels(n.job, kTrainerRole));
  d["spec"]["clusterIP"] = "None";
  d["spec"]["publishNotReadyAddresses"] = true;  // ranks resolve each other while starting
  d["spec"]["selector"] = Labels(n.job, kTrainerRole);
  return d;
}

// One actor's container: `rlforge actor --role R [--rank $(RANK)] --connect ADDR`.
YAML::Node ActorContainer(const K8sRole& r, const K8sOptions& o, const Names& n, bool ranked) {
  YAML::Node c;
  c["name"] = r.role;
  c["image"] = o.image;
  c["command"].push_back(Str(o.rlforge));
  for (const char* a : {"actor", "--role"}) c["command"].push_back(a);
  c["command"].push_back(r.role);
  if (ranked) {
    c["command"].push_back("--rank");
    c["command"].push_back("$(RANK)");  // Kubernetes expands it from the env below
    YAML::Node rank;
    rank["name"] = "RANK";
    rank["valueFrom"]["fieldRef"]["fieldPath"] =
        "metadata.annotations['batch.kubernetes.io/job-completion-index']";
    c["env"].push_back(rank);
  }
  c["command"].push_back("--connect");
  c["command"].push_back(n.connect);
  c["env"].push_back(Env("RLFORGE_KEYS", absl::StrCat(kK8sKeyDir, "/actor.key")));
  c["volumeMounts"].push_back(Mount("keys", kK8sKeyDir, true));
  if (r.gpus > 0) c["resources"]["limits"]["nvidia.com/gpu"] = r.gpus;
  return c;
}

YAML::Node TrainerJob(const K8sRole& r, const K8sOptions& o, const Names& n) {
  YAML::Node d;
  d["apiVersion"] = "batch/v1";
  d["kind"] = "Job";
  d["metadata"] = Metadata(n.trainer, n.ns, Labels(n.job, kTrainerRole));
  d["spec"]["completionMode"] = "Indexed";
  d["spec"]["completions"] = r.count;
  d["spec"]["parallelism"] = r.count;
  d["spec"]["backoffLimit"] = 0;         // a lost rank stops the job: it resumes from a checkpoint
  YAML::Node t = d["spec"]["template"];  // a handle: writes go into d
  t["metadata"]["labels"] = Labels(n.job, kTrainerRole);
  t["spec"]["restartPolicy"] = "Never";
  t["spec"]["subdomain"] = n.trainer;  // with the headless Service: stable hostnames
  t["spec"]["containers"].push_back(ActorContainer(r, o, n, true));
  t["spec"]["volumes"].push_back(KeysVolume(n.secret, true));
  return d;
}

YAML::Node WorkerDeployment(const K8sRole& r, const K8sOptions& o, const Names& n) {
  YAML::Node d;
  d["apiVersion"] = "apps/v1";
  d["kind"] = "Deployment";
  d["metadata"] = Metadata(absl::StrCat(n.job, "-", r.role), n.ns, Labels(n.job, r.role));
  d["spec"]["replicas"] = r.count;
  d["spec"]["selector"]["matchLabels"] = Labels(n.job, r.role);
  YAML::Node t = d["spec"]["template"];  // a handle: writes go into d
  t["metadata"]["labels"] = Labels(n.job, r.role);
  t["spec"]["containers"].push_back(ActorContainer(r, o, n, false));
  t["spec"]["volumes"].push_back(KeysVolume(n.secret, true));
  return d;
}

}  // namespace

absl::StatusOr<std::string> K8sName(const std::string& name, size_t max_len) {
  std::string out;
  for (char ch : name) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (std::isalnum(c)) {
      out += static_cast<char>(std::tolower(c));
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  if (out.size() > max_len) out.resize(max_len);
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job.name '", name, "' has no letters or digits to make a Kubernetes name from"));
  }
  return out;
}

absl::StatusOr<std::string> K8sManifests(const K8sJob& job, const K8sOptions& o) {
  if (o.image.empty()) return absl::InvalidArgumentError("no container image (--image)");
  if (job.controller_port <= 0) {
    return absl::InvalidArgumentError("controller.port must be fixed (not 0) on Kubernetes");
  }
  Names n;
  auto job_name = K8sName(job.name);
  if (!job_name.ok()) return job_name.status();
  auto ns = K8sName(o.namespace_, 63);
  if (!ns.ok() || *ns != o.namespace_) {
    return absl::InvalidArgumentError(
        absl::StrCat("--namespace '", o.namespace_, "' is not a Kubernetes namespace name"));
  }
  n.job = *job_name;
  n.ns = o.namespace_;
  n.controller = n.job + "-controller";
  n.trainer = n.job + "-trainer";
  n.secret = n.job + "-keys";
  n.config_map = n.job + "-job";
  n.connect = absl::StrCat("tcp://", n.controller, ".", n.ns, ".svc:", job.controller_port);
  std::vector<YAML::Node> docs = {ConfigMap(job, n), Secret(job, n), ControllerService(job, n),
                                  ControllerJob(job, o, n)};
  for (const K8sRole& r : job.roles) {
    if (r.count <= 0) continue;
    if (r.role == kTrainerRole) {
      docs.push_back(TrainerService(n));
      docs.push_back(TrainerJob(r, o, n));
    } else {
      docs.push_back(WorkerDeployment(r, o, n));
    }
  }
  YAML::Emitter out;
  for (const YAML::Node& d : docs) {
    out << YAML::BeginDoc;
    Emit(out, d);
  }
  if (!out.good()) return absl::InternalError(absl::StrCat("YAML emitter: ", out.GetLastError()));
  return std::string(out.c_str()) + "\n";
}

}  // namespace rlforge
