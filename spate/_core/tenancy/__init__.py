"""A worker's side of a split: coming to hold it, holding it, and every way that ends.

Claims, the tenancies and their fence, commits and splits (the owner's fenced writes),
revocations (giving a split back), quarantine, and the point reads a follower claims from.
Nothing here imports :mod:`spate._core.leader`: the two meet only in the records and in the
machine's wiring.

- ``phase.py``: each split's phase on this worker and the table of its transitions
  (``SplitPhases``): the one writer of the splits held, of those a flow is on, and of the
  claims in flight, which the rest reads as indexes; and its drain (``DrainPhases``), the one
  writer of the revocations open and forced
- ``claims.py``: what to claim and the claim itself (``Claims._claim_steps`` and its named
  sub-flows: the release race, the lease, the record CAS, adopting a late commit); ``Claims``
  holds the ``Tenancies`` a claim adds to, and builds its ``ClaimRetries`` over them
- ``claim_retries.py``: what a claim's failed write leaves to do: the split held back until its
  retry is due (``RETRY_AFTER_ERROR``), and a lease write of unknown outcome read back every
  beat (``UNSURE_LEASE_FOR``) (``ClaimRetries``)
- ``fencing.py``: the fence check every owner's write and load report shares (``refusal``):
  the split held here, and the tenancy a call names the one held now
- ``tenancies.py``: a held split (its record: ``Tenancy``): the self-fence on the session,
  stray leases, fail, release and hand-back (``Tenancies``); ``hold_owned``, the opening every
  owner's write shares
- ``commits.py``: the owner's commit: one fenced CAS, and what a lost one reads back (adopted
  when it holds this write, ``Fenced`` only when it holds another, unknown when the read fails)
- ``splitting.py``: the owner's split of a held split: one fenced write naming the residual
  whole; residual ids
- ``revocation.py``: drains and their deadlines (``Revocations``), and the table of drains the
  tenancies report to (``DrainTable``)
- ``point_reads.py``: a follower's point reads of an assigned split's records and of a lease's
  session; any worker's read of a key again when a guarded write found it moved (``reread``)
- ``load_reports.py``: this worker's load meters, one per held tenancy, and the bounded summary
  its presence renewal carries (``LoadReports``)
- ``quarantine.py``: the leader's quarantine of a split out of attempts: one fenced write
"""
