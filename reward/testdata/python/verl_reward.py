# A verl-style reward for python_reward_test: exact match, and misbehaviour on request.
import os
import time


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    print("scoring", solution_str)  # goes to the log, not into the protocol
    if solution_str == "raise":
        raise ValueError("asked to raise")
    if solution_str == "hang":
        time.sleep(1000)
    if solution_str == "crash":
        os._exit(3)
    if solution_str == "nan":
        return float("nan")
    if solution_str == "str":
        return "high"
    if solution_str == "dict":
        return {"score": 0.5, "acc": True}
    return 1.0 if solution_str.strip() == ground_truth else 0.0
