"""How the demo shows itself: a live rich view on a terminal, plain progress lines elsewhere."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from spate._cli.demo.fleet import DemoResult, Display, Fleet
from spate._ops import JobStatus, read_status

if TYPE_CHECKING:
    from rich.console import Console, RenderableType


__all__ = ["Display", "LiveDisplay", "PlainDisplay", "print_result"]


class PlainDisplay:
    """Timestamped lines: events as they happen and a progress line every few seconds."""

    def __init__(self, print_line: object = print, every: float = 2.0) -> None:
        self._print = print_line
        self._every = every
        self._fleet: Fleet | None = None

    def _stamp(self) -> str:
        return f"[{self._fleet.elapsed():6.2f}s]" if self._fleet is not None else "[  --  ]"

    def event(self, message: str) -> None:
        """Print one event line."""
        self._print(f"{self._stamp()} {message}")  # type: ignore[operator]

    async def run(self, fleet: Fleet) -> None:
        """Print a progress line every few seconds."""
        self._fleet = fleet
        while True:
            await trio.sleep(self._every)
            stats = fleet.stats
            holders: dict[str, int] = {}
            for worker in stats.holders.values():
                holders[worker] = holders.get(worker, 0) + 1
            workers = " ".join(
                f"{w.name}:{w.state}({holders.get(w.name, 0)})" for w in fleet.workers.values()
            )
            residuals = f" ({_plural(len(stats.residuals), 'residual')})" if stats.residuals else ""
            self._print(  # type: ignore[operator]
                f"{self._stamp()} progress {stats.processed}/{fleet.dataset.total_records} "
                f"records folded (+{stats.replayed} replayed), {stats.commits} commits, "
                f"{len(stats.completed)}/{fleet.options.splits + len(stats.residuals)} splits "
                f"completed{residuals}; {workers}"
            )


class LiveDisplay:
    """A rich live view: workers and their splits, overall progress, the event stream."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._events: list[str] = []
        self._fleet: Fleet | None = None
        self._status: JobStatus | None = None

    def event(self, message: str) -> None:
        """Keep the event for the view's event pane."""
        stamp = f"{self._fleet.elapsed():6.2f}s" if self._fleet is not None else ""
        self._events.append(f"[dim]{stamp}[/dim] {message}")
        del self._events[:-12]

    async def run(self, fleet: Fleet) -> None:
        """Redraw a few times a second (from this task: no refresh thread)."""
        from rich.live import Live

        self._fleet = fleet
        with Live(
            self._render(), console=self._console, auto_refresh=False, transient=False
        ) as live:
            try:
                while True:
                    await trio.sleep(0.25)
                    try:
                        self._status = await read_status(fleet.current_store(), "spate-demo")
                    except Exception:
                        pass
                    live.update(self._render(), refresh=True)
            finally:
                # One last look at the store, so the final frame shows how the job ended.
                with trio.CancelScope(shield=True), trio.move_on_after(1):
                    self._status = await read_status(fleet.current_store(), "spate-demo")
                live.update(self._render(), refresh=True)

    def _render(self) -> RenderableType:
        from rich.console import Group
        from rich.panel import Panel
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        fleet = self._fleet
        if fleet is None:
            return Panel("starting the fleet…")
        stats = fleet.stats
        table = Table(expand=True, title="workers (as the store sees them)", title_justify="left")
        table.add_column("worker")
        table.add_column("state")
        table.add_column("lead")
        table.add_column(
            "splits (records done; the straggler and its residuals in magenta)", ratio=1
        )
        status = self._status
        by_owner: dict[str, list[str]] = {}
        if status is not None:
            for split in status.ordered_splits():
                if split.lease_owner is not None and split.status == "runnable":
                    done = stats.watermarks.get(split.id, 0)
                    name = stats.label(split.id).removeprefix("range-")
                    if stats.root(split.id) == fleet.dataset.straggler_id:
                        name = f"[magenta]{name}[/magenta]"  # the straggler and its residuals
                    by_owner.setdefault(split.lease_owner, []).append(f"{name}({done})")
        for worker in fleet.workers.values():
            colour = {
                "running": "green",
                "frozen": "cyan",
                "killed": "red",
                "leaving": "yellow",
                "left": "dim",
                "done": "blue",
            }.get(worker.state, "white")
            lead = "★" if status is not None and status.leader == worker.name else ""
            held = by_owner.get(worker.name, [])
            table.add_row(worker.name, f"[{colour}]{worker.state}[/{colour}]", lead, " ".join(held))
        total = fleet.dataset.total_records
        counts = status.counts() if status is not None else {}
        splits = max(
            fleet.options.splits + len(stats.residuals), len(status.splits) if status else 0
        )
        summary = (
            f"records folded {stats.processed}/{total} (+{stats.replayed} replayed) · "
            f"commits {stats.commits} · "
            f"fenced zombie writes {stats.fenced} · completed {counts.get('completed', 0)}"
            f"/{splits} · residuals {len(stats.residuals)} · "
            f"quarantined {counts.get('quarantined', 0)}"
        )
        completed = counts.get("completed", 0)
        progress = Table.grid(padding=(0, 1))
        progress.add_row(ProgressBar(total=splits, completed=completed, width=30), summary)
        events = Panel("\n".join(self._events) or "…", title="events", title_align="left")
        return Group(table, progress, events)


