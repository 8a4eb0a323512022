# Neither verl's nor TRL's arguments.
def score(text, reference):
    return 1.0
