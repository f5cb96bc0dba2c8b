"""Where a commit's CPU goes, and a coordinator step's: ``python -m bench --only commit --profile``.

Not a benchmark row: a breakdown to read next to one. Two tables per run.

1. **One commit on the memory store.** One split held by :func:`spate.run_worker`; its handle
   commits op after op, in rounds interleaved with rounds of bare ``store.update`` of a value
   the size of the progress record. The process's CPU time (``time.process_time_ns``: this
   process only, whatever else the machine runs) over each round, per op, median over rounds,
   gives "CPU per commit" and "CPU per bare update"; their difference is what spate adds.
   Then one more round of commits runs under :mod:`cProfile`, and every function's own time is
   put in one bucket (the driver's generator round trips, cancel scopes, the fenced write's
   span and metrics, encoding, logging, the store call itself, ...): a builtin's or an attrs
   constructor's time goes to the bucket of whoever called it. Each bucket's share of the
   profiled time, times the unprofiled CPU per commit, is its µs. (cProfile charges every
   Python call a little, so buckets of many small calls read a little high.) The whole is
   measured twice: with no OpenTelemetry SDK installed (the API's no-op tracer), then with an
   SDK tracer and meter provider installed that record every span and measurement and export
   nothing (a span processor that drops each ended span: what a span costs to build).
2. **One coordinator step of a move** (``--only balance-move --profile``): the memory-store
   scenario of :mod:`bench.balance_move` (two workers, 1 ms injected per store call, virtual
   time) under cProfile, start to finished move, bucketed the same way, per step of the
   coordinators' machines (the mean step, over the scenario).

The figures are for reading side by side within one run (the machine is shared); ``--quick``
shrinks the counts.
"""

from __future__ import annotations

import cProfile
import pstats
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import attrs
import trio
import trio.testing

from bench._fleet import JOB, idle, planner_of
from bench._harness import Options
from spate import Config, SplitHandle, run_worker
from spate._core.records import Keys, ProgressRecord
from spate.store import Keyspace, Store, Won
from spate_stores.memory import MemoryServer, MemoryStore

__all__ = ["PROFILES", "Breakdown", "bucket_of", "profile_commit", "run_commit", "run_move"]

DURABLE = Keyspace.DURABLE
KEYS = Keys(JOB)

FuncKey = tuple[str, int, str]
"""pstats' key of a function: (file, line, name)."""

_CANCEL = frozenset(
    {
        "__enter__",
        "__exit__",
        "_close",
        "_might_change_registered_deadline",
        "recalculate",
        "_activate_cancel_status",
        "_exc_filter",
        "effective_deadline",
        "deadline",
        "shield",
        "cancelled_caught",
        "add_child",
        "remove_child",
        "_mark_abandoned",
        "parent",
        "children",
    }
)
"""Functions of trio's ``_run.py`` that open, move and close cancel scopes."""

_BUCKETS: Sequence[tuple[str, Callable[[str, str], bool]]] = (
    ("store call (memory store)", lambda f, n: f.endswith("spate_stores/memory.py")),
    ("span + metrics: OpenTelemetry", lambda f, n: "/opentelemetry/" in f),
    (
        "span + metrics: spate's fenced write",
        lambda f, n: (
            f.endswith(("spate/_write_spans.py", "spate/_metrics.py")) or "/spate/telemetry/" in f
        ),
    ),
    (
        "cancel scopes",
        lambda f, n: (
            (f.endswith("trio/_core/_run.py") and n in _CANCEL) or "trio._core._run.Cancel" in f
        ),
    ),
    ("Trio: scheduling, checkpoints", lambda f, n: "/trio/" in f or "trio." in f),
    ("logging", lambda f, n: "/logging/" in f),
    ("encoding, decoding", lambda f, n: f.endswith(("_core/records.py", "_core/codec.py"))),
    (
        "driver: flow round trips, key holds",
        lambda f, n: (
            f.endswith(("_runtime/driver.py", "_core/flow_engine.py", "_core/flows.py"))
            or (f.endswith("_runtime/loop.py") and n == "call_inline")
        ),
    ),
    ("group commit", lambda f, n: f.endswith("_runtime/group_commit.py")),
    (
        "commit flow, tenancy",
        lambda f, n: "/spate/_core/tenancy/" in f or f.endswith("_core/machine.py"),
    ),
    ("notice routing", lambda f, n: f.endswith("_core/notice_router.py")),
    ("fold into the view", lambda f, n: "/spate/_core/view/" in f),
    (
        "API: SplitHandle, Coordinator",
        lambda f, n: f.endswith(
            ("_runtime/worker.py", "_runtime/coordinator.py", "spate/_events.py")
        ),
    ),
    ("coordinator loop (inputs, steps)", lambda f, n: "/spate/_runtime/" in f),
    ("watch echo, other core", lambda f, n: "/spate/_core/" in f),
    ("spate_stores (wrappers)", lambda f, n: "/spate_stores/" in f or "/spate_testing/" in f),
)
"""Buckets, first match wins; a function in none of them counts as "other"."""


