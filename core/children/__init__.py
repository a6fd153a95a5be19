"""Children: one sub-agent call, from its tool call to its tool result.

``tools`` (sub-agent tools, local or behind a transport), ``target`` (where a
child lives: its deterministic id, transport, limits), ``link`` (following a
child's stream, finishing, halting), ``call`` (``ChildCall``, the whole call),
``inprocess`` (``InProcessTransport``: a local child reached through its
executor's service, the protocol in process).
May import agents, the log and the runtime's writer and tool runner.
"""
