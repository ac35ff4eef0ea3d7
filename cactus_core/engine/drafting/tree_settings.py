"""The shape of a draft tree (`tree_drafter`): one value object that the decoder, the CLI's
`--tree` flags, the sidebar and its links read. Kept free of torch and transformers so that
the app's settings can import it at start-up."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar


@dataclass(frozen=True)
class TreeSettings:
    """The shape of a draft tree. Defaults: the fastest shape measured side by side on a CPU
    without native bfloat16, where checking 9 tokens costs 1.1–1.35 times what the chain's 5
    do and 13–17 up to 1.7 times (docs/benchmarks.md, "Draft trees"): two candidates at each
    of 4 depths, along the most probable path. Where checking more tokens is nearly free (a GPU, an
    AMX CPU in bfloat16) larger trees pay, e.g. 16 nodes, depth 6, width 2, root branch 4."""

    nodes: int = 8  # node budget: drafted tokens per round (the verify pass reads nodes + 1)
    depth: int = 4  # the deepest a node can be (a chain of k is depth k)
    width: int = 1  # frontier nodes expanded per depth
    branch: int = 2  # children drawn per expanded node
    root_branch: int = 2  # children of the root

    # (low, high) of each field, read by the CLI, the sidebar and the checks below.
    RANGES: ClassVar[dict[str, tuple[int, int]]] = {
        "nodes": (1, 64),
        "depth": (1, 16),
        "width": (1, 16),
        "branch": (1, 16),
    }

    # What each field is, for the CLI's help.
    HELP: ClassVar[dict[str, str]] = {
        "nodes": "node budget (drafted tokens per round)",
        "depth": "depth (the longest path a round can accept)",
        "width": "width (frontier nodes expanded per depth)",
        "branch": "branch (children drawn per expanded node)",
        "root_branch": "root branch (children of the root)",
    }

    def range_of(self, name: str) -> tuple[int, int]:
        return self.RANGES.get(name, self.RANGES["branch"])

    def __post_init__(self) -> None:
        for f in fields(self):
            low, high = self.range_of(f.name)
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(
                    f"tree {f.name} must be an integer in [{low}, {high}], got {value!r}"
                )

    def cli_flags(self) -> list[str]:
        """The CLI's flags for these settings (`cli.add_tree_args` defines them)."""
        return ["--tree"] + [f"--tree-{n.replace('_', '-')} {v}" for n, v in self.to_dict().items()]

    def to_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TreeSettings:
        """From `to_dict`'s form; ValueError naming an unknown or invalid field."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown tree settings {unknown}; known: {sorted(known)}")
        return cls(**data)
