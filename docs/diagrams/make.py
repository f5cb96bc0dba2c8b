"""Draw the documentation's diagrams as SVG files next to this script (standard library only).

    python docs/diagrams/make.py            # rewrite the SVGs
    python docs/diagrams/make.py --check    # exit 1 if a committed SVG differs from its source

Why SVG written by hand: the site must render them with no network at view time (no CDN, no
JavaScript), GitHub shows them in the Markdown too, and the output is deterministic, so
tests/docs/test_diagrams.py can hold every committed file equal to what this script draws.
Every diagram shares one style (the palette and fonts below); the facts they draw come from
docs/protocol.md (keys, who reads what, the hand-over) and docs/splitting.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from xml.sax.saxutils import escape

HERE = Path(__file__).resolve().parent

SANS = "DejaVu Sans, Verdana, Helvetica, Arial, sans-serif"
MONO = "DejaVu Sans Mono, Menlo, Consolas, monospace"
INK = "#1f2933"
MUTED = "#52606d"
LINE = "#3e4c59"
PAPER = "#ffffff"

# One colour pair (fill, stroke) per meaning, the same in every diagram.
RUNNABLE = ("#e3f0fc", "#1e5fa8")
HELD = ("#fff4dc", "#b26b00")
COMPLETED = ("#e6f4e7", "#2e7d32")
QUARANTINED = ("#fde8e8", "#b3261e")
NEUTRAL = ("#f3f5f7", "#7b8794")
STORE = ("#efeafc", "#5b3fa8")


def width_of(text: str, size: float, mono: bool = False) -> float:
    """A generous estimate of a text's rendered width (DejaVu is among the widest fonts)."""
    return len(text) * size * (0.61 if mono else 0.6)


class Svg:
    """A small SVG builder: shapes and text appended in drawing order."""

    def __init__(self, width: int, height: int, title: str, desc: str) -> None:
        self.width, self.height = width, height
        self.parts: list[str] = [
            f"<title>{escape(title)}</title>",
            f"<desc>{escape(desc)}</desc>",
            "<defs>"
            + "".join(
                f'<marker id="arrow-{name}" viewBox="0 0 10 10" refX="9" refY="5" '
                f'markerWidth="8" markerHeight="8" orient="auto-start-reverse">'
                f'<path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>'
                for name, colour in (("ink", LINE), ("muted", MUTED))
            )
            + "</defs>",
            f'<rect width="{width}" height="{height}" fill="{PAPER}"/>',
        ]

    def add(self, element: str) -> None:
        """Append one raw SVG element."""
        self.parts.append(element)

    def text(
        self,
        x: float,
        y: float,
        text: str,
        *,
        size: float = 13,
        anchor: str = "middle",
        weight: str = "normal",
        colour: str = INK,
        mono: bool = False,
        italic: bool = False,
    ) -> None:
        """One line of text at ``(x, y)`` (``y`` is the baseline)."""
        font = MONO if mono else SANS
        style = ' font-style="italic"' if italic else ""
        self.add(
            f'<text x="{x:g}" y="{y:g}" font-family="{font}" font-size="{size:g}" '
            f'font-weight="{weight}" fill="{colour}" text-anchor="{anchor}"{style}>'
            f"{escape(text)}</text>"
        )

    def lines(
        self, x: float, y: float, lines: Iterable[str], *, gap: float = 16, **kwargs: object
    ) -> None:
        """Several lines of text, ``gap`` apart, starting at baseline ``y``."""
        for i, line in enumerate(lines):
            self.text(x, y + i * gap, line, **kwargs)  # type: ignore[arg-type]

    def box(
        self,
        x: float,
        y: float,
        w: float,
        h: float,
        colours: tuple[str, str],
        *,
        radius: float = 10,
        dash: bool = False,
        stroke_width: float = 2,
    ) -> None:
        """A rounded rectangle filled and stroked with a palette pair."""
        fill, stroke = colours
        dashes = ' stroke-dasharray="6 4"' if dash else ""
        self.add(
            f'<rect x="{x:g}" y="{y:g}" width="{w:g}" height="{h:g}" rx="{radius:g}" '
            f'fill="{fill}" stroke="{stroke}" stroke-width="{stroke_width:g}"{dashes}/>'
        )

    def arrow(
        self,
        points: list[tuple[float, float]],
        *,
        colour: str = LINE,
        marker: str = "ink",
        dash: bool = False,
        curve: bool = False,
        both: bool = False,
        width: float = 1.8,
    ) -> None:
        """A line through ``points`` (or a curve: start, control, end) ending in an arrowhead."""
        (x0, y0), rest = points[0], points[1:]
        if curve:  # one quadratic curve through a control point: [start, control, end]
            (cx, cy), (x1, y1) = rest
            d = f"M{x0:g},{y0:g} Q{cx:g},{cy:g} {x1:g},{y1:g}"
        else:
            d = f"M{x0:g},{y0:g} " + " ".join(f"L{x:g},{y:g}" for x, y in rest)
        dashes = ' stroke-dasharray="5 4"' if dash else ""
        start = f' marker-start="url(#arrow-{marker})"' if both else ""
        self.add(
            f'<path d="{d}" fill="none" stroke="{colour}" stroke-width="{width:g}"{dashes}'
            f'{start} marker-end="url(#arrow-{marker})"/>'
        )

    def label(
        self,
        x: float,
        y: float,
        lines: list[str],
        *,
        size: float = 12.5,
        anchor: str = "middle",
        colour: str = INK,
        gap: float = 15,
        patch: bool = False,
    ) -> None:
        """Lines of text; with ``patch``, on a white patch, legible where they cross a line."""
        if patch:
            w = max(width_of(line, size) * 0.93 for line in lines) + 8
            left = {"middle": x - w / 2, "start": x - 4, "end": x - w + 4}[anchor]
            h = gap * (len(lines) - 1) + size + 4
            self.add(
                f'<rect x="{left:g}" y="{y - size - 1:g}" width="{w:g}" height="{h:g}" '
                f'fill="{PAPER}" opacity="0.92"/>'
            )
        self.lines(x, y, lines, gap=gap, size=size, anchor=anchor, colour=colour)

    def render(self) -> str:
        """The SVG document."""
        head = (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" '
            f'height="{self.height}" viewBox="0 0 {self.width} {self.height}" role="img">'
        )
        return head + "\n" + "\n".join(self.parts) + "\n</svg>\n"


