# A TRL-style reward for python_reward_test: one float per completion.
def reward_len(prompts, completions, answer, **kwargs):
    return [float(len(c)) + (10.0 if c == a else 0.0) for c, a in zip(completions, answer)]