def print_result(result: DemoResult, console_print: object = print) -> None:
    """The closing figures, one per line (the same on a terminal and in CI logs)."""
    p = console_print
    stats = result.stats
    verdict = type(result.verdict).__name__ if result.verdict is not None else "none"
    lines = [
        *(
            [f"job: {result.job}" + (f" ({result.cleanup})" if result.cleanup else "")]
            if result.job
            else []
        ),
        f"verdict: {verdict}"
        + (f" (after requeueing {', '.join(result.requeued)})" if result.requeued else ""),
        f"check: {result.splits_checked} splits match a single-pass computation"
        + (
            f" (with their {_plural(result.residuals_checked, 'residual')}: the completed "
            "ranges tile every split's range exactly)"
            if result.residuals_checked
            else ""
        )
        if result.ok
        else f"check: FAILED — {len(result.problems)} problem(s)",
        f"time: {result.seconds:.1f} s",
        *_splitting(result),
        f"records folded: {stats.processed}, and {result.replayed} replayed after failures",
        f"commits: {stats.commits}; zombie writes refused by the fence: "
        f"{stats.fenced + result.late_writes.get('refused', 0)} "
        f"(late store writes refused {result.late_writes.get('refused', 0)}, landed "
        f"{result.late_writes.get('landed', 0)}; commits fenced {stats.fenced})",
        *_landed(result.late_writes.get("landed", 0)),
        f"acquisitions: {stats.gained}; resumed mid-split by another worker: {result.resumed}",
        f"handlers cancelled (lost or taken back): {stats.cancelled}; "
        f"poison failures: {stats.poison_hits}",
    ]
    if result.blast_radius is not None:
        before, after = result.blast_radius
        lines.append(
            f"blast radius (largest share of the job in one zone): {before:.0%} before a whole "
            "zone was lost, "
            + (f"{after:.0%} after its splits moved" if after is not None else "job done first")
        )
    if result.handover_seconds:
        lines.append(
            "graceful hand-over: " + ", ".join(f"{s:.2f} s" for s in result.handover_seconds)
        )
    if result.faults:
        lines.append(
            "faults injected: " + ", ".join(f"{k} {v}" for k, v in sorted(result.faults.items()))
        )
    lines.extend(f"  problem: {problem}" for problem in result.problems[:20])
    for line in lines:
        p(line)  # type: ignore[operator]


def _landed(landed: int) -> list[str]:
    """What the late writes that landed were: legal writes, not a hole in the fence."""
    if not landed:
        return []
    return [
        f"  landed {landed}: writes the frozen worker had sent reached the store when it woke "
        "and were still legal, since no other worker had written those keys in between (a "
        "split not yet taken over, its own worker record), so the store accepted them; every "
        "late write over a newer owner was refused, as the count above shows"
    ]


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _splitting(result: DemoResult) -> list[str]:
    """What splitting did for the straggler: the job's length against the least unsplit."""
    s = result.straggler
    if s is None:
        return []
    others = (
        f"; {_plural(s.others_split, 'other split')} "
        f"{'was' if s.others_split == 1 else 'were'} split too"
        if s.others_split
        else ""
    )
    least = s.least_without_splitting
    if s.started is None or least is None:
        return [f"splitting: straggler {s.id} never started{others}"]
    how = (
        f"{s.id} started at {s.started:.1f} s, and its {s.records} records take {s.alone:.1f} s "
        f"alone at the demo's pace of {s.batch} records per {s.batch_seconds:.3f} s"
        + (f", then the operator's fix took {s.fix:.1f} s" if s.fix else "")
        + "; failovers would only add to that"
    )
    if s.pieces <= 1:
        return [
            f"splitting: straggler {s.id} was not split{others}; the job took "
            f"{result.seconds:.1f} s, and the straggler alone could not have ended before "
            f"~{least:.0f} s",
            f"  (unsplit: {how})",
        ]
    split = f"split {_times(s.pieces - 1)}"
    if least <= result.seconds:
        # The faults, not the straggler, set the job's length: claim no saving.
        return [
            f"splitting: straggler {s.id} was {split}{others}; the job took "
            f"{result.seconds:.1f} s, and without splitting it would have taken at least "
            f"~{least:.0f} s (the faults, not the straggler, set its length)",
            f"  (without splitting: {how})",
        ]
    return [
        f"splitting: straggler {s.id} was {split}{others}; the job took "
        f"{result.seconds:.1f} s instead of at least ~{least:.0f} s without splitting",
        f"  (without splitting: {how})",
    ]
