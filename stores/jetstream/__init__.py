"""The JetStream store's room: :class:`~helix_agents.stores.JetStreamEventStore` and its parts.

``store.py`` holds them together; ``wire.py`` (names, headers, decoding,
plain stream requests), ``append.py`` (compare-and-append publishes),
``reads.py`` (batched direct gets), ``watch.py`` (the store-wide consumer that
rings the tails), ``index.py`` (the session search index), ``inbox.py`` (the
long-lived request inbox, shared with the fleet's leases). The public home is
:mod:`helix_agents.stores`.
"""
