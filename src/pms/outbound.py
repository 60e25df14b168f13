"""Outbound HTTP: the one policy every request PMS makes follows (the embedding server, the clipper).

Owns: what kind of address a host is (loopback, link-local, private, public); name lookups made
once, with the connection made to the address that was checked (a name that resolves again to
another address, DNS rebinding, is never asked twice); proxies (none unless the user opts in with
PMS_USE_PROXY=1, and never for this machine); redirects (followed only when the caller allows,
each hop checked by the caller, credentials never carried to another host); a deadline over the
whole call: lookup, connection, TLS, headers and body, so a server that trickles a byte at a time
cannot stretch it.

Written on http.client and socket rather than urllib: urllib reads proxies from the environment,
looks names up again at connect time, and its timeouts are per read, not per call.

May import: config.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import time
from collections.abc import Callable, Sequence

from .config import TYPE_CHECKING, PMSError, Record

PROXY_SETTING = "PMS_USE_PROXY"  # =1: requests that leave the machine use the system's proxy (HTTPS_PROXY, ...)
# Headers that carry a credential: dropped when a redirect leads to another scheme, host or port.
CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "cookie")
REDIRECT_STATUSES = (301, 302, 303, 307, 308)
# Kinds of address, the most private first.
ADDRESS_KINDS = ("loopback", "link-local", "private", "public")
# Ranges that are never public, whatever a Python version's ipaddress tables say (they changed in 3.13):
# this network, shared (carrier NAT, tailnets), protocol assignments, documentation, benchmarking,
# reserved, IPv6 site-local, unique-local, documentation, protocol assignments, discard.
NOT_PUBLIC = ("0.0.0.0/8", "100.64.0.0/10", "192.0.0.0/24", "192.0.2.0/24", "198.18.0.0/15", "198.51.100.0/24",
              "203.0.113.0/24", "240.0.0.0/4", "fec0::/10", "fc00::/7", "2001:db8::/32", "2001::/23", "100::/64")

if TYPE_CHECKING:
    import http.client
    import ipaddress

    IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def address_kind(address: str | IPAddress) -> str:
    """'loopback', 'link-local', 'private' or 'public'. Only globally routable unicast
    addresses are public: shared (100.64/10, carrier NAT and tailnets), site-local
    (fec0::/10), unique-local, documentation, benchmarking, multicast and reserved ranges
    are private. IPv4 carried in IPv6 (mapped, NAT64, 6to4) is judged as that IPv4 address."""
    import ipaddress

    ip = ipaddress.ip_address(str(address).split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour
        if embedded is None and ip in ipaddress.IPv6Network("64:ff9b::/96"):
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            ip = embedded
    if ip.is_loopback or ip.is_unspecified:  # 0.0.0.0 and :: reach this machine
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    listed = any(ip in network for network in _not_public(ip.version))
    return "public" if ip.is_global and not (ip.is_multicast or ip.is_reserved or listed) else "private"


@functools.cache
def _not_public(version: int) -> tuple:
    import ipaddress

    return tuple(network for network in map(ipaddress.ip_network, NOT_PUBLIC) if network.version == version)


def most_private(addresses: Sequence[str | IPAddress]) -> str:
    return min((address_kind(a) for a in addresses), key=ADDRESS_KINDS.index, default="public")


def is_loopback_name(host: str) -> bool:
    """Whether a host names this machine as written: a loopback address, ``localhost`` or a
    ``*.localhost`` name. A name is still looked up before any request, which goes only where
    it resolves: a ``*.localhost`` name that resolves elsewhere is off this machine."""
    host = host.strip("[]").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return address_kind(host) == "loopback"
    except ValueError:
        return False


def time_left(deadline: float) -> float:
    """Seconds until ``deadline`` (time.monotonic); TimeoutError when none are left."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    return left


def resolve(host: str, port: int, deadline: float) -> list[str]:
    """The addresses of ``host``, looked up once (a literal address needs no lookup). The lookup
    runs in a daemon thread the caller stops waiting for at ``deadline``: a resolver that hangs
    cannot be interrupted. socket.gaierror when the name does not resolve."""
    import ipaddress

    bare = host.strip("[]")
    with contextlib.suppress(ValueError):
        return [str(ipaddress.ip_address(bare.split("%")[0]))]
    import threading

    outcome: dict = {}

    def look_up() -> None:
        try:
            infos = socket.getaddrinfo(bare, port, type=socket.SOCK_STREAM)
            outcome["addresses"] = list(dict.fromkeys(info[4][0] for info in infos))
        except UnicodeError:  # a name IDNA cannot encode
            outcome["error"] = socket.gaierror(socket.EAI_NONAME, "not a valid host name")
        except OSError as exc:
            outcome["error"] = exc

    lookup = threading.Thread(target=look_up, name="pms-name-lookup", daemon=True)
    lookup.start()
    lookup.join(time_left(deadline))
    if lookup.is_alive():
        raise TimeoutError("the name lookup timed out")
    if "error" in outcome:
        raise outcome["error"]
    if not outcome["addresses"]:
        raise socket.gaierror(socket.EAI_NONAME, "no address")
    return outcome["addresses"]


