"""``metrics_listen``: the address a network listener is given, written as exporters write it.

``HOST:PORT`` (an IPv4 address or a host name), ``[IPv6]:PORT``, or ``:PORT`` for every
interface (IPv4 and IPv6), as node_exporter's ``--web.listen-address=:9100``. Checked when the
settings load, so a bad value is one line and exit 2 before anything starts; whether the
address can be bound is only known when the daemon binds it.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

__all__ = ["ListenAddress", "parse_listen"]

#: A host name as RFC 1123 allows it: dot-separated labels of letters, digits and hyphens.
_HOSTNAME = re.compile(
    r"(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)"
    r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?"
)
_EXAMPLES = "use e.g. ':9464' (every interface), '0.0.0.0:9464', '[::1]:9464' or 'studio-1:9464'"


@dataclass(frozen=True, slots=True)
class ListenAddress:
    """Where to listen: ``host`` is ``""`` for every interface, else an IP literal or a name."""

    host: str
    port: int

    @property
    def every_interface(self) -> bool:
        """True for ``:PORT``."""
        return self.host == ""

    def __str__(self) -> str:
        if ":" in self.host:
            return f"[{self.host}]:{self.port}"
        return f"{self.host}:{self.port}"


def parse_listen(text: str) -> ListenAddress:
    """The address ``text`` names; ValueError with one line saying what is wrong otherwise."""
    value = text.strip()
    host, sep, port_text = value.rpartition(":")
    if not sep:
        raise ValueError(f"{text!r} has no port; {_EXAMPLES}")
    if host.startswith("["):
        if not host.endswith("]"):
            raise ValueError(f"{text!r}: an IPv6 address needs its closing ']'; {_EXAMPLES}")
        host = host[1:-1]
        try:
            ip = ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{text!r}: {host!r} is not an IPv6 address; {_EXAMPLES}") from None
        host = str(ip)
    elif ":" in host:
        raise ValueError(f"{text!r}: put an IPv6 address in brackets, as '[::1]:9464'")
    elif (
        host
        and not _is_ipv4(host)
        and (not _HOSTNAME.fullmatch(host) or host.replace(".", "").isdigit())
    ):
        raise ValueError(f"{text!r}: {host!r} is neither an IP address nor a host name")
    if not port_text.isascii() or not port_text.isdigit():
        raise ValueError(f"{text!r}: the port {port_text!r} is not a number; {_EXAMPLES}")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise ValueError(f"{text!r}: the port must be 1 to 65535, not {port}")
    return ListenAddress(host.rstrip(".") if host else "", port)


def _is_ipv4(host: str) -> bool:
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return True
