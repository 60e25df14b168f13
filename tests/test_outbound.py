"""The outbound-HTTP policy (issue 37): what the embedding server and the clipper may reach, and
how long they may take.

The network cases run tests/netns_harness.py in a network namespace of its own (only ``lo`` up,
canary addresses on it, a DNS server that rebinds): with a proxy set, a redirecting server and a
rebinding name, no byte reaches a canary off this machine. Where namespaces cannot be made, that
variant skips (saying why) and the loopback variant still runs: canaries on 127.0.0.x that the
policy is told stand for other hosts.
"""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import REPO, write

import pms

HARNESS = REPO / "tests" / "netns_harness.py"
NAMESPACE = ["unshare", "--user", "--map-root-user", "--net", "--mount"]


def namespaces_unusable() -> str | None:
    """Why this run cannot make network namespaces, or None."""
    if sys.platform != "linux" or not shutil.which("unshare") or not shutil.which("ip"):
        return "needs Linux with unshare and ip (util-linux, iproute2)"
    probe = subprocess.run([*NAMESPACE, "ip", "link", "set", "lo", "up"], capture_output=True, text=True)
    return None if probe.returncode == 0 else f"unshare failed: {probe.stderr.strip()[:200]}"


@pytest.fixture(params=["namespace", "loopback"])
def network(request):
    """How a case runs: in a namespace of its own, or on loopback stand-ins (always possible)."""
    if request.param == "namespace":
        why = namespaces_unusable()
        if why:
            print(f"network namespaces are not available ({why}): the loopback variant stands in")
            pytest.skip(f"network namespaces are not available: {why}")
        return NAMESPACE, []
    return [], ["--loopback"]