def split_url(url: str, named: str):
    """``url`` split (urllib's SplitResult), its port checked; a PMSError naming it as ``named``
    (e.g. "embedding server URL 'x'") when it cannot be parsed."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # raises ValueError on a port that is not a number
    except ValueError as exc:
        raise PMSError(f"{named} is not a valid URL ({exc})") from None
    return parts


class _InTime:
    """Reads and writes that end at ``deadline``: each call gets the time left as its timeout
    (mixed into a plain socket and, when TLS is used, into ssl.SSLSocket)."""

    deadline = float("inf")

    def _in_time(self) -> None:
        self.settimeout(time_left(self.deadline))  # type: ignore[attr-defined]

    def recv_into(self, *args, **kwargs):
        self._in_time()
        return super().recv_into(*args, **kwargs)  # type: ignore[misc]

    def recv(self, *args, **kwargs):
        self._in_time()
        return super().recv(*args, **kwargs)  # type: ignore[misc]

    def sendall(self, *args, **kwargs):
        self._in_time()
        return super().sendall(*args, **kwargs)  # type: ignore[misc]


class _DeadlineSocket(_InTime, socket.socket):
    """A socket whose every wait ends at ``deadline``."""


def _tls_socket_class():
    import ssl

    class DeadlineTLSSocket(_InTime, ssl.SSLSocket):
        """The TLS socket of a _DeadlineSocket: the handshake, reads and writes end at ``deadline``
        (the ssl module counts one timeout across the retries of a call)."""

        def do_handshake(self, *args, **kwargs):
            self._in_time()
            return super().do_handshake(*args, **kwargs)

    return DeadlineTLSSocket


def _connect(addresses: Sequence[str], port: int, deadline: float) -> _DeadlineSocket:
    """A TCP connection to the first of ``addresses`` that answers, within the deadline."""
    import ipaddress

    error: OSError | None = None
    for address in addresses:
        family = socket.AF_INET6 if ipaddress.ip_address(address.split("%")[0]).version == 6 else socket.AF_INET
        sock = _DeadlineSocket(family, socket.SOCK_STREAM)
        sock.deadline = deadline
        try:
            sock.settimeout(time_left(deadline))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.connect((address, port))
            return sock
        except OSError as exc:
            sock.close()
            if isinstance(exc, TimeoutError):
                raise
            error = exc
    assert error is not None
    raise error


def _tls(sock: _DeadlineSocket, host: str, deadline: float):
    import ssl

    context = ssl.create_default_context()
    context.sslsocket_class = _tls_socket_class()
    tls = context.wrap_socket(sock, server_hostname=host.strip("[]"), do_handshake_on_connect=False)
    tls.deadline = deadline  # type: ignore[attr-defined]  # our SSLSocket subclass
    tls.do_handshake()
    return tls


def _tunnel(sock, address: str, port: int, proxy_headers: dict) -> None:
    """CONNECT through an HTTP proxy to ``address`` (the checked address, never the name: the proxy
    looks nothing up); an OSError when the proxy refuses."""
    import http.client

    target = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
    head = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in proxy_headers.items())
    sock.sendall((head + "\r\n").encode("latin-1"))
    answer = http.client.HTTPResponse(sock, method="CONNECT")
    answer.begin()
    if answer.status != 200:
        raise OSError(f"the proxy refused the connection (HTTP {answer.status} {answer.reason})")


class Proxy(Record, frozen=True):
    """An HTTP proxy from the system's settings (``PMS_USE_PROXY=1``)."""

    host: str
    port: int
    headers: dict  # Proxy-Authorization, from user:password in the proxy's URL


def proxy_for(scheme: str, host: str, addresses: Sequence[str]) -> Proxy | None:
    """The proxy a request to ``host`` goes through: none unless the user set PMS_USE_PROXY=1
    (a proxy set for other programs would see every passage and query), none for an address
    of this machine, none for a host the system's no-proxy list names."""
    if os.environ.get(PROXY_SETTING, "").lower() not in ("1", "true", "yes") or most_private(addresses) == "loopback":
        return None
    import base64
    import urllib.request
    from urllib.parse import unquote, urlsplit

    url = urllib.request.getproxies().get(scheme)
    if not url or urllib.request.proxy_bypass(host):
        return None
    parts = urlsplit(url if "://" in url else "http://" + url)
    if parts.scheme != "http" or not parts.hostname:
        raise PMSError(f"the proxy {url!r} is not an http:// proxy, the only kind PMS can use ({PROXY_SETTING}=1)")
    headers = {}
    if parts.username is not None:
        login = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        headers["Proxy-Authorization"] = "Basic " + base64.b64encode(login).decode()
    return Proxy(host=parts.hostname, port=parts.port or 80, headers=headers)


