"""The EventStore conformance suite (``tests/store_conformance.py``) on JetStream.

Every test runs against a stream of its own on the session's nats-server
(``nats_server`` in ``tests/conftest.py``); JetStream's own specifics are in
``test_jetstream_store.py``.
"""

from __future__ import annotations

import pytest
from store_conformance import *  # noqa: F403 - the suite's tests, collected here


@pytest.fixture(params=[pytest.param("nats", marks=pytest.mark.nats)])
def store_backend(request: pytest.FixtureRequest) -> str:
    """The suite's backend here: JetStream on a real nats-server."""
    return str(request.param)
