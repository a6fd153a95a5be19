"""Durable runtimes' shared half: a session's run as durable steps over one log.

An engine (``helix_agents.temporal``, ``helix_agents.dbos``) supplies the workflow that
drives the steps and records their results; :class:`DurableSteps` does the
work of each step on the session's log, exactly once (``specs/temporal.md``).
What the engines share besides: the service (``service.py``), the options'
base (``options.py``, ``DurableOptions``) and the worker's shape
(``worker.py``, ``DurableWorker``).
"""
