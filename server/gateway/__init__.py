"""The HTTP gateway: the Starlette app speaking the protocol.

``app`` (``create_http_app``), ``sessions`` (``GET /sessions``), ``openapi`` (the document,
generated from the protocol's structs). The inspector it mounts lives in ``helix_agents.server.ui``.
"""
