"""The ``helix-agents`` command line: one module per command family.

``main`` (the parser and dispatch), ``commands`` (serve, host, openapi, replay --rerun),
``chat``, ``demo`` and ``demo_hitl``, ``sessions``, ``replay`` and ``timeline`` (reading logs),
``rerun`` and ``recording`` (``replay --rerun``: what it answers from the recording).
"""
