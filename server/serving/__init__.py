"""Serving a process under load and hostile clients: limits, graceful shutdown, the collector.

``limits`` (the bounds' defaults; the ``/sse`` stream cap), ``protocols`` (uvicorn's
protocols bounded: connection cap, head size, header, body and write timers) built on
``bounded`` (the mixin both share) with ``h11_protocol`` and ``httptools_protocol`` (each
parser's hooks) and ``writes`` (coalesced writes), ``descriptors`` (room in the open-file
limit; quiet accept errors), ``graceful`` (a bounded drain on SIGTERM), ``collector``
(tuning the cyclic garbage collector), ``allocator`` (glibc's mmap threshold fixed, so
freed memory returns).
"""
