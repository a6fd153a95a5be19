"""Serving a process under load and hostile clients: limits, graceful shutdown, the collector.

``limits`` (connection, header and body bounds; the bounded uvicorn protocols), ``graceful``
(a bounded drain on SIGTERM), ``collector`` (tuning the cyclic garbage collector).
"""