def run_case(network, case: str) -> dict:
    prefix, flags = network
    r = subprocess.run([*prefix, sys.executable, str(HARNESS), *flags, case], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert "Traceback" not in json.dumps(result)
    return result


def test_with_a_proxy_set_notes_and_queries_never_go_through_it(network):
    r = run_case(network, "proxy")
    at = r["at"]
    assert (r["sync_embedded"], r["sync_error"], r["hybrid_mode"], r["opted_in_search_mode"]) == (2, None, "hybrid", "hybrid")
    assert r["cli_search"]["code"] == 0 and "meaning #" in r["cli_search"]["stdout"]
    assert r["embedding_requests"] > 0
    assert r["clip_direct"] == "Direct" and r["site"]["connections"] == 1, "without PMS_USE_PROXY=1 a clip goes direct"
    # Opted in: only the clip goes through the proxy, to the address PMS checked (the proxy looks nothing up).
    assert r["clip_opted_in"] == "Via the proxy"
    assert r["proxy"]["connections"] == 1
    [request] = r["proxy"]["requests"]
    assert request["line"] == f"GET http://{at['93.184.216.34']}:{r['port']}/page HTTP/1.1"
    assert request["headers"]["Host"].split(":")[0] == "public.test"


def test_an_embedding_server_that_redirects_keeps_the_notes_and_the_key_here(network):
    r = run_case(network, "redirect-with-key")
    assert r["canary"] == {"connections": 0, "requests": []}
    assert all(req["authorization"] == "Bearer s3cret-key" for req in r["server_requests"]), "the key went to the server chosen"
    for run in (r["add"], r["allowed"]):
        assert "does not follow for an embedding server" in run["stderr"] and "\n" not in run["stderr"].strip().split("pms: ")[-1]
    assert r["allowed"]["code"] == 1, "consent to a remote server is not consent to follow its redirects"
    assert r["search"]["code"] == 0 and "backup.md" in r["search"]["stdout"], "the search answers by keywords"
    # Told once (the add said it); status repeats it.
    assert "does not follow for an embedding server" in r["status"]["stdout"]


def test_a_localhost_name_counts_as_this_machine_only_when_it_resolves_to_loopback(network):
    r = run_case(network, "localhost-names")
    assert r["notes.localhost"].startswith(f"embedding server http://notes.localhost:{r['port']}/v1/embeddings is off this machine")
    assert r["notes.localhost remote"] is True and r["ok.localhost remote"] is False
    assert r["ok.localhost"] == "embedded" and r["server_requests"] > 0
    assert r["canary"] == {"connections": 0, "requests": []}


def test_a_rebinding_name_is_looked_up_once_and_never_reaches_link_local(network):
    r = run_case(network, "rebinding")
    assert r["title"] == "The public page", "the redirect went to the public address the lookup gave"
    assert f"redirects to 'http://rebind.test:{r['port']}/meta', a link-local address" in r["again"]
    assert r["metadata"] == {"connections": 0, "requests": []}
    assert r["lookups"]["rebind.test"] == 2, "one lookup per clip"


def test_clip_redirects_to_any_range_that_is_not_public_are_refused(network):
    r = run_case(network, "private-redirects")
    kinds = {"shared": "private", "site-local": "private", "private": "private", "link-local": "link-local"}
    for target, kind in kinds.items():
        assert f"a {kind} address: redirects are followed only to public addresses" in r["answers"][target], target
    assert all(seen == {"connections": 0, "requests": []} for seen in r["canaries"].values()), r["canaries"]
    assert r["answers"]["mixed-name"] == "Public half of a mixed name", "a name with a public address uses only that"


def test_a_server_off_this_machine_is_used_only_with_consent(network):
    r = run_case(network, "remote-consent")
    assert "is off this machine" in r["allow=False"] and r["requests after allow=False"] == 0
    assert r["allow=True"] == "embedded" and r["requests after allow=True"] > 0


@pytest.mark.parametrize("address,kind", [
    ("8.8.8.8", "public"), ("2606:4700::1111", "public"), ("::ffff:8.8.8.8", "public"),
    ("127.0.0.2", "loopback"), ("::1", "loopback"), ("0.0.0.0", "loopback"),
    ("169.254.169.254", "link-local"), ("fe80::1%eth0", "link-local"), ("::ffff:169.254.169.254", "link-local"),
    ("64:ff9b::a9fe:a9fe", "link-local"), ("2002:a9fe:a9fe::1", "link-local"),
    ("100.64.0.1", "private"), ("100.127.255.254", "private"), ("fec0::1", "private"), ("fd12::1", "private"),
    ("10.0.0.1", "private"), ("192.168.1.1", "private"), ("192.0.0.8", "private"), ("192.0.2.1", "private"),
    ("198.18.0.1", "private"), ("240.0.0.1", "private"), ("224.0.0.1", "private"), ("ff02::1", "private"),
    ("2001:db8::1", "private"),
])
def test_kinds_of_address(address, kind):
    assert pms.outbound.address_kind(address) == kind


# -- deadlines over whole calls (loopback servers) -------------------------------------------------------------------
class SilentServer:
    """Accepts connections and never answers (``trickle``: sends headers, then a byte now and then, forever)."""

    def __init__(self, trickle: bool = False):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url, self.connections, self.trickle, self.stop = f"http://127.0.0.1:{self.sock.getsockname()[1]}", 0, trickle, False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn) -> None:
        with conn:
            conn.recv(65536)
            if self.trickle:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 100000\r\n\r\n<html>")
            while not self.stop:
                try:
                    if self.trickle:
                        conn.sendall(b" ")
                    time.sleep(0.2)
                except OSError:
                    return

    def close(self) -> None:
        self.stop = True
        self.sock.close()


@pytest.fixture
def silent():
    server = SilentServer()
    yield server
    server.close()


def finishes(call, guard: float = 120.0):
    """``call()`` in a thread; what it returned or raised. A call that never ends fails the test
    after ``guard`` seconds (a hang, not a speed bound)."""
    outcome: dict = {}

    def run():
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(guard)
    assert not thread.is_alive(), f"the call was still running after {guard:g} s"
    return outcome


def test_a_silent_server_costs_a_query_one_try_within_its_deadline(silent):
    embedder = pms.HTTPEmbedder(silent.url, "m", input_type=False, dim=16, query_timeout=1.0, retries=5)
    outcome = finishes(lambda: embedder.embed_query("where are my backups"))
    assert isinstance(outcome.get("error"), pms.EmbeddingUnavailable) and "no answer within 1 s" in str(outcome["error"])
    assert silent.connections == 1, "no retry is started once the query's deadline has passed"