def _connection(scheme: str, host: str, port: int, addresses: Sequence[str], deadline: float) -> http.client.HTTPConnection:
    """An http.client connection to ``host`` (its Host header and TLS name) whose socket goes to
    one of ``addresses``, directly or through the opted-in proxy, within ``deadline``."""
    import http.client

    proxy = proxy_for(scheme, host, addresses)

    def open_socket():
        if proxy is None:
            sock = _connect(addresses, port, deadline)
        else:
            sock = _connect(resolve(proxy.host, proxy.port, deadline), proxy.port, deadline)
            if scheme == "https":
                _tunnel(sock, addresses[0], port, proxy.headers)
        return _tls(sock, host, deadline) if scheme == "https" else sock

    class Connection(http.client.HTTPConnection):
        default_port = 443 if scheme == "https" else 80

        def connect(self) -> None:
            self.sock = open_socket()

    return Connection(host, port)


class Answer:
    """An HTTP answer being read: ``status``, ``reason``, ``headers``, ``url`` (after any redirects);
    ``body(max_bytes)`` reads the rest within the call's deadline. A context manager (closes the connection)."""

    def __init__(self, response: http.client.HTTPResponse, connection: http.client.HTTPConnection, url: str):
        self.response, self.connection, self.url = response, connection, url
        self.status, self.reason, self.headers = response.status, response.reason, response.headers

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.response.close()
        with contextlib.suppress(Exception):
            self.connection.close()

    def read1(self, size: int = 64 * 1024) -> bytes:
        """What one wait brings (at most ``size`` bytes): b"" at the end."""
        return self.response.read1(size)

    def body(self, max_bytes: int) -> bytes | None:
        """The body, or None when it is longer than ``max_bytes`` (the rest stays unread)."""
        parts, size = [], 0
        while block := self.read1():
            size += len(block)
            if size > max_bytes:
                return None
            parts.append(block)
        return b"".join(parts)


# The addresses a request may connect to: (url, host, the host's addresses, hop: 0 for the URL
# given, 1... for redirects) -> the ones allowed, in order, or a PMSError naming why none is.
AddressCheck = Callable[[str, str, list[str], int], list[str]]


def reachable(url: str, deadline: float, allowed: AddressCheck) -> None:
    """Connect to ``url``'s host as a request would (TLS included), send nothing, close:
    OSError (or the check's PMSError) when that fails."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), parts.hostname or ""
    port = parts.port or (443 if scheme == "https" else 80)
    connection = _connection(scheme, host, port, allowed(url, host, resolve(host, port, deadline), 0), deadline)
    try:
        connection.connect()
    finally:
        connection.close()


def open_url(url: str, *, deadline: float, allowed: AddressCheck, method: str = "GET", body: bytes | None = None,
             headers: dict[str, str] | None = None, redirects: int = 0) -> Answer:
    """Send one request (and follow up to ``redirects`` redirects) within ``deadline``: each host
    looked up once, its addresses passed through ``allowed``, the connection made to one of those.
    Any status is returned (a 3xx too once the redirects are spent); the caller reads the body.
    Raises what the network raises (socket.gaierror, ConnectionRefusedError, TimeoutError,
    ssl.SSLError, http.client.HTTPException), or a PMSError for a refused redirect."""
    from urllib.parse import urljoin, urlsplit

    headers = dict(headers or {})
    seen: set[str] = set()
    for hop in range(redirects + 1):
        parts = urlsplit(url)
        scheme, host = parts.scheme.lower(), parts.hostname or ""
        port = parts.port or (443 if scheme == "https" else 80)
        addresses = allowed(url, host, resolve(host, port, deadline), hop)
        connection = _connection(scheme, host, port, addresses, deadline)
        target = urlsplit(url)._replace(scheme="", netloc="", fragment="").geturl() or "/"
        proxied = scheme == "http" and proxy_for(scheme, host, addresses) is not None
        if proxied:  # an HTTP proxy gets the whole URL, its host the checked address (the proxy looks nothing up)
            address = addresses[0]
            target = f"http://{'[' + address + ']' if ':' in address else address}:{port}{target}"
            headers.setdefault("Host", parts.netloc.rpartition("@")[2])
        try:
            connection.request(method, target, body=body, headers=headers)
            response = connection.getresponse()
        except BaseException:
            connection.close()
            raise
        answer = Answer(response, connection, url)
        location = response.headers.get("Location")
        if response.status not in REDIRECT_STATUSES or not location or hop == redirects:
            return answer
        answer.close()
        seen.add(url)
        following = urljoin(url, location.strip())
        if urlsplit(following).scheme.lower() not in ("http", "https"):
            raise PMSError(f"{url} redirects to {following!r}, which is not a web page (only http and https are followed)")
        if following in seen:
            raise PMSError(f"too many redirects: {url} leads back to {following} (a redirect loop): "
                           "open it in a browser and use the address it ends at")
        if _origin(following) != _origin(url):  # a credential is for the host it was given to
            headers = {k: v for k, v in headers.items() if k.lower() not in CREDENTIAL_HEADERS and k.lower() != "host"}
        if response.status in (301, 302, 303) and method not in ("GET", "HEAD"):
            method, body = "GET", None
        url = following
    raise AssertionError("unreachable: the last hop returns")


def _origin(url: str) -> tuple:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port or (443 if parts.scheme.lower() == "https" else 80)
