/* The C ABI of rlforge reward plugins: a shared library that scores responses.
 *
 * rlforge dlopen()s the library named by a reward's params.path, calls its one exported
 * function rlforge_reward_plugin_v1() and checks abi_version and struct_size before using
 * anything else. Per reward it calls create() once with the params.args key=value pairs,
 * score() per sample, destroy() at the end. A documented, tested example is
 * reward/examples/keyword_reward.c; docs/rewards.md walks through it.
 *
 * Rules for score():
 *  - return 0 and set *score on success; return non-zero and write a message (NUL-terminated,
 *    at most err_cap bytes) to err on failure. rlforge marks the sample failed with that
 *    message; a NaN or infinite *score is a failure too. Nothing is ever silently scored 0.
 *  - it may be called from several threads at once (a call that runs past the reward's
 *    timeout is abandoned and scoring continues in another thread), so keep the state
 *    read-only after create() or lock it.
 *  - text is UTF-8 but not guaranteed valid; lengths are in bytes, strings are also
 *    NUL-terminated.
 * The library must not be unloaded while calls are in flight; rlforge never dlclose()s it.
 */
#ifndef RLFORGE_REWARD_PLUGIN_ABI_H_
#define RLFORGE_REWARD_PLUGIN_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RLFORGE_REWARD_ABI_VERSION 1u

typedef struct rlforge_reward_sample {
  const char* prompt;
  size_t prompt_len;
  const char* response;
  size_t response_len;
  const char* answer; /* the reference answer; "" when the task has none */
  size_t answer_len;
  int64_t response_tokens; /* -1 when unknown */
} rlforge_reward_sample;

typedef struct rlforge_reward_plugin {
  uint32_t abi_version; /* RLFORGE_REWARD_ABI_VERSION */
  uint32_t struct_size; /* sizeof(rlforge_reward_plugin) */
  const char* description;
  /* Returns the plugin's state (may be any non-NULL pointer), or NULL with a message in err. */
  void* (*create)(const char* const* keys, const char* const* values, size_t n_args, char* err,
                  size_t err_cap);
  int (*score)(void* state, const rlforge_reward_sample* sample, double* score, char* err,
               size_t err_cap);
  void (*destroy)(void* state);
} rlforge_reward_plugin;

/* The one symbol a plugin exports. */
typedef const rlforge_reward_plugin* (*rlforge_reward_plugin_entry)(void);
#define RLFORGE_REWARD_PLUGIN_ENTRY "rlforge_reward_plugin_v1"

#ifdef __cplusplus
}
#endif

#endif /* RLFORGE_REWARD_PLUGIN_ABI_H_ */
