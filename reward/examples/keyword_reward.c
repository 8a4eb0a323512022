/* Example rlforge reward plugin (the template to copy): scores 1 when the response contains
 * a keyword, 0 otherwise, optionally only when the reference answer is also in the response.
 *
 * args:  keyword=<text>          required
 *        require_answer=true     also require the reference answer as a substring
 * Build: cc -shared -fPIC -O2 -I<rlforge> keyword_reward.c -o libkeyword_reward.so
 *        (CMake target rlforge_keyword_reward builds it as build/reward/examples/...)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reward/plugin_abi.h"

typedef struct {
  char* keyword;
  int require_answer;
} keyword_state;

/* memmem on (ptr, len) pairs: the text need not be NUL-free. */
static int contains(const char* hay, size_t hay_len, const char* needle, size_t needle_len) {
  if (needle_len == 0) return 1;
  for (size_t i = 0; i + needle_len <= hay_len; ++i) {
    if (memcmp(hay + i, needle, needle_len) == 0) return 1;
  }
  return 0;
}

static void* keyword_create(const char* const* keys, const char* const* values, size_t n,
                            char* err, size_t err_cap) {
  keyword_state* s = calloc(1, sizeof(keyword_state));
  if (s == NULL) {
    snprintf(err, err_cap, "out of memory");
    return NULL;
  }
  for (size_t i = 0; i < n; ++i) {
    if (strcmp(keys[i], "keyword") == 0) {
      free(s->keyword);
      s->keyword = strdup(values[i]);
    } else if (strcmp(keys[i], "require_answer") == 0) {
      s->require_answer = strcmp(values[i], "true") == 0;
    } else {
      snprintf(err, err_cap, "unknown arg '%s' (known: keyword, require_answer)", keys[i]);
      free(s->keyword);
      free(s);
      return NULL;
    }
  }
  if (s->keyword == NULL || s->keyword[0] == '\0') {
    snprintf(err, err_cap, "arg keyword=<text> is required");
    free(s->keyword);
    free(s);
    return NULL;
  }
  return s;
}

static int keyword_score(void* state, const rlforge_reward_sample* sample, double* score,
                         char* err, size_t err_cap) {
  const keyword_state* s = state;
  (void)err;
  (void)err_cap;
  int hit = contains(sample->response, sample->response_len, s->keyword, strlen(s->keyword));
  if (hit && s->require_answer) {
    hit = contains(sample->response, sample->response_len, sample->answer, sample->answer_len);
  }
  *score = hit ? 1.0 : 0.0;
  return 0;
}

static void keyword_destroy(void* state) {
  keyword_state* s = state;
  free(s->keyword);
  free(s);
}

static const rlforge_reward_plugin kPlugin = {
    RLFORGE_REWARD_ABI_VERSION,
    sizeof(rlforge_reward_plugin),
    "1 when the response contains args.keyword (and the answer, with require_answer=true)",
    keyword_create,
    keyword_score,
    keyword_destroy,
};

const rlforge_reward_plugin* rlforge_reward_plugin_v1(void) { return &kPlugin; }
