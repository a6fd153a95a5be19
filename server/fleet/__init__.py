"""The NATS fleet: ``NatsAgentHost`` serving the protocol on NATS subjects with failover.

``host`` (the request edge: subscriptions, forwarding to a session's lease holder),
``leases`` (``LeaseKeeper``: the session leases in a JetStream KV bucket), ``takeover``
(``OrphanTakeover``: the scan that claims and resumes sessions whose host died).
"""
