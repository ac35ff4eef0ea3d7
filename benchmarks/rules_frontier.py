"""Every rule's frontier on the embedded pair, from the shipped reference sweep: the figure
docs/rules_frontier.png and the "most tokens per call at each emitted KL" tables.

    PYTHONPATH=. .venv/bin/python benchmarks/rules_frontier.py [--reference PATH]
        [--png docs/rules_frontier.png]

The PNG is a screenshot of the Plotly figure by Debian's headless chromium (as the other
figures in docs/); the tables print as Markdown.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

from cactus_core.app.playground.comparison_figure import rule_comparison_figure
from cactus_core.experiments.estimates.rule_comparison import (
    best_at_budgets,
    comparison_markdown,
    efficiency_markdown,
    matched_kl_markdown,
    rule_points,
)
from cactus_core.experiments.sweeps.reference import load_reference
from cactus_core.maths.rules import DEFAULT_RULE

# Each pair: a rule beside the one it is measured against at matched emitted KL.
MATCHED = (("cactus-adaptive", DEFAULT_RULE), ("optimal-price", DEFAULT_RULE))


def screenshot(html: str, png: Path, width: int, height: int) -> None:
    browser = shutil.which("chromium") or "/usr/bin/chromium"
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "figure.html"
        page.write_text(html, encoding="utf-8")
        subprocess.run(
            [browser, "--headless", "--no-sandbox", "--hide-scrollbars",
             f"--window-size={width},{height}", f"--screenshot={png.resolve()}",
             "--virtual-time-budget=5000", page.as_uri()],
            check=True, capture_output=True,
        )  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", default=None, help="a reference sweep file (default: shipped)")
    ap.add_argument("--png", default="docs/rules_frontier.png")
    args = ap.parse_args()
    ref = load_reference(args.reference)
    print(ref.caption() + "\n")
    panels = {}
    for top_p, sweep in ref.sweeps.items():
        points = rule_points(sweep.rows)
        panels[f"top-p {top_p:g}"] = points
        print(f"### top-p {top_p:g}\n")
        print(comparison_markdown(best_at_budgets(points)))
        for rule, against in MATCHED:
            print(matched_kl_markdown(points, rule, against))
        print(efficiency_markdown(sweep.rows, [rule for rule, _ in MATCHED] + [DEFAULT_RULE]))
    fig = rule_comparison_figure(panels)
    width, height = int(fig.layout.width), int(fig.layout.height)
    html = fig.to_html(include_plotlyjs=True, full_html=True, config={"displayModeBar": False})
    screenshot(html, Path(args.png), width, height)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
