"""A three-node ``nats-server`` JetStream cluster for tests, on loopback.

Each node is its own process with its own store directory, a client port and a
cluster (route) port picked free on 127.0.0.1, and routes to the other two::

    with NatsCluster.start(tmp_path) as cluster:
        store = await JetStreamEventStore.connect(cluster.url, replicas=3)
        cluster.kill("n2")  # SIGKILL that one node, by PID

:meth:`NatsCluster.start` returns once every node accepts connections and
every node's log names the JetStream meta leader (the cluster can create
replicated streams). Like :class:`nats_server.NatsServer` it is synchronous,
ends only the processes it started (by PID), and drains each node's stderr.
"""

from __future__ import annotations

import re
import socket
import subprocess
import threading
import time
from pathlib import Path
from types import TracebackType

from nats_server import START_TIMEOUT, nats_server_binary, stop_process
from servers import listen_port

__all__ = ["NatsCluster", "NatsNode"]

NODES = ("n1", "n2", "n3")
CLUSTER_NAME = "helix-test"

_META_LEADER = re.compile(rb"JetStream cluster new metadata leader|Self is new JetStream cluster")


class NatsNode:
    """One node of the cluster: its process, name, client URL and log."""

    def __init__(self, name: str, port: int, cluster_port: int, store_dir: Path) -> None:
        self.name = name
        self.port = port
        self.cluster_port = cluster_port
        self.store_dir = store_dir
        self.url = f"nats://127.0.0.1:{port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.meta_leader_known = threading.Event()
        self._log: list[bytes] = []

    def launch(self, routes: list[str]) -> None:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.process = process = subprocess.Popen(
            [
                nats_server_binary(),
                "--name",
                self.name,
                "-js",
                "--store_dir",
                str(self.store_dir),
                "-a",
                "127.0.0.1",
                "-p",
                str(self.port),
                "--cluster_name",
                CLUSTER_NAME,
                "--cluster",
                f"nats://127.0.0.1:{self.cluster_port}",
                "--routes",
                ",".join(routes),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

        def pump() -> None:
            # Drain stderr for the node's whole life, so it never blocks on a full pipe.
            assert process.stderr is not None
            for line in process.stderr:
                if len(self._log) < 2000:
                    self._log.append(line)
                if _META_LEADER.search(line):
                    self.meta_leader_known.set()

        threading.Thread(target=pump, name=f"nats-{self.name}-log", daemon=True).start()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def accepting(self) -> bool:
        """Whether the node greets a client connection with INFO."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as sock:
                sock.settimeout(1.0)
                return sock.recv(4) == b"INFO"
        except OSError:
            return False

    def port_taken(self) -> bool:
        """Whether the node exited because one of its ports was taken before it bound it."""
        return any(b"address already in use" in line for line in self._log)

    def log(self) -> str:
        return b"".join(self._log).decode(errors="replace")[-3000:]

    def kill(self) -> None:
        """SIGKILL this node: no shutdown, no leadership hand-off. Idempotent."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM this node, then SIGKILL if it lingers. Idempotent."""
        if self.process is not None:
            stop_process(self.process, timeout)


class _PortTaken(RuntimeError):
    """A node could not bind a port chosen for it (another process took it first)."""


class NatsCluster:
    """Three running ``nats-server -js`` nodes routed into one cluster; use :meth:`start`."""

    def __init__(self, nodes: list[NatsNode]) -> None:
        self.nodes = {node.name: node for node in nodes}
        self.url = ",".join(node.url for node in nodes)
        """Every node's client URL, comma-separated (what the store and the CLI take)."""

    @classmethod
    def start(cls, base_dir: Path, *, timeout: float = START_TIMEOUT) -> NatsCluster:
        """Start the nodes; return once all accept clients and know the meta leader.

        Raises:
            RuntimeError: a node exits, or the cluster is not ready within ``timeout``
                seconds (the message ends with the nodes' logs).
        """
        for attempt in range(3):
            try:
                return cls._start(base_dir / f"try{attempt}" if attempt else base_dir, timeout)
            except _PortTaken:
                continue
        return cls._start(base_dir / "try3", timeout)

    @classmethod
    def _start(cls, base_dir: Path, timeout: float) -> NatsCluster:
        nodes = [NatsNode(name, listen_port(), listen_port(), base_dir / name) for name in NODES]
        cluster = cls(nodes)
        try:
            for node in nodes:
                node.launch(
                    [f"nats://127.0.0.1:{peer.cluster_port}" for peer in nodes if peer is not node]
                )
            deadline = time.monotonic() + timeout
            for node in nodes:
                while not (node.meta_leader_known.is_set() and node.accepting()):
                    if not node.running:
                        if node.port_taken():
                            raise _PortTaken(f"nats node {node.name}: port taken\n{cluster.logs()}")
                        raise RuntimeError(f"nats node {node.name} exited:\n{cluster.logs()}")
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"nats cluster not ready:\n{cluster.logs()}")
                    node.meta_leader_known.wait(0.05)  # polling the node's own log
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def kill(self, name: str) -> None:
        """SIGKILL one node by PID."""
        self.nodes[name].kill()

    def logs(self) -> str:
        return "\n".join(f"--- {node.name}\n{node.log()}" for node in self.nodes.values())

    def stop(self) -> None:
        """Stop every node this cluster started. Idempotent."""
        for node in self.nodes.values():
            node.stop()

    def __enter__(self) -> NatsCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


if __name__ == "__main__":  # pragma: no cover - manual check: python tests/nats_cluster.py
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, NatsCluster.start(Path(tmp)) as cl:
        print(cl.url, [node.process.pid for node in cl.nodes.values() if node.process])
        print(cl.logs())
