"""Placement: which live worker should run each split.

Pure: the incrementally kept index the leader solves, over its sticky state and passes.

- ``vocabulary.py``: placement's vocabulary (``Worker``, ``Placement`` with the ``load`` it
  balances, localities) and move helpers
- ``split_load.py``: the load a split puts on a worker, the one rule for it: its planned
  weight (at least 1) until loads are reported, then its load in placement's units
  (``LOAD_UNITS``, measured or not yet measured), which the leader's balance rounds pass
- ``index.py``: the leader's placement, the only one in production: kept incrementally
  (``PlacementIndex``: the inputs, the order of one solve and the change tracking, as a facade
  over the four parts below), or solved from scratch (``solve_placement``); property tests hold
  it equal to a batch reference model kept for them alone
  (``spate_testing/_placement_model.py``)
- ``affinity.py``: the index's affinity step: splits whose owner does not honour their affinity,
  placed on matching workers (``AffinityStep``)
- ``fill.py``: the index's fill: unowned splits to the least-loaded open domain and worker, from
  candidate heaps (``CandidateHeaps``)
- ``moves.py``: the index's improving moves: the spread across domains, the balance of workers,
  held splits kept out (``ImprovingMoves``)
- ``report.py``: the blast radius: how the job's weight spreads over failure domains
- ``state.py``: the index's sticky state: each split on its owner, per worker and per domain
  (loads, sorted splits, weight bins, the unowned, pinned and loose affinities), O(log n) per
  changed split (``StickyState``)
"""
