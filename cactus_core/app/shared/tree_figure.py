"""A draft tree's round drawn node by node: a pure Plotly figure from the verdict's numbers.

The root (the last committed token) is on the left and each depth one column to the right;
leaves are spread top to bottom in the order the tree lists them, and a node sits at the middle
of its children. Nodes are coloured by fate (figures.FATE_COLOURS; grey: never reached), the
accepted path is drawn bold, and the token emitted at the end of the path (recovered from the
residual, or the bonus from q) hangs off the path's tip. Hovering a node gives its p, q, what
the rule judged it against (h for a node's first child, the residual for later ones), a(n)
and its coin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import plotly.graph_objects as go

from cactus_core.app.shared.figures import FATE_COLOURS
from cactus_core.app.shared.transcript import show_text
from cactus_core.maths.tree import TreeVerdict, children_of, node_depths

UNREACHED_COLOUR = "#BBBBBB"
PENDING_COLOUR = "#777777"  # a node whose fate a step has not told yet
FATE_NAMES = {
    "accepted": "accepted",
    "rejected": "rejected",
    "unreached": "not reached",
    "recovered": "recovered",
    "bonus": "bonus",
    "pending": "not judged yet",
}
_LABEL_CHARS = 10


@dataclass(frozen=True)
class TreeFrame:
    """What one picture of a tree round shows: the verdict, each node's token text, the root's
    text, the emitted last token's text, and how far the walk is told: fates up to depth
    `reveal` (0: none yet), None for the whole round with its last token."""

    verdict: TreeVerdict
    labels: list[str]
    root: str
    last_label: str
    reveal: int | None = None

    def __post_init__(self) -> None:
        if len(self.labels) != len(self.verdict.tokens):
            raise ValueError("a TreeFrame needs one label per node")
        if self.reveal is not None and self.reveal < 0:
            raise ValueError("reveal must be None or a depth ≥ 0")


def tree_positions(parents: list[int], extra_under: int | None = None) -> list[tuple[float, float]]:
    """(x, y) of the root (first) and of each node, then of one extra child of row
    `extra_under` (the emitted token) when given. x is the depth; leaves take y = 0, −1, −2 …
    in the order the tree lists them, and a parent sits at the mean y of its children."""
    kids = children_of(parents)
    if extra_under is not None:
        kids[extra_under] = [*kids[extra_under], len(parents)]
        kids.append([])
    depth = [0, *node_depths(parents)]
    if extra_under is not None:
        depth.append(depth[extra_under] + 1)
    y: dict[int, float] = {}
    next_leaf = [0.0]

    def place(row: int) -> float:
        children = kids[row]
        if not children:
            y[row] = next_leaf[0]
            next_leaf[0] -= 1.0
        else:
            ys = [place(c + 1) for c in children]
            y[row] = sum(ys) / len(ys)
        return y[row]

    place(0)
    return [(float(depth[r]), y[r]) for r in range(len(depth))]


def _short(text: str) -> str:
    shown = show_text(text)
    return shown if len(shown) <= _LABEL_CHARS else shown[: _LABEL_CHARS - 1] + "…"


def _num(x: float) -> str:
    return "–" if math.isnan(x) else f"{x:.3f}"


def node_hover(frame: TreeFrame, i: int) -> str:
    """The hover text of node i: where it sits, p, q, what it was judged against, a(n), coin."""
    v = frame.verdict
    siblings = children_of(v.parents)[v.parents[i] + 1]
    rank = siblings.index(i)
    depth = node_depths(v.parents)[i]
    lines = [
        f"<b>'{show_text(frame.labels[i])}'</b>: depth {depth}, candidate {rank + 1} of "
        f"{len(siblings)}",
        f"p = {_num(v.p[i])} (draft) · q = {_num(v.q[i])} (verifier)",
    ]
    fate = _fate(frame, i)
    if fate in ("accepted", "rejected"):
        against = (
            "h (the rule's target)" if rank == 0 else f"the residual after {rank} rejection(s)"
        )
        lines.append(f"judged against {against}: {_num(v.h[i])}")
        if rank > 0:
            lines.append(f"p among the candidates left = {_num(v.p_left[i])}")
        lines.append(f"a(n) = {_num(v.accept_probs[i])} · coin u = {_num(v.coins[i])}: {fate}")
    elif fate == "pending":
        lines.append("not judged yet at this step")
    else:
        lines.append("not reached: no decision (its coin goes unused)")
    return "<br>".join(lines)


def _fate(frame: TreeFrame, i: int) -> str:
    if frame.reveal is not None and node_depths(frame.verdict.parents)[i] > frame.reveal:
        return "pending"
    return frame.verdict.fates[i]


def tree_figure(frame: TreeFrame, title: str | None = None) -> go.Figure:
    """The round's tree (module docstring)."""
    v = frame.verdict
    n = len(v.tokens)
    whole = frame.reveal is None
    tip = v.path[-1] + 1 if v.path else 0  # the row the last token hangs off
    pos = tree_positions(v.parents, tip if whole else None)
    fig = go.Figure()
    _edges(fig, frame, pos)
    if whole:
        _link(fig, [pos[tip], pos[n + 1]], 5, FATE_COLOURS[v.last], "last token", "dot")
    fig.add_scatter(
        x=[pos[0][0]],
        y=[pos[0][1]],
        mode="markers+text",
        marker={"size": 16, "color": "#444444", "symbol": "square"},
        text=[_short(frame.root)],
        textposition="bottom center",
        hovertext=[f"<b>'{show_text(frame.root)}'</b>: the root, the last committed token"],
        hoverinfo="text",
        name="root",
        showlegend=False,
    )
    _nodes(fig, frame, pos)
    if whole:
        drawn_from = "the last residual" if v.last == "recovered" else "q at the path's tip"
        fig.add_scatter(
            x=[pos[n + 1][0]],
            y=[pos[n + 1][1]],
            mode="markers+text",
            marker={"size": 17, "color": FATE_COLOURS[v.last], "symbol": "diamond"},
            text=[_short(frame.last_label)],
            textposition="top center",
            hovertext=[
                f"<b>'{show_text(frame.last_label)}'</b>: {v.last}, drawn from {drawn_from} "
                f"with the coin {_num(v.emit_coin)}"
            ],
            hoverinfo="text",
            name=FATE_NAMES[v.last],
        )
    depth = max(node_depths(v.parents))
    rows = 1 - min(y for _, y in pos)  # leaves, top to bottom
    fig.update_layout(
        title=title or f"The draft tree: {n} nodes, depth {depth}",
        height=int(min(620, max(280, 60 + 34 * rows))),
        margin={"l": 20, "r": 20, "t": 60, "b": 20},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "right", "x": 1},
        hovermode="closest",
    )
    fig.update_xaxes(
        title="depth",
        tickmode="linear",
        dtick=1,
        range=[-0.4, depth + (1.6 if whole else 0.6)],
        showgrid=False,
        zeroline=False,
    )
    fig.update_yaxes(visible=False, range=[-rows + 0.4, 0.8])
    return fig