def state(
    svg: Svg,
    x: float,
    y: float,
    w: float,
    h: float,
    name: str,
    note: list[str],
    colours: tuple[str, str],
) -> None:
    """A state box: its name, and a short note under it."""
    svg.box(x, y, w, h, colours)
    svg.text(x + w / 2, y + 28, name, size=17, weight="bold", colour=colours[1])
    svg.lines(x + w / 2, y + 52, note, size=13, colour=MUTED, gap=17)


def split_lifecycle() -> Svg:
    """Runnable, held, completed, quarantined, and every edge between them."""
    svg = Svg(
        850,
        560,
        "The life of a split",
        "A split is runnable until claimed; held while one worker owns it; it ends completed, "
        "or quarantined after max_attempts. Hand-back, lease expiry and fail return a held "
        "split to runnable; requeue returns a quarantined one.",
    )
    rx, hx, w, top, bottom = 20, 470, 160, 90, 330
    left, right = rx + w, hx
    mid = (left + right) / 2
    # Where a split comes from.
    svg.lines(
        rx,
        24,
        ["planned: the leader seeds its record,", "or split off a held split (a residual)"],
        size=13,
        anchor="start",
        colour=MUTED,
        gap=17,
    )
    svg.arrow([(rx + w / 2, 50), (rx + w / 2, top - 2)])
    state(
        svg,
        rx,
        top,
        w,
        bottom - top,
        "RUNNABLE",
        ["no owner: waits", "for the worker", "it is assigned to"],
        RUNNABLE,
    )
    state(
        svg,
        hx,
        top,
        w,
        bottom - top,
        "HELD",
        ["one owner, one", "tenancy: the handler", "runs and commits"],
        HELD,
    )
    # runnable -> held
    svg.text(mid, 114, "claim: lease, then CAS (epoch + 1)", size=13, colour=HELD[1])
    svg.arrow([(left, 124), (right - 2, 124)], colour=HELD[1])
    # held -> runnable, three ways
    svg.lines(
        mid,
        158,
        ["hand-back: returned with a revocation", "pending; forced revocation; shutdown"],
        size=13,
        colour=RUNNABLE[1],
        gap=16,
    )
    svg.arrow([(right, 182), (left + 2, 182)], colour=RUNNABLE[1])
    svg.text(mid, 199, "no attempt; nothing replays if committed", size=12, colour=MUTED)
    svg.text(mid, 234, "lease expired: crashed, frozen, cut off", size=13, colour=RUNNABLE[1])
    svg.arrow([(right, 244), (left + 2, 244)], colour=RUNNABLE[1], dash=True)
    svg.text(mid, 261, "attempt + 1 unless the tenancy advanced", size=12, colour=MUTED)
    svg.text(mid, 296, "fail: the handler raised", size=13, colour=QUARANTINED[1])
    svg.arrow([(right, 306), (left + 2, 306)], colour=QUARANTINED[1])
    svg.text(mid, 323, "attempt + 1", size=12, colour=MUTED)
    # held: staying held
    svg.arrow([(hx + w, 118), (hx + w + 46, 134), (hx + w + 2, 150)], curve=True)
    svg.lines(
        hx + w + 34, 122, ["commit: the", "watermark moves"], size=12.5, anchor="start", gap=15
    )
    svg.arrow([(hx + w, 206), (hx + w + 46, 226), (hx + w + 2, 246)], curve=True, dash=True)
    svg.lines(
        hx + w + 34,
        196,
        [
            "returned, not completed,",
            "no revocation pending:",
            "backs off (1 s, doubling",
            "to about 1 min), then",
            "runs again, new handle",
        ],
        size=12.5,
        anchor="start",
        gap=15,
    )
    # held -> completed
    cy = 440
    svg.box(hx, cy, w, 84, COMPLETED)
    svg.text(hx + w / 2, cy + 30, "COMPLETED", size=17, weight="bold", colour=COMPLETED[1])
    svg.lines(hx + w / 2, cy + 54, ["done; its lease", "released"], size=13, colour=MUTED, gap=16)
    svg.arrow([(hx + 110, bottom), (hx + 110, cy - 2)], colour=COMPLETED[1])
    svg.lines(
        hx + 118,
        372,
        ["commit with", "completed=True"],
        size=13,
        anchor="start",
        colour=COMPLETED[1],
        gap=16,
    )
    # -> quarantined, and back
    svg.box(rx, cy, w, 84, QUARANTINED)
    svg.text(rx + w / 2, cy + 30, "QUARANTINED", size=17, weight="bold", colour=QUARANTINED[1])
    svg.lines(
        rx + w / 2,
        cy + 54,
        ["claimed by nobody;", "the job ends Stalled"],
        size=13,
        colour=MUTED,
        gap=16,
    )
    svg.arrow([(hx + 30, bottom), (rx + w + 2, cy + 40)], colour=QUARANTINED[1])
    svg.label(
        mid + 10,
        396,
        [
            "attempts reach max_attempts (4):",
            "the failing owner's own write,",
            "or the leader after an expiry",
        ],
        size=13,
        colour=QUARANTINED[1],
        patch=True,
        gap=16,
    )
    svg.arrow([(rx + 50, cy), (rx + 50, bottom + 2)], colour=RUNNABLE[1])
    svg.lines(
        rx + 58,
        376,
        ["spate requeue:", "attempts reset"],
        size=13,
        anchor="start",
        colour=RUNNABLE[1],
        gap=16,
    )
    svg.text(
        425,
        548,
        "Every change of owner, and every commit, is a compare-and-swap on the progress record.",
        size=12,
        colour=MUTED,
        italic=True,
    )
    return svg


