"""``spate status``: a job as an operator needs it, as a table, live, or as JSON."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import trio

from spate._ops import JobStatus, read_status, require_job

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = ["render_status", "show_status"]


def _age(seconds: float | None) -> str:
    # How long ago the progress record was last written: a stuck split's age keeps growing.
    if seconds is None:
        return "-"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole // 60 % 60:02d}m"


_REASON_WIDTH = 61
"""Characters of a failure reason the table shows: 80 columns less the split id and a space."""


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def render_status(status: JobStatus, *, limit: int = 200) -> RenderableType:
    """A rich renderable of ``status``: plan, leader, workers, then splits (quarantined first).

    Made to fit an 80-column terminal: every split is one line, and what does not fit (a long
    id, a long failure reason) is cut with an ellipsis (``--json`` has everything whole). Why
    each failed split failed (quarantined first) follows the splits, one line each.
    """
    from rich import box
    from rich.console import Group
    from rich.markup import escape
    from rich.table import Table

    if not status.exists:
        return (
            f"[yellow]job {status.job!r} has no plan record yet (its first worker is "
            "starting?)[/yellow]"
        )
    counts = status.counts()
    # Two short lines, not one long one: each fits 80 columns for any reasonable job name.
    header = (
        f"[bold]{status.job}[/bold] · plan generation {status.generation} · {status.finality} "
        f"· leader: {status.leader or '[red]none[/red]'}\n"
        f"{len(status.splits)} splits: {counts['completed']} completed, "
        f"{counts['owned']} held, {counts['runnable'] - counts['owned']} runnable, "
        f"{counts['quarantined']} quarantined"
    )
    outcome = status.outcome()
    if outcome is not None and status.verdict is not None:
        # A finished job says how it ended, as every worker started now would return it.
        colour = "green" if status.verdict.all_complete else "red"
        header += f"\nverdict: [{colour}]{outcome}[/{colour}]"
    workers = Table(title="live workers", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("instance", "capacity", "holding", "leader"):
        workers.add_column(column)
    for worker in status.workers:
        workers.add_row(
            worker.instance,
            str(worker.max_in_flight),
            str(worker.holding),
            "★" if worker.leader else "",
        )
    # One line per split, in 80 columns (bounded widths, long values cut with an ellipsis);
    # why splits failed follows in a table of its own, where the reason has the width.
    splits = Table(
        title="splits", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, padding=0
    )
    for column, most in (
        # Content widths: with a space between columns they come to 78 (a watermark of 13
        # digits shows whole: a millisecond timestamp).
        ("split", 23),
        ("status", 11),
        ("owner", 9),
        ("epoch", 5),
        ("tries", 5),
        ("watermark", 13),
        ("age", 6),
    ):
        splits.add_column(column, no_wrap=True, overflow="ellipsis", max_width=most)
    reasons = Table(
        title="why they failed (the last failure; --json has it whole)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=0,
    )
    reasons.add_column("split", no_wrap=True, overflow="ellipsis", min_width=18, max_width=18)
    reasons.add_column("reason", no_wrap=True, overflow="ellipsis")
    ordered = status.ordered_splits()
    for split in ordered[:limit]:
        shown = split.display_status
        if split.retrying(status.read_at_ms):
            shown = "retrying"  # held, its handler failed: it runs again after a backoff
        colour = {
            "quarantined": "red", "completed": "green", "held": "cyan", "retrying": "yellow"
        }.get(shown, "white")  # fmt: skip
        # A residual sits under its parent, indented by how deep it was split off.
        depth = status.depth(split)
        name = f"{'  ' * (depth - 1)}└ {split.id}" if depth else split.id
        if not split.seeded:
            name += " (not seeded yet)"
        splits.add_row(
            name,
            f"[{colour}]{shown}[/{colour}]",
            # The lease holder while held, else the last owner the record names.
            split.lease_owner or split.owner or "-",
            str(split.epoch),
            str(split.attempts),
            "-" if split.watermark is None else str(split.watermark),
            _age(split.age(status.read_at_ms)),
        )
        if split.reason and split.status != "completed":
            reasons.add_row(split.id, escape(_cut(" ".join(split.reason.split()), _REASON_WIDTH)))
    parts: list[RenderableType] = [header, workers, *_domains(status), *_loads(status), splits]
    if reasons.row_count:
        parts.append(reasons)
    if len(ordered) > limit:
        parts.append(f"… and {len(ordered) - limit} more (use --json for all)")
    if status.unreadable:
        parts.append(f"[red]unreadable records:[/red] {', '.join(status.unreadable)}")
    return Group(*parts)


LOAD_ROWS = 10
"""The hottest splits the load table shows (``--json`` has every split's)."""


def _loads(status: JobStatus) -> list[RenderableType]:
    """Each worker's load, capacity and place in the band, then the hottest splits.

    Only when some worker reports load (a job that reports none shows what it showed before).
    """
    from rich import box
    from rich.table import Table

    mean = status.load_mean()
    if mean is None:
        return []
    band = status.load_band
    table = Table(
        title=f"load · mean {mean:.4g}/s per unit of capacity · band ±{band:.0%}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for column in ("instance", "load/s", "capacity", "÷ mean", ""):
        table.add_column(column)
    for worker in status.workers:
        ratio = status.load_ratio(worker)
        outside = ratio is not None and abs(ratio - 1) > band
        table.add_row(
            worker.instance,
            "-" if worker.load is None else f"{worker.load:.4g}",
            f"{worker.capacity:g}",
            "-" if ratio is None else f"{ratio:.2f}",
            "[yellow]outside the band[/yellow]" if outside else "",
        )
    hottest = sorted(
        (s for s in status.splits.values() if s.load is not None),
        key=lambda s: (-(s.load or 0.0), s.id),
    )[:LOAD_ROWS]
    parts: list[RenderableType] = [table]
    if hottest:
        splits = Table(title="hottest splits", title_justify="left", box=box.SIMPLE_HEAD)
        for column in ("split", "load/s", "owner"):
            splits.add_column(column, no_wrap=True, overflow="ellipsis", max_width=40)
        for split in hottest:
            splits.add_row(split.id, f"{split.load:.4g}", split.lease_owner or "-")
        parts.append(splits)
    return parts


def _domains(status: JobStatus) -> list[RenderableType]:
    """The failure-domain table (only when some worker advertises a locality)."""
    from rich import box
    from rich.table import Table

    if not any(w.locality for w in status.workers):
        return []
    report = status.placement()
    table = Table(
        title=f"failure domains (tier {status.isolation_tier}) · blast radius "
        f"{report.blast_radius:.0%}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for column in ("domain", "workers", "splits held", "weight", "share"):
        table.add_column(column)
    for share in report.domains:
        table.add_row(
            share.domain or "(unknown)",
            str(share.workers),
            str(share.splits),
            str(share.weight),
            f"{share.share:.0%}",
        )
    return [table]


async def show_status(
    url: str,
    job: str,
    *,
    watch: bool = False,
    as_json: bool = False,
    interval: float = 1.0,
    isolation_tier: int = 0,
    load_band: float = 0.10,
) -> int:
    """Print the status of ``job`` in the store at ``url``.

    With ``watch``, refresh every ``interval`` seconds until cancelled. ``isolation_tier``
    picks the locality tier the failure-domain table groups workers by; ``load_band`` the
    band the load table judges workers' loads by (the fleet's ``Config.load_band``). The
    store is opened read-only: nothing is written, whatever TTL its namespace was made with.
    Raises :class:`~spate.ops.JobNotFound` (naming the jobs there) when the store holds no
    key of ``job``.
    """
    from spate_stores import open_store

    async with open_store(url, read_only=True) as store:
        await require_job(store, job)

        async def read() -> JobStatus:
            return await read_status(store, job, isolation_tier=isolation_tier, load_band=load_band)

        if as_json:
            while True:
                print(
                    json.dumps((await read()).to_json(), sort_keys=True),
                    flush=True,
                )
                if not watch:
                    return 0
                await trio.sleep(interval)
        from rich.console import Console

        console = Console()
        if not watch:
            console.print(render_status(await read()))
            return 0
        from rich.live import Live

        with Live(console=console, auto_refresh=False, screen=sys.stdout.isatty()) as live:
            while True:
                live.update(render_status(await read()), refresh=True)
                await trio.sleep(interval)
