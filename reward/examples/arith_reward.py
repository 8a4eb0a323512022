# A reward function in verl's form (docs/rewards.md#python-reward-functions): 1 when the last
# number in the response is the reference, 0.1 for any other number, 0 for none.
import re


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    numbers = re.findall(r"-?\d+", solution_str)
    if not numbers:
        return 0.0
    return 1.0 if numbers[-1] == ground_truth.strip() else 0.1
