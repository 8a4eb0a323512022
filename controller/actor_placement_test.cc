#include "controller/actor_placement.h"

#include <gtest/gtest.h>

namespace rlforge {
namespace {

JobConfig Config(const std::string& yaml) {
  LoadedJob job = LoadJobText(yaml, "test.yaml");
  EXPECT_TRUE(job.ok()) << (job.ok() ? "" : job.errors[0].ToString());
  return job.config;
}

TEST(ActorPlacementTest, EachLaunchedActorGetsItsRolesNode) {
  JobConfig c = Config(
      "job: {algorithm: echo}\n"
      "launch:\n  backend: slurm\n"
      "  placement:\n    trainer: {per_node: 1, gpus: 2}\n    rollout: {nodes: [1]}\n");
  std::vector<RoleRequirement> roles = {
      {"trainer", 2, false, false}, {"rollout", 3, false, true}, {"reward", 2, true, true}};
  auto placed_roles = PlacementSlots(c, roles);
  ASSERT_TRUE(placed_roles.ok()) << placed_roles.status();
  const std::vector<RoleSlots>& slots = *placed_roles;
  ASSERT_EQ(slots.size(), 2u);  // the external reward workers are nobody's to place
  EXPECT_TRUE(slots[0].packed);
  EXPECT_FALSE(slots[1].packed);
  EXPECT_EQ(slots[1].key, "launch.placement.rollout");
  auto places = PlaceActors(slots, {"n1", "n2"});
  ASSERT_TRUE(places.ok()) << places.status();
  EXPECT_EQ(places->at("trainer-0").node, "n1");
  EXPECT_EQ(places->at("trainer-1").node, "n2");
  EXPECT_EQ(places->at("trainer-1").gpus, 2);
  for (const char* id : {"rollout-0", "rollout-1", "rollout-2"}) {
    EXPECT_EQ(places->at(id).node, "n2") << id;
    EXPECT_EQ(places->at(id).gpus, 0) << id;
  }
  EXPECT_EQ(places->count("reward-0"), 0u);
  // One node fewer: the trainer ranks no longer fit, and the error names the nodes.
  auto short_of_one = PlaceActors(slots, {"n1"});
  ASSERT_FALSE(short_of_one.ok());
  EXPECT_EQ(short_of_one.status().message(),
            "launch.placement.trainer: 2 ranks do not fit on nodes [0] at per_node 1 "
            "(nodes: n1)");
}

TEST(ActorPlacementTest, PlacementOfARoleTheJobDoesNotLaunchIsAnError) {
  JobConfig c = Config(
      "job: {algorithm: ppo}\nlaunch:\n  backend: slurm\n  placement:\n"
      "    reward: {per_node: 1}\n");
  auto slots = PlacementSlots(c, {{"rollout", 2, false, true}, {"trainer", 1, false, false}});
  ASSERT_FALSE(slots.ok());
  EXPECT_EQ(slots.status().message(),
            "launch.placement.reward: job.algorithm ppo launches no reward actors here; remove "
            "this section");
}

TEST(ActorPlacementTest, LaunchNodesTakesTheFirstNodesOfTheAllocation) {
  JobConfig c = Config("job: {algorithm: echo}\nlaunch: {backend: slurm, nodes: 2}\n");
  auto nodes = JobNodes(c, {"a", "b", "c"});
  ASSERT_TRUE(nodes.ok());
  EXPECT_EQ(*nodes, (std::vector<std::string>{"a", "b"}));
  auto too_few = JobNodes(c, {"a"});
  ASSERT_FALSE(too_few.ok());
  EXPECT_EQ(too_few.status().message(),
            "launch.nodes: the job wants 2 nodes, but the allocation has 1 (a)");
}

}  // namespace
}  // namespace rlforge
