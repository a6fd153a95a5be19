"""The NATS fleet: ``NatsAgentHost`` serving the protocol on NATS subjects with failover.

``host`` (the request edge: subscriptions, forwarding to a session's lease holder),
``runtime`` (``NatsRuntime``: the server's runtime, taking a session's lease around its runs),
``leases`` (``LeaseKeeper``: the session leases in a JetStream KV bucket), ``running``
(``RunningIndex``: the sessions a run of which may be under way, in a KV bucket), ``takeover``
(``OrphanTakeover``: the scan of that index that claims and resumes sessions whose host died).
"""
