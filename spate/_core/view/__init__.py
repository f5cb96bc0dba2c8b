"""The folded view of a job's two keyspaces: what this worker knows of the store.

Pure, no I/O, no clock: watch events, listings and point reads are folded here, and each
change is answered with the notices the machine routes (``notices``).

- ``view.py``: what this worker knows of the store (a follower's share, the leader's whole job):
  the per-keyspace folding of puts, deletions and listings, as a facade over the tables below
  (``View``)
- ``notices.py``: what a change to the view means: the notices it returns (``LeaseChanged``,
  ``PresenceGone``, ...)
- ``split_table.py``: the view's split table: each split's progress, spec and lease
  (``SplitState``), records seen before their split's, the leases each session's end expires,
  and the splits held aside by an unreadable record (``SplitTable``)
- ``worker_table.py``: the view's worker table: each worker's presence record, ``workers_seq``,
  and whose session lives (``WorkerTable``)
- ``split_counts.py``: the view's split counts by status and its near-quarantine set
  (``SplitCounts``)
- ``listing_fold.py``: how the view folds a listing: a watch's snapshot, a new leader's listing,
  a backstop's pages (``ListingFold``)
- ``revisions.py``: the view's revision bookkeeping: the revision each key was folded at,
  tombstones, the ``seq`` a listing starts from (``Revisions``)
- ``unreadable.py``: what the view does with a record it cannot read: a split's progress record
  or spec holds that split aside (quarantined, the reason naming the key), the plan record stops
  the leadership, the leader key blocks elections; said with how to repair
- ``vanished.py``:
- ``scopes.py``: who reads what: a follower's three exact watches, the leader's, and whether the
  view holds the whole job (``sees_job``)
- ``changes.py``: what moved among the leader's placement inputs (the view reports, the leader
  takes)
"""
