"""Network cases of the outbound policy (issue 37), each in a network of its own.

    unshare --user --map-root-user --net --mount python tests/netns_harness.py CASE
    python tests/netns_harness.py --loopback CASE

In a namespace: only ``lo`` is up, with canary addresses on it (10.1.2.3 private, 169.254.169.254
link-local, 100.64.1.1 shared, fec0::1 site-local, 10.9.9.9 a proxy, 93.184.216.34 standing for
a public web site), a DNS server on 127.0.0.1 (resolv.conf bind-mounted in this mount namespace)
that answers the test's names, rebinding ones included. Nothing can leave: there is no other
interface. Without namespaces (``--loopback``) the canaries are 127.0.0.2-7, PMS's classifier is
told which kind each stands for, and the resolver is replaced in-process.

Every case runs PMS (its API and its command line, in this process) and prints one JSON object:
what PMS answered, and every connection each canary received (its request lines, the headers it
saw). The tests (tests/test_outbound.py) and bench/faults.py judge it.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "src")]

import pms  # noqa: E402

PUBLIC, PRIVATE, LINK_LOCAL, SHARED, SITE_LOCAL, PROXY = ("93.184.216.34", "10.1.2.3", "169.254.169.254", "100.64.1.1",
                                                          "fec0::1", "10.9.9.9")
# In --loopback mode each canary is a loopback address the classifier is told to see as its kind.
STAND_INS = {PRIVATE: "127.0.0.2", LINK_LOCAL: "127.0.0.3", SHARED: "127.0.0.4", PUBLIC: "127.0.0.5", PROXY: "127.0.0.6",
             SITE_LOCAL: "127.0.0.7"}
PORT = 80  # every canary's port: 80 in a namespace, a free one on loopback (tests run side by side)
ARTICLE = ("<html><head><title>{title}</title></head><body><article><h1>{title}</h1>"
           + "<p>A paragraph of the article about lighthouses and harbours, long enough to be clipped as a note.</p>" * 4
           + "</article></body></html>")


class Canary(ThreadingHTTPServer):
    """An HTTP server on one address that records every connection and request it gets;
    ``pages`` maps a path to (status, headers, body) it answers (404 otherwise)."""

    daemon_threads = True

    def __init__(self, address: str, pages: dict | None = None, proxy: bool = False):
        self.address_family = socket.AF_INET6 if ":" in address else socket.AF_INET
        port = PORT
        self.connections, self.pages, self.proxy = 0, pages or {}, proxy
        self.requests: list[dict] = []
        super().__init__((address, port), _Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def get_request(self):
        self.connections += 1
        return super().get_request()

    def seen(self) -> dict:
        return {"connections": self.connections, "requests": self.requests}


class _Handler(BaseHTTPRequestHandler):
    server: Canary

    def log_message(self, *args) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.requests.append({"line": self.requestline, "headers": dict(self.headers), "body_bytes": len(body)})
        path = self.path.split("://", 1)[-1].split("/", 1)[-1] if self.server.proxy else self.path.lstrip("/")
        status, headers, payload = self.server.pages.get("/" + path, (404, {}, b"not here"))
        self.send_response(status)
        for key, value in {"Content-Type": "text/html", **headers}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_CONNECT = _answer


class Resolver:
    """The names of the cases: a list of answers each, the last repeated (a rebinding name
    answers public first, then link-local)."""

    def __init__(self):
        self.names = {"public.test": [[PUBLIC]], "rebind.test": [[PUBLIC], [LINK_LOCAL]],
                      "mixed.test": [[LINK_LOCAL, PUBLIC]], "notes.localhost": [[PRIVATE]], "ok.localhost": [["127.0.0.1"]],
                      "proxy.test": [[PROXY]]}
        self.asked: dict[str, int] = {}

    def answer(self, name: str) -> list[str]:
        name = name.rstrip(".").lower()
        n = self.asked[name] = self.asked.get(name, 0) + 1
        answers = self.names.get(name)
        return answers[min(n, len(answers)) - 1] if answers else []


def dns_server(resolver: Resolver) -> None:
    """A DNS server on 127.0.0.1:53 (UDP) answering A queries from ``resolver`` (AAAA: none)."""
    import struct

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 53))

    def serve() -> None:
        while True:
            query, client = sock.recvfrom(512)
            at, labels = 12, []
            while query[at]:
                labels.append(query[at + 1: at + 1 + query[at]].decode())
                at += 1 + query[at]
            qtype = struct.unpack(">H", query[at + 1: at + 3])[0]
            question = query[12: at + 5]
            name = ".".join(labels)
            addresses = resolver.answer(name) if qtype == 1 else []
            answers = b"".join(b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 0, 4) + socket.inet_aton(a) for a in addresses)
            flags = 0x8180 if addresses or name in resolver.names else 0x8183  # NXDOMAIN for unknown names
            sock.sendto(query[:2] + struct.pack(">HHHHH", flags, 1, len(addresses), 0, 0) + question + answers, client)

    threading.Thread(target=serve, daemon=True).start()


def set_up_namespace(resolver: Resolver) -> dict[str, str]:
    """Bring lo up with the canary addresses; our DNS server as this mount namespace's resolver."""
    run = lambda *args: subprocess.run(args, check=True, capture_output=True)  # noqa: E731
    run("ip", "link", "set", "lo", "up")
    for address in (PUBLIC, PRIVATE, LINK_LOCAL, SHARED, PROXY):
        run("ip", "addr", "add", f"{address}/32", "dev", "lo")
    run("ip", "-6", "addr", "add", f"{SITE_LOCAL}/128", "dev", "lo", "nodad")
    conf = tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False)
    conf.write("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    conf.close()
    run("mount", "--bind", conf.name, "/etc/resolv.conf")
    dns_server(resolver)
    return {address: address for address in STAND_INS}


def set_up_loopback(resolver: Resolver) -> dict[str, str]:
    """No namespaces: canaries on 127.0.0.x; the classifier and the resolver are told what they stand for."""
    kinds = {STAND_INS[a]: pms.outbound.address_kind(a) for a in STAND_INS}
    real_kind, real_lookup = pms.outbound.address_kind, socket.getaddrinfo

    def address_kind(address):
        return kinds.get(str(address)) or real_kind(address)

    def getaddrinfo(host, port, *args, **kwargs):
        answers = resolver.answer(str(host)) if str(host).rstrip(".").lower() in resolver.names else None
        if answers is None:
            return real_lookup(host, port, *args, **kwargs)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (STAND_INS.get(a, a), port)) for a in answers]

    for module in (pms.outbound, pms.embedding, pms.clip):
        module.address_kind = address_kind  # type: ignore[attr-defined]
    socket.getaddrinfo = getaddrinfo  # type: ignore[assignment]
    return STAND_INS


