"""Server-side cost of the reference figures the pages draw: built and serialised to JSON, as
Streamlit does before sending one.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_figures.py

Times, per figure and as the median of 20 builds, the Decode page's compact frontier (redrawn
on every move of a rule parameter) and the Frontier page's two reference charts (drawn on every
open). Each is built twice in one run: as shipped, on plotly's default template, and with
plotly_white named in its layout, which is how the figures were built before (plotly validates
and deep-copies a named template for every figure; its default template it applies without
that check). Needs no model.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import plotly.graph_objects as go

from cactus_core.app.frontier import figures as ff
from cactus_core.app.shared.reference import compact_frontier
from cactus_core.experiments.sweeps.reference import load_reference
from cactus_core.maths.rules import DEFAULT_RULE, RULES

REPEATS = 20


def median_ms(build: Callable[[int], go.Figure], named_template: bool) -> float:
    times = []
    for i in range(REPEATS):
        start = time.perf_counter()
        fig = build(i)
        if named_template:
            fig.update_layout(template="plotly_white")
        fig.to_json()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    part = next(iter(load_reference().sweeps.values()))
    param = RULES[DEFAULT_RULE].swept()
    values = param.grid
    figures: dict[str, Callable[[int], go.Figure]] = {
        "Decode: compact frontier (each move)": lambda i: compact_frontier(
            part, DEFAULT_RULE, {param.name: values[i % len(values)]}
        ),
        "Frontier: reference tokens per call": lambda i: ff.frontier_chart(
            part.rows, "tokens_per_call", title="reference"
        ),
        "Frontier: acceptance vs the limit": lambda i: ff.acceptance_limit_chart(
            part.rows, part.limit
        ),
    }
    print("| figure | as shipped (ms) | plotly_white named in the layout (ms) |")
    print("|---|---:|---:|")
    for name, build in figures.items():
        build(0).to_json()  # imports and first-use caches out of the timing
        shipped, named = median_ms(build, False), median_ms(build, True)
        print(f"| {name} | {shipped:.1f} | {named:.1f} |")


if __name__ == "__main__":
    main()
