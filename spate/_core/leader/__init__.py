"""What the leader does: election and its phase, the plan, placement, publishing, the verdict.

The facade is :class:`~spate._core.leader.leadership.Leadership`; what it does when a
worker joins or leaves is :mod:`~spate._core.leader.rebalance_policy` (when running splits
move) over :mod:`~spate._core.leader.placement_inputs` (what placement is fed) and
:mod:`~spate._core.leader.publisher` (the assignment written). Nothing here imports
:mod:`spate._core.tenancy`.

- ``leadership.py``: the leader's facade (``Leadership``): the order of one leader step, and the
  parts below, wired through their constructors
- ``phase.py``: the leader's phase, one value (``LeaderPhase``), and the table of its
  transitions (``TRANSITIONS``, see below)
- ``election.py``: election, the generation fence, renewal, resignation, deposition
  (``Election``)
- ``plan_writer.py``: the planner's runs and the records each answer becomes: specs, progress
  records, the plan record (``PlanWriter``)
- ``rebalance_policy.py``: when running splits move: the debounce, the join window, owed and
  unfinished rebalances, holds (``RebalancePolicy``; a new trigger calls ``owe()``)
- ``publisher.py``: publishing the assignment, nudging a follower whose split came free,
  carrying split requests (``AssignmentPublisher``)
- ``placement_inputs.py``: what placement is fed: the worker table, the grace windows of
  departed workers, each split's input (``PlacementInputs``)
- ``balance_rounds.py``: the balance rounds (``LoadBalancer``): every ``balance_interval``, the
  running splits moved by measured load (a move anchors the split on its target; the policy
  holds it for the cooldown), placement's load units, hot splits asked to split; a new leader's
  first round a full cooldown after it began leading (its predecessor's cooldowns); the decision
  itself is ``balance/`` (pure)
- ``split_requests.py``: the leader's requests that running splits split when lanes sit idle:
  when, whom, the backoff, the probe of a job whose handlers never split, and the workers that
  said they never split
- ``verdict.py``: the bounded job's verdict (``VerdictJudge``)
- ``job_listing.py``: a new leader's one listing of the job, and the moment its view holds all
  of it (``JobListing``)
- ``ownership.py``: the leader's point read of a split's progress record when a lease begins or
  ends a tenancy
- ``residuals.py``: the leader's seeding of the residuals it finds named in progress records
- ``assignment_writes.py``: the leader's assignment writes in flight, and the splits each
  anchors (``AssignmentWrites``)
- ``claim_deadline.py``: the workers set aside for placement: a live worker that claimed none of
  the free splits it was given for ``claim_deadline`` (a ghost presence record, a wedged
  process), tried again later, placed like any other once it claims (``ClaimDeadlines``)
"""
