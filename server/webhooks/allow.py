"""Which webhook URLs a server POSTs to: public addresses, and what ``--webhook-allow`` adds.

A URL must be ``http`` or ``https``, name a host and carry no credentials.
Its host is resolved, and it is refused if any address is loopback, private,
link-local, multicast, reserved, unspecified or otherwise not global, unless
that address is in an allowed network (``--webhook-allow 127.0.0.1/32``) or
the host is an allowed name (``--webhook-allow hooks.internal``). The check
runs at the start and again before each attempt, which then connects to the
address it checked (a name that resolves elsewhere later cannot redirect it).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

import anyio

from helix_agents.errors import AgentServerError, UsageError

__all__ = ["MAX_URL_LENGTH", "AllowList", "CheckedTarget", "check_url"]

MAX_URL_LENGTH = 2048
"""The longest webhook URL a start may name, in characters."""

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class AllowList:
    """The networks and host names allowed besides public addresses (``--webhook-allow``).

    Each entry is a CIDR (``10.1.0.0/16``), an address (``127.0.0.1``), or a host
    name (``hooks.internal``). Raises ``UsageError`` for an entry that is none.
    """

    def __init__(self, entries: Iterable[str] = ()) -> None:
        self.networks: list[IPNetwork] = []
        self.hosts: set[str] = set()
        for entry in entries:
            text = entry.strip()
            try:
                self.networks.append(ipaddress.ip_network(text, strict=False))
                continue
            except ValueError:
                pass
            name = text.lower().rstrip(".")
            if not name or any(c in name for c in "/:@ ") or not name.isascii():
                raise UsageError(f"--webhook-allow: {entry!r} is not a CIDR, an address or a host")
            self.hosts.add(name)

    def refusal(self, address: IPAddress) -> str | None:
        """Why ``address`` may not be POSTed to (None: it may)."""
        if any(address in network for network in self.networks):
            return None
        mapped = getattr(address, "ipv4_mapped", None)
        checked = mapped if mapped is not None else address
        for kind in ("loopback", "unspecified", "link_local", "multicast", "reserved", "private"):
            if getattr(checked, f"is_{kind}"):
                return kind.replace("_", "-")
        return None if checked.is_global else "non-global"


@dataclass(frozen=True)
class CheckedTarget:
    """A URL whose host resolved to allowed addresses: connect to ``address``."""

    url: SplitResult
    host: str
    port: int
    address: str

    def connect_url(self) -> str:
        """The URL with its host replaced by the checked address (``Host`` keeps the name)."""
        host = f"[{self.address}]" if ":" in self.address else self.address
        return self.url._replace(netloc=f"{host}:{self.port}").geturl()

    @property
    def host_header(self) -> str:
        """The ``Host`` header: the URL's own host and port."""
        return self.url.netloc


def _refuse(message: str) -> AgentServerError:
    return AgentServerError("INVALID_REQUEST", f"webhook URL refused: {message}")


def parse_url(url: str) -> tuple[SplitResult, str, int]:
    """``url`` split, its host and port; ``INVALID_REQUEST`` for a URL no webhook may have."""
    if len(url) > MAX_URL_LENGTH:
        raise _refuse(f"longer than {MAX_URL_LENGTH} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise _refuse(f"{exc}") from exc
    if parts.scheme not in ("http", "https"):
        raise _refuse(f"the scheme must be http or https, not {parts.scheme or 'none'!r}")
    if not parts.hostname:
        raise _refuse("it names no host")
    if parts.username is not None or parts.password is not None:
        raise _refuse("it must not carry credentials (they would be recorded in the log)")
    if parts.fragment:
        raise _refuse("it must not have a fragment")
    return parts, parts.hostname, port or (443 if parts.scheme == "https" else 80)


async def check_url(url: str, allow: AllowList) -> CheckedTarget:
    """Resolve ``url``'s host and check every address; the address to connect to.

    Raises ``AgentServerError`` ``INVALID_REQUEST`` naming why: a scheme other
    than http/https, no host, credentials, a host that does not resolve, or an
    address of a forbidden kind (loopback, private...) that ``allow`` does not allow.
    """
    parts, host, port = parse_url(url)
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        addresses = [literal]
    else:
        try:
            infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise _refuse(f"its host {host!r} does not resolve ({exc})") from exc
        found = (ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos)
        addresses = list(dict.fromkeys(found))
        if not addresses:
            raise _refuse(f"its host {host!r} resolves to no address")
    if host.lower().rstrip(".") not in allow.hosts:
        for address in addresses:
            why = allow.refusal(address)
            if why is not None:
                raise _refuse(
                    f"{host!r} is (or resolves to) {address}, a {why} address; a server "
                    "POSTs only to public addresses unless allowed (serve --webhook-allow)"
                )
    return CheckedTarget(url=parts, host=host, port=port, address=str(addresses[0]))
