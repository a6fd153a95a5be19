"""Streams out of the server: ``/sse`` in the protocol's own format and the front-end formats.

``sse`` and ``sse_writer`` (the protocol's frames and the one writing machine), ``ag_ui`` and
``ai_sdk`` (projections of a log into AG-UI events and AI SDK UI messages), ``tree`` (what they
share), ``front_end`` (their ``GET /sse?format=`` streams), ``front_end_runs`` (``POST /sse``),
``closing`` (the open ``GET /sse`` streams a shutdown ends early).
"""
