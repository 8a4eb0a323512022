#include "reward/plugin_reward.h"

#include <dlfcn.h>

#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "reward/plugin_abi.h"

namespace rlforge::reward {

namespace {

constexpr size_t kErrCap = 512;

class PluginReward final : public Reward {
 public:
  PluginReward(std::string path, const rlforge_reward_plugin* api, void* state)
      : path_(std::move(path)), api_(api), state_(state) {}
  ~PluginReward() override {
    if (api_->destroy != nullptr) api_->destroy(state_);
  }

  SampleScore ScoreOne(const Sample& s) const override {
    rlforge_reward_sample in{s.prompt.c_str(),  s.prompt.size(),  s.response.c_str(),
                             s.response.size(), s.answer.c_str(), s.answer.size(),
                             s.response_tokens};
    double value = 0;
    char err[kErrCap] = {0};
    const int rc = api_->score(state_, &in, &value, err, kErrCap);
    err[kErrCap - 1] = '\0';
    if (rc != 0) {
      return SampleScore::Error(absl::StrCat("plugin ", path_, ": score() returned ", rc, ": ",
                                             err[0] ? err : "(no message)"));
    }
    return SampleScore::Ok(value);  // RewardSet turns NaN/inf into kNotFinite
  }

 private:
  std::string path_;
  const rlforge_reward_plugin* api_;
  void* state_;
};

}  // namespace

std::string PluginFile(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  return ec ? path : absolute.lexically_normal().string();
}

absl::StatusOr<std::unique_ptr<Reward>> LoadPluginReward(const std::string& path,
                                                         const std::vector<std::string>& args) {
  // RTLD_LOCAL: two plugins may define the same internal symbols.
  void* lib = dlopen(PluginFile(path).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    return absl::NotFoundError(absl::StrCat("reward plugin ", path, ": cannot load: ", dlerror()));
  }
  auto entry =
      reinterpret_cast<rlforge_reward_plugin_entry>(dlsym(lib, RLFORGE_REWARD_PLUGIN_ENTRY));
  if (entry == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("reward plugin ", path, ": no symbol ",
                                                   RLFORGE_REWARD_PLUGIN_ENTRY,
                                                   " (see reward/plugin_abi.h)"));
  }
  const rlforge_reward_plugin* api = entry();
  if (api == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reward plugin ", path, ": ", RLFORGE_REWARD_PLUGIN_ENTRY, "() returned NULL"));
  }
  if (api->abi_version != RLFORGE_REWARD_ABI_VERSION) {
    return absl::FailedPreconditionError(
        absl::StrCat("reward plugin ", path, ": ABI version ", api->abi_version,
                     ", but this rlforge speaks version ", RLFORGE_REWARD_ABI_VERSION,
                     "; rebuild the plugin against reward/plugin_abi.h"));
  }
  if (api->struct_size < sizeof(rlforge_reward_plugin) || api->create == nullptr ||
      api->score == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("reward plugin ", path, ": incomplete rlforge_reward_plugin (struct_size ",
                     api->struct_size, ", create/score must be set)"));
  }
  std::vector<std::string> keys, values;
  for (const std::string& a : args) {
    const size_t eq = a.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("reward plugin ", path, ": arg '", a, "' is not key=value"));
    }
    keys.push_back(a.substr(0, eq));
    values.push_back(a.substr(eq + 1));
  }
  std::vector<const char*> k, v;
  for (size_t i = 0; i < keys.size(); ++i) {
    k.push_back(keys[i].c_str());
    v.push_back(values[i].c_str());
  }
  char err[kErrCap] = {0};
  void* state = api->create(k.data(), v.data(), k.size(), err, kErrCap);
  err[kErrCap - 1] = '\0';
  if (state == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("reward plugin ", path, ": create() failed: ", err[0] ? err : "(no message)"));
  }
  return std::unique_ptr<Reward>(std::make_unique<PluginReward>(path, api, state));
}

}  // namespace rlforge::reward