def chip(svg: Svg, x: float, y: float, kind: str, text: str) -> float:
    """One access chip (writes / watches / reads); returns the x after it."""
    fill, stroke = {"writes": HELD, "watches": RUNNABLE, "reads": NEUTRAL}[kind]
    w = width_of(text, 12) * 0.92 + 14
    svg.add(
        f'<rect x="{x:g}" y="{y:g}" width="{w:g}" height="22" rx="11" fill="{fill}" '
        f'stroke="{stroke}" stroke-width="1.3"/>'
    )
    svg.text(x + w / 2, y + 15.5, text, size=12, colour=INK)
    return x + w + 6


Chips = list[list[tuple[str, str]]]


def job_keys() -> Svg:
    """The keys of one job, what each holds, and who writes, watches and reads it."""
    rows: list[tuple[str, str, list[str], Chips, Chips]] = [
        (
            "durable",
            "J.plan",
            ["fingerprint, generation,", "final?, the verdict"],
            [[("watches", "watches")], [("writes", "creates it on joining")]],
            [[("writes", "plans, raises the generation")], [("writes", "publishes the verdict")]],
        ),
        (
            "durable",
            "J.spec.<split>",
            ["descriptor, weight, locality", "(never changes)"],
            [[("reads", "reads it when claiming")]],
            [[("writes", "writes it once, planning")]],
        ),
        (
            "durable",
            "J.split.<split>",
            ["progress: epoch, owner, attempts,", "status, watermark, state"],
            [
                [("writes", "claims, commits, splits")],
                [("writes", "fails, hands back")],
                [("reads", "reads it when claiming")],
            ],
            [
                [("writes", "seeds, quarantines")],
                [("reads", "reads it when its owner changes")],
            ],
        ),
        (
            "durable",
            "J.assign.<instance>",
            ["generation, split ids,", "nudges, split requests"],
            [[("watches", "watches its own, only")]],
            [[("writes", "writes every worker's")]],
        ),
        (
            "durable",
            "J.lease.<split>",
            ["lease: owner, nonce, epoch", "(memory and NATS)"],
            [[("writes", "writes its own")], [("reads", "reads it when claiming")]],
            [[("watches", "watches all")]],
        ),
        (
            "ephemeral",
            "J.leader",
            ["owner, nonce, generation"],
            [[("watches", "watches")], [("writes", "creates it to be elected")]],
            [[("writes", "holds it")]],
        ),
        (
            "ephemeral",
            "J.worker.<instance>",
            ["presence; on memory and NATS,", "the session of its leases"],
            [[("writes", "announces itself, renews")], [("reads", "reads a lease owner's")]],
            [[("watches", "watches all")]],
        ),
        (
            "ephemeral",
            "J.split.<split>",
            ["lease: owner, nonce, epoch", "(etcd: under the session)"],
            [[("writes", "writes its own")], [("reads", "reads it when claiming")]],
            [[("watches", "watches all")]],
        ),
    ]
    key_x, worker_x, leader_x = 20, 290, 555
    width = 820
    band = 30
    heights = [max(len(wk), len(ld), 2) * 26 + 14 for _, _, _, wk, ld in rows]
    height = 104 + sum(heights) + 2 * band + 112
    svg = Svg(
        width,
        height,
        "The keys a job keeps, and who reads which",
        "Every key of job J, grouped by keyspace, with what each worker and the leader write, "
        "watch and read. Nobody watches progress records: a plain commit is delivered to "
        "nobody.",
    )
    svg.text(20, 26, "Legend:", size=13, anchor="start", colour=MUTED)
    x = chip(svg, 84, 10, "writes", "writes")
    x = chip(svg, x, 10, "watches", "watches: hears every change")
    chip(svg, x, 10, "reads", "reads: one point read")
    svg.text(key_x, 72, "key (J: the job)", size=14, weight="bold", anchor="start")
    svg.text(worker_x, 72, "every worker, for itself", size=14, weight="bold", anchor="start")
    svg.text(leader_x, 72, "the leader, besides", size=14, weight="bold", anchor="start")
    svg.add(f'<line x1="20" y1="82" x2="{width - 20}" y2="82" stroke="{LINE}" stroke-width="1.2"/>')
    y = 88
    current = ""
    for (keyspace, key, record, worker, leader), h in zip(rows, heights, strict=True):
        if keyspace != current:
            current = keyspace
            colours = NEUTRAL if keyspace == "durable" else STORE
            svg.box(20, y + 4, width - 40, band - 8, colours, radius=4, stroke_width=1)
            tag = (
                "DURABLE keyspace: never expires"
                if keyspace == "durable"
                else "EPHEMERAL keyspace: lives as long as its writer's session"
            )
            svg.text(30, y + 20, tag, size=12.5, weight="bold", anchor="start", colour=colours[1])
            y += band
        svg.text(key_x + 4, y + 22, key, size=14, weight="bold", anchor="start", mono=True)
        svg.lines(key_x + 4, y + 42, record, size=12, anchor="start", colour=MUTED, gap=15)
        for column, lines in ((worker_x, worker), (leader_x, leader)):
            for i, line in enumerate(lines):
                cx: float = column
                for kind, text in line:
                    cx = chip(svg, cx, y + 7 + i * 26, kind, text)
        y += h
        svg.add(f'<line x1="20" y1="{y - 4:g}" x2="{width - 20}" y2="{y - 4:g}" stroke="#d9e2ec"/>')
    notes = [
        "A follower lists nothing: it watches three keys (leader, plan, its own assignment)",
        "and reads the splits it is given. Nobody watches a progress record, its owner included:",
        "a plain commit is delivered to nobody. The leader lists the whole job, in pages, when",
        "it takes over and at each reconcile. spate status reads every key (two listings);",
        "spate requeue writes a quarantined split's progress record and the plan record.",
    ]
    svg.lines(20, y + 22, notes, size=13, anchor="start", colour=MUTED, gap=18)
    return svg


