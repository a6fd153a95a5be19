"""The ``helix-agents`` command line: one module per command.

``main`` (the parser, dispatch, and the small log commands: replay, export,
check), ``target`` (loading ``MODULE:ATTR``) and ``options`` (argument types),
``serve`` and ``serve_uvicorn``, ``host`` (the NATS fleet), ``worker`` (a
durable engine's worker), ``chat``, ``sessions``, ``openapi_cmd``, ``demos``
(``demo`` and ``demo hitl``), ``replay`` and ``timeline`` (reading logs),
``rerun`` and ``recording`` (``replay --rerun``: what it answers from the
recording), ``branches`` (``diff`` and ``eval``).
"""