def test_a_server_that_trickles_bytes_cannot_stretch_a_call():
    trickle = SilentServer(trickle=True)
    try:
        embedder = pms.HTTPEmbedder(trickle.url, "m", input_type=False, dim=16, query_timeout=1.0, timeout=1.0, retries=0,
                                    batch_deadline=1.0)
        outcome = finishes(lambda: embedder.embed_query("query"))
        assert "no answer within 1 s" in str(outcome["error"])
        outcome = finishes(lambda: embedder.embed_passages(["a", "b", "c"]))
        assert "no answer within 1 s" in str(outcome["error"])
        outcome = finishes(lambda: pms.clip.fetch_html(trickle.url, timeout=1))
        assert "did not finish downloading within 1 s" in str(outcome["error"])
    finally:
        trickle.close()


class RetryAfterServer(ThreadingHTTPServer):
    """Answers 429 with ``Retry-After: wait`` to the first request, then vectors."""

    daemon_threads = True

    def __init__(self, wait: str):
        self.wait = wait
        self.times: list[float] = []
        super().__init__(("127.0.0.1", 0), RetryAfterHandler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, daemon=True).start()


class RetryAfterHandler(BaseHTTPRequestHandler):
    server: RetryAfterServer

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.times.append(time.monotonic())
        if len(self.server.times) == 1:
            payload, status, extra = b'{"error": {"message": "slow down"}}', 429, {"Retry-After": self.server.wait}
        else:
            payload, status, extra = json.dumps({"data": [{"index": i, "embedding": [1.0, 0.5, float(i)]}
                                                          for i in range(len(body["input"]))]}).encode(), 200, {}
        self.send_response(status)
        for key, value in {"Content-Type": "application/json", "Content-Length": str(len(payload)), **extra}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)


def test_retry_after_is_honoured_within_the_calls_deadline():
    server = RetryAfterServer("1")
    try:
        embedder = pms.HTTPEmbedder(server.url, "m", input_type=False, dim=3, retries=2)
        assert len(embedder.embed_passages(["a", "b"])) == 2
        assert server.times[1] - server.times[0] >= 0.95, "the second try waited as long as the server asked"
    finally:
        server.shutdown()
    server = RetryAfterServer("3600")
    try:
        embedder = pms.HTTPEmbedder(server.url, "m", input_type=False, dim=3, retries=2, batch_deadline=5, timeout=5)
        outcome = finishes(lambda: embedder.embed_passages(["a"]))
        assert "HTTP 429: slow down (it asked to wait 3600 s, Retry-After, longer than this call may take)" in str(outcome["error"])
        assert len(server.times) == 1
    finally:
        server.shutdown()


def test_status_shows_the_last_embedding_failure(silent, tmp_path, db_path, pms_main):
    from netns_harness import EmbeddingServer

    write(tmp_path / "v" / "a.md", "# A\n\nrestic copies the laptop every night\n")
    working = EmbeddingServer()
    with pms.KnowledgeBase(db_path, embedder=pms.HTTPEmbedder(working.url, "m")) as kb:
        kb.collections.create(tmp_path / "v", name="v")
        assert kb.sync().embedded == 1 and kb.status(pending=False)["embedding_last_failure"] is None
    working.shutdown()
    embedder = pms.HTTPEmbedder(silent.url, "m", input_type=False, dim=16, query_timeout=0.5, retries=0)
    with pms.KnowledgeBase(db_path, embedder=embedder) as kb:
        found = kb.search("nightly copies")
        assert found.mode == "keyword" and "no answer within 0.5 s" in found.reason
        failure = kb.status(pending=False)["embedding_last_failure"]
        assert "no answer within 0.5 s" in failure["error"] and failure["at"]
    silent.close()  # now refused: the sync's failure is what the index remembers for the next process
    write(tmp_path / "v" / "b.md", "# B\n\nanother note to embed\n")
    r = pms_main("--embed-url", silent.url, "--embed-model", "m", "sync", db=db_path)
    assert "connection refused" in r.stderr
    r = pms_main("status", db=db_path)
    [line] = [line for line in r.stdout.splitlines() if line.startswith("Last failure:")]
    assert r.returncode == 0 and "connection refused" in line
