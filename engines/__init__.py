"""The durable runtimes: Temporal (``temporal/``), DBOS (``dbos/``), their shared half.

The shared half is ``durable/``.

Their public homes are :mod:`helix_agents.temporal` and :mod:`helix_agents.dbos`;
the modules here are the engines' insides (``specs/temporal.md``, ``specs/dbos.md``).
"""
