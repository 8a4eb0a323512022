# A module whose line 3 does not parse.
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return (1.0