def hand_over() -> Svg:
    """The graceful hand-over of one split from worker A to worker B, message by message."""
    lanes = {"A": 90, "store": 315, "leader": 530, "B": 735}
    steps: list[tuple[str, str, list[str], str]] = [
        ("store", "leader", ["watch: worker.B appears"], "ink"),
        ("leader", "store", ["CAS assign.A without s,", "assign.B with s"], "ink"),
        (
            "store",
            "B",
            ["watch: assign.B names s; B reads", "split.s and its lease: held by A"],
            "muted",
        ),
        ("store", "A", ["watch: assign.A lacks s:", "revoke_requested is set"], "ink"),
        ("A", "store", ["commit: CAS split.s;", "the handler returns"], "ink"),
        ("A", "store", ["hand-back: CAS split.s,", "owner cleared"], "ink"),
        ("A", "store", ["delete the lease of s"], "ink"),
        ("store", "leader", ["watch: the lease is gone;", "read split.s: released"], "ink"),
        ("leader", "store", ["nudge: CAS assign.B", "(ready: s)"], "ink"),
        ("store", "B", ["watch: assign.B; B reads", "split.s and its lease: free"], "ink"),
        ("B", "store", ["claim: create the lease, then", "CAS split.s (epoch + 1)"], "ink"),
    ]
    step_h = 54
    top = 92
    end = top + step_h * len(steps) + 12
    height = end + 170
    svg = Svg(
        820,
        height,
        "The graceful hand-over of a split",
        "Worker A holds split s; worker B joins. The leader moves s in the assignment records, "
        "A's handler commits and returns, A hands s back and drops its lease, the leader nudges "
        "B, and B claims s and resumes from A's last commit: nothing replayed, no attempt used.",
    )
    heads = {
        "A": ("worker A", HELD),
        "store": ("the store", STORE),
        "leader": ("the leader", NEUTRAL),
        "B": ("worker B", RUNNABLE),
    }
    for name, x in lanes.items():
        head, colours = heads[name]
        svg.box(x - 70, 16, 140, 44, colours)
        svg.text(x, 44, head, size=15, weight="bold", colour=colours[1])
        svg.add(
            f'<line x1="{x}" y1="60" x2="{x}" y2="{end}" '
            f'stroke="{colours[1]}" stroke-width="1.5" stroke-dasharray="4 4"/>'
        )
    svg.label(lanes["A"], 82, ["holds split s"], size=12.5, colour=MUTED, patch=True)
    for i, (src, dst, text, marker) in enumerate(steps):
        y = top + step_h * i + 40
        x0, x1 = lanes[src], lanes[dst]
        svg.arrow(
            [(x0, y), (x1 + (-6 if x1 > x0 else 6), y)],
            marker=marker,
            colour=LINE if marker == "ink" else MUTED,
            dash=marker == "muted",
        )
        svg.text(min(x0, x1) + 14, y + 17, f"{i + 1}", size=12.5, weight="bold", colour=MUTED)
        svg.label((x0 + x1) / 2, y - 7 - 16 * (len(text) - 1), text, size=13, patch=True, gap=16)
    svg.box(lanes["B"] - 80, end + 6, 160, 46, HELD, radius=6)
    svg.lines(lanes["B"], end + 25, ["B resumes at A's last", "commit: nothing replays"], size=12.5)
    notes = [
        "A few store round trips: no lease waited out, no attempt consumed. A handler that",
        "cannot reach a commit within Config.drain_deadline (10 s) is cancelled and the split",
        "moves anyway (its uncommitted tail replays on B). Shutting down (Ctrl-C) skips steps",
        "1 to 5: A cancels its handlers, hands every split back at once (steps 6 and 7 for all",
        "of them together), deletes its presence, and waits until other workers own them.",
    ]
    svg.lines(20, end + 76, notes, size=13, anchor="start", colour=MUTED, gap=18)
    return svg


