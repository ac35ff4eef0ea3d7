"""Experiments over a model pair: sweeps with their cache, benchmarks, frontier statistics."""
