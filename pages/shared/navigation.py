"""The app's pages, in the order the navigation lists them: each page's script, title, icon,
address and the line the Overview shows for it. app.py builds the navigation from this table;
the Overview's cards and the tour's links read it too."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PageEntry:
    path: str  # the page's script, from the repository root ("" for the Overview's function)
    title: str
    icon: str
    url_path: str  # its address ("" for the default page)
    blurb: str = ""  # the Overview's line for it
    default: bool = False


PAGES: tuple[PageEntry, ...] = (
    PageEntry("", "Overview", ":material/home:", "", default=True),  # app.py: a function
    PageEntry(
        "pages/decode.py",
        "Decode",
        ":material/auto_awesome:",
        "decode",
        "Generate with any rule and watch each round: which drafts passed, which were "
        "struck, and why. Inspect any token; replay the same coins under another delta.",
    ),
    PageEntry(
        "pages/step.py",
        "Step through",
        ":material/skip_next:",
        "step",
        "One real round slowed down: each step narrated from its own numbers, with what "
        "lossless sampling would have decided on the same coin. Links reopen the same step.",
    ),
    PageEntry(
        "pages/playground.py",
        "Playground",
        ":material/tune:",
        "playground",
        "One position, analytic and instant: move delta and see h, a(n), pi and both KLs "
        "for every rule side by side.",
    ),
    PageEntry(
        "pages/frontier.py",
        "Frontier",
        ":material/show_chart:",
        "frontier",
        "Sweep rules and their parameters on a prompt set: tokens per call and predicted "
        "speedup against emitted KL, the Pareto frontier, the limit, and the delta for a KL "
        "budget.",
    ),
)


def page_entry(url_path: str) -> PageEntry:
    """The page at an address (a tour stop's `page`)."""
    return next(p for p in PAGES if p.url_path == url_path)
