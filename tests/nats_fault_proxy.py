"""A loopback proxy that speaks the NATS client protocol and faults chosen messages.

:func:`nats_fault_proxy` listens on ``127.0.0.1`` at an ephemeral port and
forwards every connection to a real ``nats-server``. Both directions are
parsed into whole frames (a protocol line; for ``PUB``/``HPUB``/``MSG``/``HMSG``
the line and its payload), and each frame is forwarded whole, unless a planned
:class:`WireFault` takes it. The frames a fault can target (:data:`Target`):

- ``request``: a ``PUB``/``HPUB`` from a client to a subject under the RPC
  prefix (a control call of ``NatsRemoteAgentTransport`` to the hosts);
- ``reply``: a ``MSG``/``HMSG`` to a client on the reply subject of a
  ``request`` that passed: a host's answer;
- ``delivery``: a ``MSG``/``HMSG`` to a client whose reply subject is a
  JetStream ack (``$JS.ACK.``): a push consumer's delivery (the store's watch).

What a fault does (:data:`Kind`):

- ``drop``: the frame is not forwarded (lost on the way);
- ``duplicate``: it is forwarded twice;
- ``delay``: it is forwarded after ``seconds`` (the frames behind it on that
  connection wait too: TCP keeps order);
- ``reorder``: it is held back and forwarded right after the next frame of the
  same target on that connection (or after ``seconds`` when none comes);
- ``cut``: the connection is closed both ways instead, as when the client's
  node dies (``on_cut``, if set, is awaited first: a test kills the node
  there, so the frame dies with it); nats-py reconnects (to this proxy, or to
  a node of the cluster the server's ``INFO`` named).

Each target's frames are counted from the moment :meth:`NatsFaultProxy.play`
installs a plan, across connections; a fault fires on the frame whose index is
its ``nth``. ``fired`` lists the faults that fired, in order. Frames of other
kinds (``INFO``, ``PING``, ``SUB``, JetStream API requests ...) always pass.
Everything runs in the test's event loop, in the proxy's task group::

    async with nats_fault_proxy(server.url) as proxy:
        nc = await nats.connect(proxy.url)
        proxy.play([WireFault(target="delivery", kind="drop", nth=0)])
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

import anyio
import msgspec
from anyio.abc import SocketAttribute, SocketStream, TaskStatus

__all__ = ["Frame", "NatsFaultProxy", "WireFault", "nats_fault_proxy", "split_frames"]

Target = Literal["request", "reply", "delivery"]
Kind = Literal["drop", "duplicate", "delay", "reorder", "cut"]

_PAYLOAD_OPS = {b"PUB": 1, b"HPUB": 2, b"MSG": 1, b"HMSG": 2}  # how many size fields end the line


class WireFault(msgspec.Struct, frozen=True, kw_only=True):
    """One planned fault: ``kind`` on the ``nth`` frame (from 0) of ``target``."""

    target: Target
    kind: Kind
    nth: int = 0
    seconds: float = 0.05


@dataclass(frozen=True)
class Frame:
    """One whole protocol frame: its op (upper case), subject, reply subject, bytes."""

    op: bytes
    subject: bytes
    reply: bytes
    raw: bytes


def split_frames(buffer: bytearray) -> Iterator[Frame]:
    """Take every whole frame off the front of ``buffer`` (what is left is a partial one)."""
    while True:
        end = buffer.find(b"\r\n")
        if end < 0:
            return
        line = bytes(buffer[:end])
        parts = line.split()
        op = parts[0].upper() if parts else b""
        size_fields = _PAYLOAD_OPS.get(op)
        if size_fields is None:
            del buffer[: end + 2]
            yield Frame(op, b"", b"", line + b"\r\n")
            continue
        total = int(parts[-1])
        frame_end = end + 2 + total + 2
        if len(buffer) < frame_end:
            return
        # MSG <subject> <sid> [reply] <sizes>; PUB <subject> [reply] <sizes>
        fixed = 1 + (2 if op in (b"MSG", b"HMSG") else 1)
        reply = parts[fixed] if len(parts) > fixed + size_fields else b""
        raw = bytes(buffer[:frame_end])
        del buffer[:frame_end]
        yield Frame(op, parts[1], reply, raw)


@dataclass(eq=False)
class _Connection:
    client: SocketStream
    upstream: SocketStream
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)


class NatsFaultProxy:
    """Forwards NATS client connections to ``target``, faulting frames; see the module doc."""

    def __init__(self, target_host: str, target_port: int, *, rpc_prefix: bytes) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.rpc_prefix = rpc_prefix
        self.port = 0
        self.connections = 0
        """How many client connections were accepted."""
        self.fired: list[WireFault] = []
        """The faults that fired since the last :meth:`play`, in order."""
        self.seen: dict[str, int] = {}
        """Frames of each target since the last :meth:`play`."""
        self._plan: dict[tuple[str, int], WireFault] = {}
        self._live: set[_Connection] = set()
        self._serving = anyio.CancelScope()
        self._reply_subjects: set[bytes] = set()  # of the requests seen (bounded below)
        self.on_cut: Callable[[], Awaitable[None]] | None = None
        """Awaited when a ``cut`` fires, before the connection closes (e.g. kill the node)."""

    @property
    def url(self) -> str:
        """``nats://127.0.0.1:<port>``."""
        return f"nats://127.0.0.1:{self.port}"

    def play(self, plan: Iterable[WireFault]) -> None:
        """Install ``plan`` (replacing the last one) and count every target's frames afresh."""
        self._plan = {(fault.target, fault.nth): fault for fault in plan}
        self.fired = []
        self.seen = {}

    def stop_listening(self) -> None:
        """Close every connection and refuse new ones, as a dead node does."""
        self._serving.cancel()

    def cut_all(self) -> int:
        """Close every open connection, both sides; return how many."""
        live = list(self._live)
        for connection in live:
            connection.scope.cancel()
        return len(live)

    def classify(self, frame: Frame) -> Target | None:
        """Which target ``frame`` is, if any."""
        if frame.op in (b"PUB", b"HPUB"):
            if not frame.subject.startswith(self.rpc_prefix):
                return None
            if frame.reply:
                if len(self._reply_subjects) > 4096:
                    self._reply_subjects.clear()
                self._reply_subjects.add(frame.reply)
            return "request"
        if frame.op in (b"MSG", b"HMSG"):
            if frame.reply.startswith(b"$JS.ACK."):
                return "delivery"
            if frame.subject in self._reply_subjects:
                return "reply"
        return None

    def _fault_for(self, frame: Frame) -> tuple[Target | None, WireFault | None]:
        target = self.classify(frame)
        if target is None:
            return None, None
        nth = self.seen.get(target, 0)
        self.seen[target] = nth + 1
        fault = self._plan.get((target, nth))
        if fault is not None:
            self.fired.append(fault)
        return target, fault

    async def serve(self, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen and forward until cancelled; reports the port through ``task_status``."""
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        with self._serving:
            async with listener:
                self.port = listener.extra(SocketAttribute.local_port)
                task_status.started(self.port)
                await listener.serve(self._handle)

    async def _handle(self, client: SocketStream) -> None:
        self.connections += 1
        async with client:
            try:
                upstream = await anyio.connect_tcp(self.target_host, self.target_port)
            except OSError:
                return
            connection = _Connection(client=client, upstream=upstream)
            self._live.add(connection)
            try:
                async with upstream:
                    with connection.scope:
                        async with anyio.create_task_group() as tg:
                            tg.start_soon(self._pump, client, upstream, connection)
                            tg.start_soon(self._pump, upstream, client, connection)
            finally:
                self._live.discard(connection)

    async def _pump(
        self, source: SocketStream, sink: SocketStream, connection: _Connection
    ) -> None:
        """Forward ``source``'s frames to ``sink``, faulted; the end of either ends both."""
        buffer = bytearray()
        held: tuple[Target, Frame, float] | None = None  # a reordered frame, its target, deadline
        with contextlib.suppress(
            anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError
        ):
            while True:
                data = b""
                if held is None:
                    data = await source.receive()
                else:
                    with anyio.move_on_after(max(0.0, held[2] - anyio.current_time())):
                        data = await source.receive()
                    if not data:  # nothing came in time: the held frame goes alone
                        await sink.send(held[1].raw)
                        held = None
                        continue
                buffer.extend(data)
                for frame in split_frames(buffer):
                    target, fault = self._fault_for(frame)
                    out = [frame.raw]
                    if fault is not None:
                        if fault.kind == "cut":
                            if self.on_cut is not None:
                                await self.on_cut()  # the frame is still in flight meanwhile
                            connection.scope.cancel()
                            return
                        if fault.kind == "drop":
                            out = []
                        elif fault.kind == "duplicate":
                            out = [frame.raw, frame.raw]
                        elif fault.kind == "delay":
                            await anyio.sleep(fault.seconds)
                        elif fault.kind == "reorder" and held is None and target is not None:
                            held = (target, frame, anyio.current_time() + fault.seconds)
                            out = []
                    if held is not None and target == held[0] and held[1] is not frame:
                        out.append(held[1].raw)  # the held frame goes right after this one
                        held = None
                    if out:
                        await sink.send(b"".join(out))
        connection.scope.cancel()


@contextlib.asynccontextmanager
async def nats_fault_proxy(
    target_url: str, *, rpc_prefix: str = "helix.rpc."
) -> AsyncIterator[NatsFaultProxy]:
    """Run a :class:`NatsFaultProxy` to ``target_url``'s host and port; cut all on exit."""
    target = urlsplit(target_url)
    if not target.hostname or target.port is None:
        raise ValueError(f"need a URL with a host and a port, not {target_url!r}")
    proxy = NatsFaultProxy(target.hostname, target.port, rpc_prefix=rpc_prefix.encode())
    async with anyio.create_task_group() as tg:
        await tg.start(proxy.serve)
        try:
            yield proxy
        finally:
            proxy.cut_all()
            tg.cancel_scope.cancel()