def straggler_split() -> Svg:
    """A long split cut at a commit: the owner keeps the primary, a residual takes the rest."""
    svg = Svg(
        820,
        470,
        "A straggler split into primary and residual",
        "range-0007 covers records 0 to 16,000 and has committed 6,000. Asked to split, its "
        "owner commits, then cuts what is left: it keeps 0 to 11,000 (the primary) and a new "
        "split, the residual, takes 11,000 to 16,000 to an idle worker.",
    )
    x0, x1 = 30, 790
    scale = (x1 - x0) / 16000

    def at(record: int) -> float:
        return x0 + record * scale

    def bar(y: float, start: int, end: int, colours: tuple[str, str]) -> None:
        svg.box(at(start), y, at(end) - at(start), 36, colours, radius=4)

    def tick(x: float, y: float, text: str) -> None:
        svg.add(f'<line x1="{x:g}" y1="{y:g}" x2="{x:g}" y2="{y + 6:g}" stroke="{MUTED}"/>')
        svg.text(x, y + 20, text, size=12.5, colour=MUTED)

    # Before.
    svg.text(
        x0,
        28,
        "1. Worker A holds range-0007; the rest of the job is done, lanes sit idle",
        size=14,
        anchor="start",
        weight="bold",
    )
    bar(42, 0, 16000, HELD)
    svg.box(at(0), 42, at(6000) - at(0), 36, COMPLETED, radius=4)
    svg.text((at(0) + at(6000)) / 2, 65, "committed: watermark 6,000", size=13)
    svg.text(at(8500), 65, "left: 10,000 records", size=13)
    for record in (0, 6000, 16000):
        tick(at(record), 80, f"{record:,}")
    cut = at(11000)
    svg.add(
        f'<line x1="{cut:g}" y1="34" x2="{cut:g}" y2="86" stroke="{QUARANTINED[1]}" '
        'stroke-width="2.5" stroke-dasharray="6 4"/>'
    )
    svg.text(cut, 100, "11,000: the split point", size=12.5, colour=QUARANTINED[1], weight="bold")
    # The request and the cut.
    svg.text(
        x0,
        140,
        "2. The leader sets split_requested; A commits, then splits what is left",
        size=14,
        anchor="start",
        weight="bold",
    )
    svg.text(
        x0,
        166,
        'await split.split(primary=b"0:11000", residual=b"11000:16000")',
        size=13,
        anchor="start",
        mono=True,
    )
    svg.lines(
        x0,
        190,
        [
            "One fenced write, a CAS on split.range-0007, takes the primary, names the residual.",
            "The split point lies past all A processed. If A no longer owns the split: Fenced,",
            "and no residual ever exists.",
        ],
        size=13,
        anchor="start",
        colour=MUTED,
        gap=17,
    )
    # After.
    svg.text(x0, 268, "3. Two splits share the work left", size=14, anchor="start", weight="bold")
    bar(282, 0, 11000, HELD)
    svg.box(at(0), 282, at(6000) - at(0), 36, COMPLETED, radius=4)
    svg.text((at(0) + at(6000)) / 2, 305, "committed", size=13)
    svg.text((at(6000) + at(11000)) / 2, 305, "primary: A goes on", size=13)
    bar(282, 11000, 16000, RUNNABLE)
    svg.text((at(11000) + at(16000)) / 2, 305, "residual", size=13)
    for record in (0, 6000, 11000, 16000):
        tick(at(record), 320, f"{record:,}")
    svg.lines(
        x0,
        364,
        [
            'range-0007: its descriptor is now b"0:11000";',
            "a successor resumes it from the watermark",
        ],
        size=13,
        anchor="start",
        colour=MUTED,
        gap=17,
    )
    svg.lines(
        at(11000) - 30,
        364,
        [
            "range-0007.r… : a new split;",
            "the leader seeds its records,",
            "an idle worker claims it, once",
        ],
        size=13,
        anchor="start",
        colour=MUTED,
        gap=17,
    )
    svg.text(
        x0,
        450,
        "Asked again, either half splits the same way: in the end the fleet shares the straggler.",
        size=12.5,
        anchor="start",
        italic=True,
        colour=MUTED,
    )
    return svg


DIAGRAMS: dict[str, Callable[[], Svg]] = {
    "split-lifecycle.svg": split_lifecycle,
    "job-keys.svg": job_keys,
    "hand-over.svg": hand_over,
    "straggler-split.svg": straggler_split,
}


def main(argv: list[str]) -> int:
    """Write every diagram, or with ``--check`` report those that differ from their source."""
    check = "--check" in argv
    stale = []
    for name, draw in DIAGRAMS.items():
        path = HERE / name
        text = draw().render()
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"out of date (run python docs/diagrams/make.py): {', '.join(stale)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