def _normal(file: str) -> str:
    return file.replace("\\", "/")


def bucket_of(key: FuncKey) -> str | None:
    """The bucket of a profiled function; None for one whose time goes to its callers."""
    file, _, name = key
    file = _normal(file)
    if file == "~" or file.endswith("/contextlib.py"):
        return None  # a builtin (isinstance, dict.get) or a context manager's plumbing
    if file.startswith("<attrs generated"):
        owner = file.split(" ")[-1].rstrip(">")  # "<attrs generated methods mod.Class>"
        if owner.startswith("trio."):
            return bucket_of((owner, 0, name))
        return None  # an attrs constructor or comparison: charged to its caller
    for label, matches in _BUCKETS:
        if matches(file, name):
            return label
    return "other"


def _attributed(stats: dict[FuncKey, Any]) -> dict[str, float]:
    """Own time per bucket; a builtin's own time split among its callers' buckets."""
    totals: dict[str, float] = {}

    def charge(key: FuncKey, seconds: float, depth: int = 0) -> None:
        label = bucket_of(key)
        if label is not None or depth > 5:
            label = label or "other"
            totals[label] = totals.get(label, 0.0) + seconds
            return
        callers = stats[key][4] if key in stats else {}
        whole = sum(entry[2] for entry in callers.values()) if callers else 0.0
        if not whole:
            totals["other"] = totals.get("other", 0.0) + seconds
            return
        for caller, entry in callers.items():
            charge(caller, seconds * entry[2] / whole, depth + 1)

    for key, entry in stats.items():
        charge(key, entry[2])
    return totals


class Breakdown:
    """Profiled own time per bucket, scaled to a measured per-unit CPU time."""

    def __init__(self, profile: cProfile.Profile, units: int, per_unit_us: float) -> None:
        stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
        self.totals = _attributed(stats)
        self.units = units
        self.per_unit_us = per_unit_us
        self.calls = stats

    def rows(self) -> list[tuple[str, float, float]]:
        """(bucket, µs per unit, share), largest first."""
        whole = sum(self.totals.values()) or 1.0
        rows = [
            (label, self.per_unit_us * seconds / whole, seconds / whole)
            for label, seconds in self.totals.items()
        ]
        return sorted(rows, key=lambda row: -row[1])

    def calls_of(self, name: str, file_end: str) -> int:
        """How many times the profiled function ``name`` of a file ending ``file_end`` ran."""
        return sum(
            entry[1]
            for (file, _, func), entry in self.calls.items()
            if func == name and _normal(file).endswith(file_end)
        )


def _print_table(title: str, breakdown: Breakdown, unit: str) -> None:
    print(f"\n{title}\n")
    print(f"| part | µs per {unit} | share |")
    print("|---|---:|---:|")
    for label, us, share in breakdown.rows():
        if share >= 0.005:
            print(f"| {label} | {us:.1f} | {share:.0%} |")
    print(f"| **all** | **{breakdown.per_unit_us:.1f}** | 100% |", flush=True)


# -- 1. one commit ---------------------------------------------------------------------------


@contextmanager
def _sdk_installed() -> Iterator[None]:
    """An SDK tracer and meter provider that record everything and export nothing."""
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

    class Drop(SpanProcessor):
        """Ends every span and keeps nothing: a span's own cost, no exporter's."""

        def on_end(self, span: ReadableSpan) -> None:
            pass

    provider = TracerProvider()
    provider.add_span_processor(Drop())
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
    yield


