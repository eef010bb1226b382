"""Descriptive statistics."""


def mean(values):
    return sum(values) / len(values)


def median(values):
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def spread(values):
    """The difference between the largest and the smallest value (0 for no values)."""
    return max(values) - min(values)
