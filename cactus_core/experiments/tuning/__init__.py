"""Tuning: which setting meets a divergence budget (first guess, refined by runs), per task, and
the best k."""
