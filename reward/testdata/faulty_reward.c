/* A misbehaving reward plugin for tests: its behaviour is chosen by the response text.
 *   "fail"  -> returns an error     "nan" -> scores NaN      "hang" -> sleeps 2 s
 *   other   -> scores the response length in bytes
 * With RLFORGE_FAULTY_ABI=<n> in the environment it reports ABI version n (version check);
 * with arg fail_create=1 its create() fails.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reward/plugin_abi.h"

static void* faulty_create(const char* const* keys, const char* const* values, size_t n,
                           char* err, size_t err_cap) {
  (void)values;
  for (size_t i = 0; i < n; ++i) {
    if (strcmp(keys[i], "fail_create") == 0) {
      snprintf(err, err_cap, "create failed as asked");
      return NULL;
    }
  }
  return (void*)1;
}

static int faulty_score(void* state, const rlforge_reward_sample* s, double* score, char* err,
                        size_t err_cap) {
  (void)state;
  if (s->response_len == 4 && memcmp(s->response, "fail", 4) == 0) {
    snprintf(err, err_cap, "cannot score '%s'", s->response);
    return 1;
  }
  if (s->response_len == 3 && memcmp(s->response, "nan", 3) == 0) {
    *score = NAN;
    return 0;
  }
  if (s->response_len == 4 && memcmp(s->response, "hang", 4) == 0) sleep(2);
  *score = (double)s->response_len;
  return 0;
}

static void faulty_destroy(void* state) { (void)state; }

static rlforge_reward_plugin g_plugin = {
    RLFORGE_REWARD_ABI_VERSION, sizeof(rlforge_reward_plugin), "faulty test plugin",
    faulty_create,              faulty_score,                  faulty_destroy,
};

const rlforge_reward_plugin* rlforge_reward_plugin_v1(void) {
  const char* abi = getenv("RLFORGE_FAULTY_ABI");
  g_plugin.abi_version = abi != NULL ? (uint32_t)atoi(abi) : RLFORGE_REWARD_ABI_VERSION;
  return &g_plugin;
}