Point = tuple[float, float]


def _link(
    fig: go.Figure, points: list[Point], width: float, colour: str, name: str, dash: str = ""
) -> None:
    """Line segments: points taken in pairs (parent, child)."""
    xs: list[float | None] = []
    ys: list[float | None] = []
    for a, b in zip(points[::2], points[1::2], strict=True):
        xs += [a[0], b[0], None]
        ys += [a[1], b[1], None]
    line = {"width": width, "color": colour} | ({"dash": dash} if dash else {})
    fig.add_scatter(
        x=xs, y=ys, mode="lines", line=line, hoverinfo="skip", showlegend=False, name=name
    )


def _edges(fig: go.Figure, frame: TreeFrame, pos: list[Point]) -> None:
    """Thin grey edges, then the accepted path (as far as told) bold."""
    v = frame.verdict
    depths = node_depths(v.parents)
    on_path = {i for i in v.path if frame.reveal is None or depths[i] <= frame.reveal}
    for bold in (False, True):
        points = []
        for i, parent in enumerate(v.parents):
            if (i in on_path) == bold:
                points += [pos[parent + 1], pos[i + 1]]
        if bold:
            _link(fig, points, 5, FATE_COLOURS["accepted"], "accepted path")
        else:
            _link(fig, points, 1.5, "#CCCCCC", "edges")


def _nodes(fig: go.Figure, frame: TreeFrame, pos: list[Point]) -> None:
    """One marker trace per fate, each node's index in customdata."""
    colours = {**FATE_COLOURS, "unreached": UNREACHED_COLOUR, "pending": PENDING_COLOUR}
    for fate in ("accepted", "rejected", "unreached", "pending"):
        nodes = [i for i in range(len(frame.labels)) if _fate(frame, i) == fate]
        if not nodes:
            continue
        fig.add_scatter(
            x=[pos[i + 1][0] for i in nodes],
            y=[pos[i + 1][1] for i in nodes],
            mode="markers+text",
            marker={"size": 15, "color": colours[fate], "line": {"width": 1, "color": "white"}},
            text=[_short(frame.labels[i]) for i in nodes],
            textposition="top center",
            hovertext=[node_hover(frame, i) for i in nodes],
            hoverinfo="text",
            name=FATE_NAMES[fate],
            customdata=nodes,
        )