class EmbeddingServer(ThreadingHTTPServer):
    """A small OpenAI-compatible embeddings server on 127.0.0.1 (or a canary address): vectors of
    hashed words, or ``redirect`` (a 302 to that URL) for every request."""

    daemon_threads = True

    def __init__(self, address: str = "127.0.0.1", port: int = 0, redirect: str | None = None):
        self.redirect = redirect
        self.requests: list[dict] = []
        super().__init__((address, port), _EmbeddingHandler)
        self.url = f"http://{address}:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, daemon=True).start()


class _EmbeddingHandler(BaseHTTPRequestHandler):
    server: EmbeddingServer

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        import hashlib

        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self.server.requests.append({"path": self.path, "authorization": self.headers.get("Authorization")})
        if self.server.redirect:
            self.send_response(302)
            self.send_header("Location", self.server.redirect)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        vectors = []
        for text in texts:
            v = [0.01] * 16
            for word in text.lower().split():
                h = int(hashlib.sha256(word.encode()).hexdigest(), 16)
                v[h % 16] += 1.0
            vectors.append(v)
        payload = json.dumps({"data": [{"index": i, "embedding": v} for i, v in enumerate(vectors)]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def cli(*args: str) -> dict:
    """The command line, in this process: its exit code and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = pms.main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return {"args": list(args), "code": code, "stdout": out.getvalue()[-2000:], "stderr": err.getvalue()[-2000:]}


def vault(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "backup.md").write_text("# Backups\n\nrestic copies the laptop to a disk every night\n")
    (folder / "trains.md").write_text("# Trains\n\nthe railway timetable from the station\n")
    return folder


# -- the cases ----------------------------------------------------------------------------------------------------
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def case_proxy(at: dict, work: Path) -> dict:
    """Proxies set for other programs: the embedding server on loopback and a clip go direct; with
    PMS_USE_PROXY=1 a clip goes through the proxy (given the checked address), the embedding
    server on loopback still never does."""
    proxy = Canary(at[PROXY], pages={"/page": (200, {}, ARTICLE.format(title="Via the proxy").encode())}, proxy=True)
    site = Canary(at[PUBLIC], pages={"/page": (200, {}, ARTICLE.format(title="Direct").encode())})
    server = EmbeddingServer()
    for name in PROXY_VARIABLES:
        os.environ[name] = f"http://{at[PROXY]}:{PORT}"
    out: dict = {}
    db = work / "index.sqlite"
    embedder = pms.HTTPEmbedder(server.url, "m")
    with pms.KnowledgeBase(db, embedder=embedder) as kb:
        kb.collections.create(vault(work / "vault"), name="v")
        report = kb.sync()
        out["sync_embedded"], out["sync_error"] = report.embedded, report.embed_error
        out["hybrid_mode"] = kb.search("nightly copy", mode="hybrid").mode
    out["cli_search"] = cli("--db", str(db), "search", "nightly copy", "--mode", "hybrid")
    out["clip_direct"] = pms.extract_from_url(f"http://public.test:{PORT}/page", timeout=10).title
    os.environ["PMS_USE_PROXY"] = "1"
    with pms.KnowledgeBase(db, embedder=pms.HTTPEmbedder(server.url, "m")) as kb:
        out["opted_in_search_mode"] = kb.search("nightly copy", mode="hybrid").mode
    out["clip_opted_in"] = pms.extract_from_url(f"http://public.test:{PORT}/page", timeout=10).title
    out["embedding_requests"] = len(server.requests)
    return {**out, "proxy": proxy.seen(), "site": site.seen()}


def case_redirect_with_key(at: dict, work: Path) -> dict:
    """An embedding server on loopback that redirects to another host: the notes and the key stay here."""
    canary = Canary(at[PRIVATE])
    server = EmbeddingServer(redirect=f"http://{at[PRIVATE]}:{PORT}/v1/embeddings")
    os.environ["MY_EMBED_KEY"] = "s3cret-key"
    db = str(work / "index.sqlite")
    common = ["--db", db, "--embed-url", server.url, "--embed-model", "m", "--embed-key-env", "MY_EMBED_KEY"]
    out = {"add": cli(*common, "collection", "add", str(vault(work / "vault")), "--name", "v"),
           "allowed": cli(*common, "--allow-remote-embedding", "sync", "--reembed"),
           "search": cli(*common, "search", "nightly copy"),
           "status": cli(*common, "status")}
    return {**out, "server_requests": server.requests, "canary": canary.seen()}


def case_localhost_names(at: dict, work: Path) -> dict:
    """``notes.localhost`` resolves to 10.1.2.3: off this machine, refused without consent;
    ``ok.localhost`` resolves to 127.0.0.1: this machine."""
    canary = Canary(at[PRIVATE])
    server = EmbeddingServer(port=0)
    port = server.server_address[1]
    out: dict = {}
    for name in ("notes.localhost", "ok.localhost"):
        embedder = pms.HTTPEmbedder(f"http://{name}:{port if name == 'ok.localhost' else PORT}", "m")
        try:
            embedder.embed_query("a secret query")
            out[name] = "embedded"
        except pms.PMSError as exc:
            out[name] = str(exc)
        out[name + " remote"] = embedder.remote
    return {**out, "server_requests": len(server.requests), "canary": canary.seen()}


def case_rebinding(at: dict, work: Path) -> dict:
    """A public page redirects to a name that resolves public, then link-local: the name is looked
    up once and the request goes to the public address checked."""
    metadata = Canary(at[LINK_LOCAL], pages={"/meta": (200, {}, ARTICLE.format(title="Cloud credentials").encode())})
    site = Canary(at[PUBLIC], pages={
        "/start": (302, {"Location": f"http://rebind.test:{PORT}/meta"}, b""),
        "/meta": (200, {}, ARTICLE.format(title="The public page").encode())})
    page = pms.extract_from_url(f"http://public.test:{PORT}/start", timeout=10)
    try:  # and once more: rebind.test now answers link-local, which a redirect from a public page may not reach
        again = pms.extract_from_url(f"http://public.test:{PORT}/start", timeout=10).title
    except pms.PMSError as exc:
        again = str(exc)
    return {"title": page.title, "again": again, "metadata": metadata.seen(), "site": site.seen()}


def case_private_redirects(at: dict, work: Path) -> dict:
    """A public page redirecting to each kind of address that is not public: refused before any connection."""
    site_local = f"[{at[SITE_LOCAL]}]" if ":" in at[SITE_LOCAL] else at[SITE_LOCAL]
    targets = {"shared": f"http://{at[SHARED]}:{PORT}/", "site-local": f"http://{site_local}:{PORT}/",
               "private": f"http://{at[PRIVATE]}:{PORT}/", "link-local": f"http://{at[LINK_LOCAL]}:{PORT}/latest/meta-data/",
               "mixed-name": f"http://mixed.test:{PORT}/page"}
    canaries = {kind: Canary(at[address]) for kind, address in
                (("shared", SHARED), ("site-local", SITE_LOCAL), ("private", PRIVATE), ("link-local", LINK_LOCAL))}
    site = Canary(at[PUBLIC], pages={**{f"/to-{kind}": (302, {"Location": url}, b"") for kind, url in targets.items()},
                                         "/page": (200, {}, ARTICLE.format(title="Public half of a mixed name").encode())})
    out = {}
    for kind in targets:
        try:
            out[kind] = pms.extract_from_url(f"http://public.test:{PORT}/to-{kind}", timeout=10).title
        except pms.PMSError as exc:
            out[kind] = str(exc)
    return {"answers": out, "canaries": {kind: c.seen() for kind, c in canaries.items()}, "site": site.seen()}


def case_remote_consent(at: dict, work: Path) -> dict:
    """An embedding server off this machine: nothing is sent without consent; with it, the server is used."""
    server = EmbeddingServer(at[PRIVATE], PORT)
    out: dict = {}
    for allow in (False, True):
        embedder = pms.HTTPEmbedder(f"http://{at[PRIVATE]}:{PORT}/", "m", allow_remote=allow)
        try:
            embedder.embed_query("a query")
            out[f"allow={allow}"] = "embedded"
        except pms.PMSError as exc:
            out[f"allow={allow}"] = str(exc)
        out[f"requests after allow={allow}"] = len(server.requests)
    return out


CASES = {name[len("case_"):].replace("_", "-"): fn for name, fn in globals().items() if name.startswith("case_")}


def main(argv: list[str]) -> int:
    global PORT
    loopback = "--loopback" in argv
    if loopback:  # one free port, then taken on each stand-in address
        with socket.create_server((STAND_INS[PUBLIC], 0)) as probe:
            PORT = probe.getsockname()[1]
    name = [a for a in argv if not a.startswith("--")][0]
    resolver = Resolver()
    at = set_up_loopback(resolver) if loopback else set_up_namespace(resolver)
    os.environ["PMS_HOME"] = tempfile.mkdtemp(prefix="pms-netns-home-")
    for variable in PROXY_VARIABLES + ("PMS_USE_PROXY", "no_proxy", "NO_PROXY"):
        os.environ.pop(variable, None)
    with tempfile.TemporaryDirectory(prefix="pms-netns-") as work:
        result = CASES[name](at, Path(work))
    print(json.dumps({"case": name, "loopback": loopback, "at": at, "port": PORT, "lookups": resolver.asked, **result}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
