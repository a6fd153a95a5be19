"""The runtime: running sessions on an event store.

``executor`` (``AgentExecutor``), ``runs`` (the owner of running sessions),
``run_loop`` (``SessionRun``, one run of a session's loop), ``writer`` (its one
gateway to the log), ``tool_runner``, ``env``, ``service`` (the remote-agent
protocol implemented once), ``starts``, ``recovery``, ``handle``, ``inprocess``
(the in-process transport), ``run_sync``.
"""