async def _cpu_per_op(step: Callable[[], Any], ops: int) -> float:
    """The process's CPU time per awaited ``step()``, in µs."""
    began = time.process_time_ns()
    for _ in range(ops):
        await step()
    return (time.process_time_ns() - began) / ops / 1000


async def profile_commit(store: Store, *, ops: int, rounds: int) -> tuple[Breakdown, float]:
    """One worker's commits on ``store``, measured and profiled; and a bare update's CPU."""
    handles: list[SplitHandle] = []
    gained = trio.Event()

    async def handler(split: SplitHandle) -> None:
        handles.append(split)
        gained.set()
        await idle(split)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: run_worker(
                store,
                job=JOB,
                instance="profiled",
                planner=planner_of(1),
                handler=handler,
                config=Config(max_in_flight=1),
            )
        )
        with trio.fail_after(60):
            await gained.wait()
        handle = handles[0]
        watermark = 1
        await handle.commit(watermark)
        entry = await store.get(DURABLE, KEYS.split(handle.id))
        assert entry is not None
        value = entry.value
        created = await store.create(DURABLE, "raw.profile", value)
        assert isinstance(created, Won)
        revision = created.revision

        async def commit() -> None:
            nonlocal watermark
            watermark += 1
            await handle.commit(watermark)

        async def update() -> None:
            nonlocal revision
            result = await store.update(DURABLE, "raw.profile", value, revision)
            assert isinstance(result, Won)
            revision = result.revision

        await _cpu_per_op(commit, ops // 5)  # warm up
        await _cpu_per_op(update, ops // 5)
        ours: list[float] = []
        bare: list[float] = []
        for number in range(rounds):
            if number % 2:
                bare.append(await _cpu_per_op(update, ops))
                ours.append(await _cpu_per_op(commit, ops))
            else:
                ours.append(await _cpu_per_op(commit, ops))
                bare.append(await _cpu_per_op(update, ops))
        profile = cProfile.Profile()
        profile.enable()
        await _cpu_per_op(commit, ops)
        profile.disable()
        nursery.cancel_scope.cancel()
    return Breakdown(profile, ops, statistics.median(ours)), statistics.median(bare)


async def _commit_tables(ops: int, rounds: int, sdk: bool) -> None:
    async with MemoryStore(server=MemoryServer(), namespace="profile", ephemeral_ttl=10) as store:
        breakdown, bare = await profile_commit(store, ops=ops, rounds=rounds)
    how = "SDK installed, every span recorded" if sdk else "no OpenTelemetry SDK"
    _print_table(
        f"One commit on the memory store ({how}): {breakdown.per_unit_us:.1f} µs CPU, a bare "
        f"store.update {bare:.1f} µs, so +{breakdown.per_unit_us - bare:.1f} µs "
        f"(median of {rounds} rounds x {ops} ops, CPU of the process)",
        breakdown,
        "commit",
    )


def run_commit(options: Options) -> None:
    """Print the commit breakdown without, then with, an SDK installed."""
    ops, rounds = (2_000, 2) if options.quick else (10_000, 5)
    trio.run(_commit_tables, ops, rounds, False)
    with _sdk_installed():
        trio.run(_commit_tables, ops, rounds, True)


# -- 2. one coordinator step of a move -------------------------------------------------------


def run_move(options: Options) -> None:
    """Print the breakdown of the mean coordinator step of the memory-store move scenario."""
    from bench import balance_move

    async def scenario() -> None:
        await balance_move._memory_move()

    profile = cProfile.Profile()
    began = time.process_time_ns()
    profile.enable()
    trio.run(scenario, clock=trio.testing.MockClock(autojump_threshold=0))
    profile.disable()
    profiled_us = (time.process_time_ns() - began) / 1000
    # The same run without the profiler: what the scenario's CPU really is.
    began = time.process_time_ns()
    trio.run(scenario, clock=trio.testing.MockClock(autojump_threshold=0))
    plain_us = (time.process_time_ns() - began) / 1000
    probe = Breakdown(profile, 1, 1.0)
    steps = probe.calls_of("step", "spate/_core/machine.py") or 1
    breakdown = Breakdown(profile, steps, plain_us / steps)
    _print_table(
        f"One coordinator step of a move (memory store, 1 ms a call, virtual time): "
        f"{plain_us / steps:.1f} µs CPU, the mean over {steps} steps of both workers in the "
        f"scenario (start to finished move; {plain_us / 1000:.0f} ms CPU in all, "
        f"{profiled_us / 1000:.0f} ms profiled)",
        breakdown,
        "step",
    )


# -- 3. the record codec ---------------------------------------------------------------------


def _preconf_codec() -> tuple[Callable[[ProgressRecord], bytes], Callable[[bytes], ProgressRecord]]:
    """A progress record's codec on ``cattrs.preconf.json``, made to write the same bytes."""
    import base64
    import json

    from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
    from cattrs.preconf.json import make_converter

    from spate._core import records

    converter = make_converter(forbid_extra_keys=True)
    # The records' own rules (strict scalars, base64 bytes) over the preconf defaults.
    converter.register_structure_hook(int, records._strict_int)
    converter.register_structure_hook(str, records._strict_str)
    converter.register_structure_hook(float, records._strict_float)
    converter.register_structure_hook(bool, records._strict_bool)
    converter.register_structure_hook(bytes, records._bytes_from_b64)
    converter.register_unstructure_hook(bytes, lambda b: base64.b64encode(b).decode("ascii"))
    optional = records._OPTIONAL_FIELDS[ProgressRecord]
    header = make_dict_unstructure_fn(
        ProgressRecord,
        converter,
        state=override(omit=True),
        **{name: override(omit_if_default=True) for name in optional},  # type: ignore[arg-type]
    )
    structure = make_dict_structure_fn(ProgressRecord, converter, _cattrs_forbid_extra_keys=True)

    def encode(record: ProgressRecord) -> bytes:
        fields = header(record)
        fields["schema"] = records.PROGRESS_SCHEMA
        return json.dumps(fields, separators=(",", ":")).encode() + b"\n" + record.state

    def decode(data: bytes) -> ProgressRecord:
        end = data.index(b"\n")
        raw = json.loads(data[:end])
        raw["state"] = ""
        return attrs.evolve(structure(raw, ProgressRecord), state=data[end + 1 :])

    return encode, decode


def _per_call_us(fn: Callable[[], object], count: int, rounds: int = 5) -> float:
    """Median over ``rounds`` of the process's CPU per call of ``fn``, in µs."""
    times = []
    for _ in range(rounds):
        began = time.process_time_ns()
        for _ in range(count):
            fn()
        times.append((time.process_time_ns() - began) / count / 1000)
    return statistics.median(times)


def run_codec(options: Options) -> None:
    """Print a progress record's encode and decode: the direct path, the converter, preconf."""
    from spate._core import records

    record = ProgressRecord(
        id="s000001",
        epoch=3,
        status=records.Status.RUNNABLE,
        owner="worker-7",
        attempts=1,
        watermark=123_456,
        state=b"resume-state" * 4,
        completed=False,
        written_at_ms=1_764_000_000_000,
        advanced=True,
        owner_nonce="9f3c2a",
    )
    data = records.encode(record)
    key = KEYS.split(record.id)
    pre_encode, pre_decode = _preconf_codec()
    same = pre_encode(record) == data and pre_decode(data) == record
    count = 2_000 if options.quick else 20_000
    rows = [
        ("direct path (records.encode / decode)", lambda: records.encode(record),
         lambda: records.decode(ProgressRecord, key, data, split=record.id)),
        ("general path (cattrs Converter + json)", lambda: records._encode_general(record),
         lambda: records._decode_general(ProgressRecord, key, data, split=record.id)),
        ("cattrs.preconf.json + json", lambda: pre_encode(record), lambda: pre_decode(data)),
    ]  # fmt: skip
    print(f"\nA progress record ({len(data)} bytes): CPU per call, median of 5 x {count}")
    print(f"(the preconf converter writes the same bytes and reads the same record: {same})\n")
    print("| codec | encode µs | decode µs |")
    print("|---|---:|---:|")
    for label, enc, dec in rows:
        print(f"| {label} | {_per_call_us(enc, count):.2f} | {_per_call_us(dec, count):.2f} |")


PROFILES: dict[str, Callable[[Options], None]] = {
    "commit": run_commit,
    "balance-move": run_move,
    "codec": run_codec,
}
"""What ``--profile`` breaks down (``codec`` is a profile only: no benchmark of that name)."""
