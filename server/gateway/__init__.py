"""The HTTP gateway: the Starlette app speaking the protocol.

``app`` (``create_http_app``), ``routes`` (the route table, ``ENDPOINTS``),
``handlers`` and ``sessions`` (what the routes answer), ``middleware`` (errors,
auth, body limit), ``context`` (what the handlers serve from), ``responses``
(JSON and the error shape), ``openapi`` with ``openapi_paths`` and
``openapi_components`` (the document, from the table and the protocol's
structs). The inspector it serves lives in ``helix_agents.server.ui``.
"""
