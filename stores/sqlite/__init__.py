"""The SQLite store's room: :class:`~helix_agents.stores.SqliteEventStore` and its parts.

``store.py`` holds them together; ``schema.py`` (the file's schema and
connections), ``commit.py`` (the group-commit writer), ``reads.py`` (reads and
the poller's probe), ``integrity.py`` (the commit counter, high-water mark and
file check), ``index.py`` (the session search index), ``batched.py`` (calls
batched onto worker threads). The public home is :mod:`helix_agents.stores`.
"""
