#include "launch/placement.h"

#include <gtest/gtest.h>

namespace rlforge {
namespace {

RoleSlots Role(int count, bool packed, std::vector<int64_t> nodes, int64_t per_node,
               int64_t gpus = 0) {
  RoleSlots r;
  r.role = packed ? "trainer" : "rollout";
  r.key = "launch.placement." + r.role;
  r.count = count;
  r.packed = packed;
  r.nodes = std::move(nodes);
  r.per_node = per_node;
  r.gpus = gpus;
  return r;
}

TEST(PlacementTest, WorkersGoRoundRobinOverEveryNode) {
  auto p = PlaceRole(Role(5, false, {}, 0), 2);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, (std::vector<int>{0, 1, 0, 1, 0}));
}

TEST(PlacementTest, WorkersStayOnTheirAllowedNodes) {
  auto p = PlaceRole(Role(4, false, {2, 0}, 0), 3);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, (std::vector<int>{2, 0, 2, 0}));
}

TEST(PlacementTest, TrainerRanksArePackedInRankOrder) {
  auto p = PlaceRole(Role(5, true, {}, 2), 3);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, (std::vector<int>{0, 0, 1, 1, 2}));
  // No cap: every rank on the first allowed node.
  p = PlaceRole(Role(3, true, {1, 0}, 0), 2);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, (std::vector<int>{1, 1, 1}));
}

TEST(PlacementTest, TooManyWorkersForTheirNodesIsAnErrorNamingThem) {
  auto p = PlaceRole(Role(5, false, {1}, 2), 2);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            "launch.placement.rollout: 5 workers do not fit on nodes [1] at per_node 2");
  p = PlaceRole(Role(3, true, {}, 1), 2);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            "launch.placement.trainer: 3 ranks do not fit on nodes [0, 1] at per_node 1");
}

TEST(PlacementTest, ANodeOutsideTheAllocationIsAnError) {
  auto p = PlaceRole(Role(2, false, {0, 2}, 0), 2);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            "launch.placement.rollout.nodes: node 2 is outside the allocation, which has 2 "
            "node(s) (indices 0..1)");
}

TEST(PlacementTest, NoNodesIsAnError) {
  auto p = PlaceRole(Role(1, false, {}, 0), 0);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            "launch.placement.rollout: there are no nodes to place 1 rollout actor(s) on");
}

TEST(PlacementTest, NodesNeededIsTheMostAnyRoleNeeds) {
  EXPECT_EQ(NodesNeeded({Role(4, false, {}, 0)}), 1);
  EXPECT_EQ(NodesNeeded({Role(4, false, {}, 0), Role(5, true, {}, 2)}), 3);
  EXPECT_EQ(NodesNeeded({Role(1, false, {3}, 0), Role(2, true, {}, 0)}), 4);
  EXPECT_EQ(NodesNeeded({Role(0, false, {7}, 0)}), 1);  // a role with no actors needs none
}

TEST(PlacementTest, GpusPerNodeSumsTheRolesOnTheBusiestNode) {
  // Trainer ranks 0,1 on node 0 (2 GPUs each), rollout workers on nodes 0,1,0 (1 each).
  auto g = GpusPerNodeNeeded({Role(2, true, {}, 0, 2), Role(3, false, {}, 0, 1)}, 2);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g, 6);
  g = GpusPerNodeNeeded({Role(3, false, {}, 0)}, 2);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(*g, 0);
}

}  // namespace
}  // namespace rlforge
