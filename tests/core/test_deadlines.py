"""The deadline heap answers exactly what a scan of a dict of deadlines would."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from spate._core.deadlines import Deadlines

KEYS = st.sampled_from(["a", "b", "c", "d", "e"])
TIMES = st.integers(min_value=0, max_value=20).map(float)
ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), KEYS, TIMES),
        st.tuples(st.just("discard"), KEYS, TIMES),
        st.tuples(st.just("pop"), KEYS, TIMES),
    ),
    max_size=60,
)


@given(ACTIONS)
def test_the_heap_agrees_with_a_scan(actions: list[tuple[str, str, float]]) -> None:
    heap = Deadlines()
    oracle: dict[str, float] = {}
    for action, key, t in actions:
        if action == "set":
            heap.set(key, t)
            oracle[key] = t
        elif action == "discard":
            heap.discard(key)
            oracle.pop(key, None)
        else:
            due = list(heap.pop_due(t))
            expected = sorted((at, k) for k, at in oracle.items() if at <= t)
            assert sorted(due) == sorted(k for _, k in expected)
            assert [oracle[k] for k in due] == sorted(oracle[k] for k in due)  # in order
            for k in due:
                del oracle[k]
        assert heap.next() == min(oracle.values(), default=math.inf)
        assert len(heap) == len(oracle)
        assert all((k in heap) == (k in oracle) for k in "abcde")
