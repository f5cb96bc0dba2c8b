"""A worker's membership of the job: joining, its presence, leaving.

The startup sequence (joining the job), the presence record (the session on a per-key
store), the departure, and a leaving follower's wait for its splits' new owners.

- ``startup.py``: the startup sequence (session, probe, join, announce), its tries and backoff,
  and joining the job (``join_flow``)
- ``presence.py``: this worker's presence key: announce, renewal (the session on a per-key
  store), delete (``Presence``)
- ``departure.py``: leaving the job: resign, hand every split back at once, delete the presence
  key (``Departure``)
- ``handover.py``: a leaving follower's polling for where its handed-back splits went
  (``HandoverPoll``), and when they have (``handed_over``)
"""
