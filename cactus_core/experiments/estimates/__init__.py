"""Estimates: rule curves from recorded positions, estimated overrides, the limit's scoring,
speedups, engine fits and rule comparisons."""
