"""The log: the event catalog's storage seam and everything folded from a log.

``store`` (the ``EventStore`` seam), ``codec`` (JSON lines), ``projections``
and ``state`` (pure folds and what they produce), ``streaming`` (a session's
protocol stream), ``session_list`` and ``usage`` (reads across sessions).
May import: ``helix_agents.errors``, ``.events``, ``.messages``, ``.ids``,
``.protocol``, ``._aio``. Nothing here performs a side effect but reads.
"""
