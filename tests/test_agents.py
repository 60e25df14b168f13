"""What an AI assistant relies on (issue 23): note ids that never collide, bounded
calls and answers, fuzzy note lookup, exclusions, containment, HTTP hygiene.

MCP behaviour is driven through the official SDK's clients (stdio and Streamable
HTTP) against a real `pms.py mcp` subprocess; raw HTTP through urllib.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import REPO, mcp_env, mcp_http, mcp_http_client, mcp_stdio, run_cli, wait_for, write

import pms

mcp = pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install -r requirements-dev.txt)")
anyio = pytest.importorskip("anyio")
httpx2 = pytest.importorskip("httpx2")

# Two file names whose ids in collection 1 share their first 6 hex digits, and two that share 8.
SAME_6 = ("n31.md", "n4718.md")
SAME_8 = ("n16463.md", "n156658.md")


def sha(path: str) -> str:
    return hashlib.sha1(f"1:{path}".encode()).hexdigest()


def test_the_pairs_collide_as_the_tests_assume():
    assert sha(SAME_6[0])[:6] == sha(SAME_6[1])[:6] and sha(SAME_6[0])[:7] != sha(SAME_6[1])[:7]
    assert sha(SAME_8[0])[:8] == sha(SAME_8[1])[:8]


@pytest.fixture
def colliding(kb, tmp_path):
    root = tmp_path / "dup"
    for name in (*SAME_6, *SAME_8, "solo.md"):
        write(root / name, f"# Note {name}\n\nbananas from {name}\n")
    kb.collections.create(root, name="dup")
    assert not kb.sync().errors
    return kb


def test_ids_are_unique_extended_on_collision_and_case_insensitive(colliding):
    kb = colliding
    ids = {name: kb.get(f"dup/{name}").docid for name in (*SAME_6, *SAME_8)}
    assert len(set(ids.values())) == 4
    assert all(len(d) >= 8 for d in ids.values())
    assert sorted(len(ids[n]) for n in SAME_8) == [8, 9]  # the second one was extended
    for name, docid in ids.items():
        assert kb.get(f"#{docid}").path == name
        assert kb.get(f"#{docid.upper()}").path == name
    for hit in kb.search("bananas", k=10):
        assert kb.get(f"#{hit.docid}").path == hit.path


def test_an_old_six_digit_id_works_when_unambiguous_and_names_candidates_when_not(colliding):
    kb = colliding
    unique = kb.get("dup/solo.md").docid[:6]
    assert kb.get(f"#{unique}").path == "solo.md"
    with pytest.raises(pms.PMSError, match=r"ambiguous.*dup/n31\.md.*dup/n4718\.md"):
        kb.get("#" + sha(SAME_6[0])[:6])
    with pytest.raises(pms.PMSError, match="no indexed note has the id #ffffff"):
        kb.get("#ffffff")


def test_the_migration_makes_old_colliding_ids_unique(colliding, db_path):
    kb = colliding
    kb.close()
    db = sqlite3.connect(db_path)  # the index as the schema before the docid migration left it: 6-digit ids, two alike
    db.execute("DROP INDEX documents_docid")
    db.execute("UPDATE documents SET docid = substr(docid, 1, 6)")
    db.execute("CREATE INDEX documents_docid ON documents(docid)")
    # the schema from just before the docid migration: it and every later one run again
    db.execute(f"PRAGMA user_version = {pms.schema.MIGRATIONS.index(pms.schema._unique_docids)}")
    db.commit()
    db.close()
    with pms.KnowledgeBase(db_path, embeddings=False) as again:
        ids = [again.get(f"dup/{name}").docid for name in (*SAME_6, *SAME_8)]
        assert len(set(ids)) == 4 and all(len(d) >= 8 for d in ids)
        assert again.get(f"#{ids[1]}").path == SAME_6[1]


def test_a_note_found_by_its_file_name_alone_any_case_without_md(vault):
    assert vault.get("rust").path == "dev/rust.md"
    assert vault.get("RUST.md").path == "dev/rust.md"
    assert vault.get("notes/dev/Rust").path == "dev/rust.md"
    with pytest.raises(pms.PMSError, match=r"did you mean notes/dev/rust\.md\?"):
        vault.get("rusty.md")


# -- bounded calls: a deadline per call, SIGTERM, a stdio client that goes away ------------------




def keyword_index(tmp: Path, folder: Path, *flags: str, name: str = "vault") -> tuple[Path, Path]:
    home, db = tmp / "home", tmp / "index.sqlite"
    home.mkdir(exist_ok=True)
    done = run_cli("collection", "add", folder, "--name", name, "--no-embed", *flags, db=db, env=mcp_env(home), timeout=600)
    assert done.returncode == 0, done.stderr
    return home, db





def many_notes(root: Path, n: int = 300) -> Path:
    for i in range(n):
        write(root / f"topic-{i // 50}" / f"note-{i}.md", f"# Note {i}\n\n" + "\n\n".join(
            f"Paragraph {j} of note {i} about gardening, cooking and travel plans, with enough words to embed. " * 8
            for j in range(3)))
    return root


def test_a_call_past_its_deadline_gets_one_line_and_the_server_goes_on(tmp_path):
    home, db = keyword_index(tmp_path, many_notes(tmp_path / "v", 60))

    async def main():
        async with mcp_stdio(home, db, "--timeout", "0.000001") as client:
            stopped = await client.call_tool("multi_get", {"pattern": "**/*.md"})
            assert stopped.is_error and "\n" not in stopped.content[0].text
            assert "multi_get took longer than" in stopped.content[0].text
            assert "search" in {t.name for t in (await client.list_tools()).tools}  # the session goes on

    anyio.run(main)


def test_the_api_deadline_stops_a_search_inside_sqlite(kb, tmp_path):
    kb.collections.create(many_notes(tmp_path / "v", 300), name="v")
    kb.sync()
    assert kb.search("gardening", k=5)
    with pytest.raises(pms.DeadlineExceeded, match="the search took longer than 0 s"), kb.time_limit(0, "the search"):
        kb.search("gardening", k=5)
    assert kb.search("gardening", k=5)  # the next call is not limited


@pytest.fixture
def unsynced(tmp_path, embedding_model_dir):
    """An index whose notes are registered, not yet indexed: a sync call embeds them (tens of seconds)."""
    home, db = tmp_path / "home", tmp_path / "index.sqlite"
    home.mkdir()
    done = run_cli("collection", "add", many_notes(tmp_path / "v", 300), "--name", "v", "--no-sync", db=db, env=mcp_env(home))
    assert done.returncode == 0, done.stderr
    return home, db


def test_sigterm_ends_an_http_server_in_the_middle_of_a_long_call(unsynced):
    home, db = unsynced
    with mcp_http(home, db, "--allow-sync") as (url, proc, _log):
        async def call_sync():
            with contextlib.suppress(Exception):
                async with mcp_http_client(url) as client:
                    await client.call_tool("sync", {})

        threading.Thread(target=anyio.run, args=(call_sync,), daemon=True).start()
        with pms.KnowledgeBase(db, embeddings=False) as index:
            wait_for(index.sync_running, "the sync under way")
        assert proc.poll() is None
        announced = home / "mcp-servers" / f"{proc.pid}.json"
        assert announced.exists()
        proc.terminate()
        proc.wait(10)  # hangs until the sync ends (a minute or more) without the fix
        assert not announced.exists()


def test_a_stdio_server_exits_when_its_client_closes_stdin_mid_call(unsynced):
    home, db = unsynced
    proc = subprocess.Popen([sys.executable, str(REPO / "pms.py"), "--db", str(db), "mcp", "--allow-sync"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=mcp_env(home))
    try:
        for message in ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}},
                        {"jsonrpc": "2.0", "method": "notifications/initialized"},
                        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "sync", "arguments": {}}}):
            proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1
        with pms.KnowledgeBase(db, embeddings=False) as index:
            wait_for(index.sync_running, "the sync under way")
        assert proc.poll() is None
        proc.stdin.close()
        proc.wait(10)  # an orphan that spins until the sync ends without the fix
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- answers a model can afford: lean hits, a byte budget, no absolute paths ----------------------

@pytest.fixture
def vault_index(tmp_path):
    """A keyword index of a small vault with one long chapter (60 KB) and notes with links."""
    root = tmp_path / "vault"
    write(root / "book" / "ch04-01-what-is-ownership.md", "# What is ownership\n\n" + "".join(
        f"Line {i}: ownership rules move values and borrowing lends references without copying.\n" for i in range(3, 700)))
    write(root / "book" / "ch04-02-references.md", "# References and borrowing\n\nSee [[ch04-01-what-is-ownership]].\n"
          "A reference borrows a value.\n\nMore about [[lifetimes]].\n")
    for i in range(12):
        write(root / "notes" / f"garden-{i}.md", f"# Garden note {i}\n\nTomatoes, basil and ownership of the allotment {i}.\n")
    return (*keyword_index(tmp_path, root, "--description", "a test vault"), root)


def test_answers_are_lean_bounded_and_say_how_to_read_on(vault_index):
    home, db, root = vault_index

    async def main():
        async with mcp_stdio(home, db) as client:
            found = await client.call_tool("search", {"query": "ownership", "k": 10})
            hits = found.structured_content["hits"]
            assert len(hits) == 10 and found.structured_content["count"] == 10
            assert all(set(h) == {"path", "title", "lines", "score", "relevance", "snippet", "docid"} for h in hits)
            answer = json.dumps(found.structured_content) + found.content[0].text
            assert str(root) not in answer and str(home) not in answer  # no absolute paths unless asked
            detailed = await client.call_tool("search", {"query": "ownership", "k": 1, "detail": True})
            assert detailed.structured_content["hits"][0]["abspath"].startswith(str(root))

            chapter = (await client.call_tool("get", {"path": "vault/book/ch04-01-what-is-ownership.md"})).structured_content
            assert chapter["truncated"] and len(chapter["text"].encode()) <= 20_000
            assert chapter["total_lines"] == 699 and chapter["next"] == f"vault/book/ch04-01-what-is-ownership.md:{chapter['to_line'] + 1}"
            rest = (await client.call_tool("get", {"path": chapter["next"], "max_bytes": 100_000})).structured_content
            assert not rest.get("truncated") and rest["to_line"] == 699 and rest["from_line"] == chapter["to_line"] + 1
            whole = (root / "book" / "ch04-01-what-is-ownership.md").read_text()
            assert chapter["text"] + "\n" + rest["text"] + "\n" == whole

            several = (await client.call_tool("multi_get", {"pattern": "vault/**/*.md"})).structured_content
            assert several["truncated"] and sum(len(d["text"].encode()) for d in several["documents"]) <= 20_000
            assert any("does not fit in max_bytes" in s["reason"] for s in several["skipped"])
            ranged = (await client.call_tool("multi_get", {"pattern": "vault/book/ch04-01-what-is-ownership.md:3:2, "
                                                                      "notes/garden-1.md:1:1"})).structured_content
            assert [(d["from_line"], d["to_line"]) for d in ranged["documents"]] == [(3, 4), (1, 1)]  # :FROM:COUNT honoured

    anyio.run(main)


def test_lookup_lines_and_errors_are_worded_for_an_assistant(vault_index):
    home, db, _root = vault_index

    async def main():
        async with mcp_stdio(home, db) as client:
            got = await client.call_tool("get", {"path": "ch04-01-what-is-ownership"})  # file name alone, no .md
            assert got.structured_content["path"] == "vault/book/ch04-01-what-is-ownership.md"
            docid = got.structured_content["docid"]
            assert (await client.call_tool("get", {"path": f"#{docid.upper()}"})).structured_content["docid"] == docid
            missing = await client.call_tool("get", {"path": "ch04-01-what-is-owner.md"})
            assert missing.is_error and "did you mean vault/book/ch04-01-what-is-ownership.md?" in missing.content[0].text
            short = (await client.call_tool("get", {"path": "vault/book/ch04-02-references.md"})).structured_content
            assert short["to_line"] == 6 == short["total_lines"]  # not the empty "line" after the final newline
            zero = await client.call_tool("get", {"path": "vault/book/ch04-02-references.md:2:0"})
            assert zero.is_error and "line count must be 1 or more" in zero.content[0].text
            links = await client.call_tool("links", {"path": "vault/book/ch04-02-references.md:3:4"})
            assert not links.is_error and links.structured_content["count"] == 2
            assert links.structured_content["links"][0]["path"] == "vault/book/ch04-01-what-is-ownership.md"
            bad_date = await client.call_tool("search", {"query": "x", "after": "last tuesday"})
            assert bad_date.content[0].text == "after wants a date (YYYY-MM-DD, YYYY-MM, YYYY, today, yesterday, or a time back such as 7d, 2w, 3m, 1y), not 'last tuesday'"
            off = await client.call_tool("sync", {})
            assert off.is_error and "pms.py" not in off.content[0].text and "--allow-sync" in off.content[0].text

    anyio.run(main)


def test_the_server_describes_its_collections_tools_and_notes(vault_index):
    home, db, _root = vault_index

    async def main():
        async with mcp_stdio(home, db) as client:
            assert "vault (14 notes: a test vault)" in client.instructions
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert "sync" not in tools  # off on this server, so not offered
            assert all(t.annotations.read_only_hint and t.annotations.destructive_hint is False for t in tools.values())
            for name, tool in tools.items():  # the output schema names every field an answer holds
                assert tool.output_schema, name
            found = await client.call_tool("search", {"query": "garden", "k": 2, "detail": True})
            promised = set(tools["search"].output_schema["properties"]["hits"]["items"]["properties"])
            assert set(found.structured_content["hits"][0]) <= promised
            templates = (await client.list_resource_templates()).resource_templates
            assert templates[0].uri_template == "pms://{collection}/{path}"
            note = await client.read_resource("pms://vault/book/ch04-02-references.md")
            assert note.contents[0].text.startswith("# References and borrowing")
            listed = (await client.list_resources()).resources
            assert "pms://vault/notes/garden-1.md" in {str(r.uri) for r in listed}

    anyio.run(main)


# -- freshness: pms watch, mcp --watch, a search that says the index is older ---------------------


def test_pms_watch_syncs_a_note_written_after_it_started(tmp_path):
    folder = tmp_path / "v"
    write(folder / "a.md", "# A\n\nalpha\n")
    home, db = keyword_index(tmp_path, folder)
    proc = subprocess.Popen([sys.executable, str(REPO / "pms.py"), "--db", str(db), "watch"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=mcp_env(home))
    try:
        assert "watching vault" in proc.stderr.readline()
        write(folder / "new" / "b.md", "# B\n\nthe quokka is a small marsupial\n")  # in a folder that did not exist

        def found():
            done = run_cli("search", "quokka", "--json", "--mode", "keyword", db=db, env=mcp_env(home))
            return done.returncode == 0 and json.loads(done.stdout)
        assert wait_for(found, "the new note is searchable")[0]["path"] == "new/b.md"
        assert any("+1 new" in proc.stdout.readline() for _ in range(2))
    finally:
        proc.terminate()
        proc.wait(15)


def test_the_http_server_watches_by_default_and_a_search_says_when_the_index_is_older(tmp_path):
    folder = tmp_path / "v"
    write(folder / "a.md", "# A\n\nalpha wombat\n")
    home, db = keyword_index(tmp_path, folder)

    async def search(client, query):
        return (await client.call_tool("search", {"query": query, "mode": "keyword"})).structured_content

    async def stale_notice():
        async with mcp_stdio(home, db) as client:  # stdio: no watching unless asked
            (folder / "a.md").write_text("# A\n\nalpha wombat, edited\n", encoding="utf-8")
            answer = await search(client, "wombat")
            assert "the index is older than 1 of these notes (vault/a.md)" in answer["notice"]

    anyio.run(stale_notice)

    keyword_only = mcp_env(home) | {"PMS_MODEL_DIR": str(tmp_path / "no-model")}  # syncs without embedding: quicker
    with mcp_http(home, db, env=keyword_only) as (url, _proc, _log):
        async def fresh():
            async with mcp_http_client(url) as client:
                write(folder / "b.md", "# B\n\nnumbat\n")
                for _ in range(240):
                    answer = await search(client, "numbat")
                    if answer["hits"]:
                        break
                    await anyio.sleep(0.5)
                assert answer["hits"][0]["path"] == "vault/b.md"
                assert "notice" not in await search(client, "wombat")  # caught up with the edit too

        anyio.run(fresh)


# -- exclusions and containment ---------------------------------------------------------------------

def test_exclusions_from_the_collection_pmsignore_and_obsidian(tmp_path, cli, db_path):
    root = tmp_path / "vault"
    for rel in ("keep.md", "drafts/d.md", "deep/drafts/e.md", "x.tmp.md", "archive/2019/old.md", "archive/2020/new.md",
                "Templates/t.md", "ignored/i.md"):
        write(root / rel, f"# {rel}\n\nplatypus\n")
    write(root / ".pmsignore", "# what not to index\narchive/2019/**\nignored/\n")
    write(root / ".obsidian" / "app.json", json.dumps({"userIgnoreFilters": ["Templates/"]}))
    done = cli("collection", "add", root, "--name", "v", "--no-embed", "--exclude", "drafts", "--exclude", "*.tmp.md", db=db_path)
    assert done.returncode == 0, done.stderr
    found = json.loads(cli("search", "platypus", "--json", "-n", "20", db=db_path).stdout)
    assert sorted(h["path"] for h in found) == ["archive/2020/new.md", "keep.md"]
    shown = cli("collection", "show", "v", db=db_path).stdout
    assert "drafts, *.tmp.md  [exclude]" in shown and "archive/2019/**, ignored/  [.pmsignore]" in shown
    assert "Templates/  [obsidian]" in shown
    assert cli("collection", "exclude", "v", "drafts", db=db_path).returncode == 0  # *.tmp.md no longer excluded
    assert cli("sync", db=db_path).returncode == 0
    found = json.loads(cli("search", "platypus", "--json", "-n", "20", db=db_path).stdout)
    assert sorted(h["path"] for h in found) == ["archive/2020/new.md", "keep.md", "x.tmp.md"]


def test_pmsignore_lines_that_cannot_be_read_are_warnings_naming_file_and_line(tmp_path, pms_main, db_path):
    root = tmp_path / "vault"
    for rel in ("keep.md", "drafts/d.md", "odd.md"):
        write(root / rel, f"# {rel}\n\nplatypus\n")
    ignore = root / ".pmsignore"
    ignore.write_bytes(b"# comment\ndrafts/\n[z-a]*.md\n!keep.md\n\xff\xfe.md\n")
    write(root / ".obsidian" / "app.json", "{not json")
    with pms.KnowledgeBase(db_path, embeddings=False) as kb:
        kb.collections.create(root, name="v")
        report = kb.sync()  # the sync goes on: the good line applies, the bad ones exclude nothing
        assert not report.errors and sorted(kb.collections.get("v").files) == ["keep.md", "odd.md"]
        expected = [f"{ignore}:3: bad pattern for .pmsignore: '[z-a]*.md' (the range z-a is backwards); the line is ignored",
                    f"{ignore}:4: '!keep.md': '!' (include again) is not supported; the line is ignored",
                    f"{ignore}:5: not valid UTF-8; the line is ignored",
                    f"{root / '.obsidian' / 'app.json'}: not a JSON object; Obsidian's excluded files are not applied"]
        assert report.warnings == expected
        assert kb.status()["warnings"] == expected  # what MCP's status tool returns
        assert kb.status(pending=False)["collections_detail"][0]["exclusion_warnings"] == expected
    synced = pms_main("sync", db=db_path)
    assert synced.returncode == 0 and f"pms: warning: {ignore}:3: bad pattern" in synced.stderr
    assert synced.stderr.count("pms: warning: ") == 4
    status = pms_main("status", db=db_path)
    assert status.returncode == 0 and f"Warning:     {ignore}:4: '!keep.md'" in status.stdout
    dry = pms_main("sync", "--dry-run", db=db_path)
    assert dry.returncode == 0 and dry.stderr.count("pms: warning: ") == 4


def test_a_symlink_out_of_the_collection_is_not_indexed_nor_served(tmp_path, kb):
    secret = write(tmp_path / "outside" / "secret.md", "# Secret\n\nthe launch codes are wombat\n")
    write(tmp_path / "outside" / "more" / "s2.md", "# Secret 2\n\nwombat again\n")
    root = tmp_path / "r"
    write(root / "ok.md", "# Ok\n\nnothing here but wombat\n")
    (root / "leak.md").symlink_to(secret)
    (root / "linked").symlink_to(tmp_path / "outside" / "more", target_is_directory=True)
    kb.collections.create(root, name="r")
    report = kb.sync()
    assert [h.path for h in kb.search("wombat")] == ["ok.md"]
    assert sum("leads outside" in why for _, why in report.skipped) == 2
    (root / "ok.md").unlink()
    (root / "ok.md").symlink_to(secret)  # replaced after the sync
    with pytest.raises(pms.PMSError, match="symlink that leads outside"):
        kb.get("r/ok.md")


# -- HTTP and JSON-RPC hygiene --------------------------------------------------------------------------

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}


@pytest.fixture
def small_index(tmp_path):
    folder = tmp_path / "v"
    write(folder / "a.md", "# A\n\nalpha wombat\n")
    return keyword_index(tmp_path, folder)


def test_sessions_expire_when_idle_and_bad_requests_get_the_codes_the_spec_names(small_index):
    home, db = small_index
    token = "s3cret-token"
    with mcp_http(home, db, "--session-idle", "1", "--token", token) as (url, _proc, log), \
            httpx2.Client(timeout=30) as http:
        auth = {**ACCEPT, "Authorization": f"bearer {token}"}  # the scheme in any case (RFC 9110)
        opened = http.post(url, json=INITIALIZE, headers=auth)
        assert opened.status_code == 200, opened.text
        session = {**auth, "mcp-session-id": opened.headers["mcp-session-id"]}
        time.sleep(3)  # the session is left unused past --session-idle
        assert http.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers=session).status_code == 404
        assert http.post(url, json=INITIALIZE, headers=auth).status_code == 200  # new clients are served

        for bad_id in (None, {"a": 1}, [1]):
            answer = http.post(url, json={"jsonrpc": "2.0", "id": bad_id, "method": "ping"}, headers=auth)
            assert answer.status_code == 400 and answer.json()["error"]["code"] == -32600, answer.text
        not_rpc = http.post(url, json={"hello": "world"}, headers=auth)
        assert not_rpc.status_code == 400 and not_rpc.json()["error"]["code"] == -32600

        search = url[: -len("/mcp")] + "/search"
        ok = {"search": {"query": "wombat", "k": 3}, "db": str(db.resolve())}
        assert http.post(search, json=ok, headers=auth).json()["hits"][0]["path"] == "a.md"
        for bad in ({"k": -5}, {"k": "many"}, {"note_filter": "tags"}, {"collections": "vault"}, {"note_filter": {"colour": "x"}},
                    {"note_filter": {"after": "March"}}, {"mode": "fast"}, {"prefix": True}, {"min_score": 2}, {"queries": [1, 2]}):
            answer = http.post(search, json={**ok, "search": {**ok["search"], **bad}}, headers=auth)
            assert answer.status_code == 400 and "\n" not in answer.json()["error"], (bad, answer.text)
        for body in ([1], {"db": ok["db"]}, {**ok, "search": "wombat"}):
            answer = http.post(search, json=body, headers=auth)
            assert answer.status_code == 400 and "\n" not in answer.json()["error"], (body, answer.text)
        huge = http.post(search, content=b'{"query": "' + b"x" * (5 * 1024 * 1024) + b'"}', headers=auth)
        assert huge.status_code == 413
    assert not any("Traceback" in line or "Exception" in line for line in log), "".join(log)


def test_stdio_requests_with_bad_ids_are_answered_not_dropped(small_index):
    home, db = small_index
    lines = [INITIALIZE, {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"}, {"jsonrpc": "2.0", "id": None, "method": "tools/list"},
             {"jsonrpc": "2.0", "id": 5, "method": "ping"}]
    proc = subprocess.Popen([sys.executable, str(REPO / "pms.py"), "--db", str(db), "mcp"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=mcp_env(home))
    try:
        proc.stdin.write("".join(json.dumps(m) + "\n" for m in lines))
        proc.stdin.flush()
        answers = [json.loads(proc.stdout.readline()) for _ in range(4)]
    finally:
        proc.stdin.close()
        proc.wait(30)
    assert [a.get("error", {}).get("code") for a in answers[1:3]] == [-32600, -32600]
    assert answers[3] == {"jsonrpc": "2.0", "id": 5, "result": {}}


def test_each_server_announces_itself_and_the_cli_skips_stale_hung_and_token_servers(small_index, tmp_path):
    home, db = small_index
    announced = home / "mcp-servers"
    env = mcp_env(home) | {"PMS_MODEL_DIR": str(tmp_path / "no-model")}
    with mcp_http(home, db, "--no-watch") as (_url1, first, _l1):
        with mcp_http(home, db, "--no-watch") as (_url2, second, _l2):
            assert {p.name for p in announced.glob("*.json")} == {f"{first.pid}.json", f"{second.pid}.json"}
        assert [p.name for p in announced.glob("*.json")] == [f"{first.pid}.json"]  # the second withdrew only its own
    assert not list(announced.glob("*.json"))

    # A server that accepts connections and never answers, and one that is gone: skipped.
    import socket
    hung = socket.create_server(("127.0.0.1", 0))
    port = hung.getsockname()[1]
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    for pid in (os.getpid(), int(dead.stdout)):
        (announced / f"{pid}.json").write_text(json.dumps({
            "url": f"http://127.0.0.1:{port}/mcp", "search_url": f"http://127.0.0.1:{port}/search", "pid": pid,
            "db": str(db.resolve()), "version": pms.__version__}))
    try:
        done = run_cli("search", "wombat", "--json", db=db, env=env, timeout=8)  # waited 10.5 s before
        assert done.returncode == 0 and json.loads(done.stdout)[0]["path"] == "a.md"
        assert not (announced / f"{int(dead.stdout)}.json").exists()  # the gone one's announcement is removed
    finally:
        hung.close()
        (announced / f"{os.getpid()}.json").unlink()

    with mcp_http(home, db, "--no-watch", "--token", "abc") as (_url, _proc, _log):
        done = run_cli("search", "wombat", "--json", db=db, env=env)
        assert done.returncode == 0 and "wants its token (set PMS_MCP_TOKEN)" in done.stderr
        with_token = run_cli("search", "wombat", "--json", db=db, env=env | {"PMS_MCP_TOKEN": "abc"})
        assert with_token.returncode == 0 and "token" not in with_token.stderr


# -- "nothing relevant", said plainly: an absolute relevance per hit, min_score ------------------------

@pytest.fixture(scope="module")
def samples_hybrid(tmp_path_factory, embedding_model_dir):
    tmp = tmp_path_factory.mktemp("relevance")
    home, db = tmp / "home", tmp / "index.sqlite"
    home.mkdir()
    done = run_cli("collection", "add", REPO / "sample-notes", "--name", "samples", db=db, env=mcp_env(home), timeout=600)
    assert done.returncode == 0, done.stderr
    return home, db


def test_a_query_the_notes_cannot_answer_is_said_to_be_so(samples_hybrid):
    home, db = samples_hybrid

    async def main():
        async with mcp_stdio(home, db) as client:
            good = (await client.call_tool("search", {"query": "rotate my ssh keys", "k": 3})).structured_content
            assert good["hits"][0]["relevance"] >= 0.35 and "notice" not in good
            bread = (await client.call_tool("search", {"query": "best sourdough bread hydration", "k": 3})).structured_content
            assert bread["hits"] and all(h["relevance"] < 0.35 for h in bread["hits"])
            assert "nothing looks clearly relevant" in bread["notice"]
            none = (await client.call_tool("search", {"query": "zxqv flurble wibble", "min_score": 0.35})).structured_content
            assert none["count"] == 0 and "nothing in the notes matches" in none["notice"]
            kept = (await client.call_tool("search", {"query": "rotate my ssh keys", "min_score": 0.35, "detail": True}))
            assert all(h["relevance"] >= 0.35 and h["similarity"] is not None for h in kept.structured_content["hits"])

    anyio.run(main)
    cli = run_cli("search", "best sourdough bread hydration", "--min-score", "0.35", db=db, env=mcp_env(home))
    assert cli.returncode == 0 and cli.stdout.strip() == "No results."
    weak = run_cli("search", "best sourdough bread hydration", db=db, env=mcp_env(home))
    assert "nothing looks clearly relevant" in weak.stderr
    bad = run_cli("search", "x", "--min-score", "2", db=db, env=mcp_env(home))
    assert bad.returncode == 1 and "--min-score wants a number from 0 to 1" in bad.stderr


def test_keyword_relevance_is_the_share_of_words_held(vault):
    hits = vault.search("restic offsite rule", mode="keyword")
    assert hits[0].path == "backup.md" and hits[0].matched == 1.0 and hits[0].relevance == 1.0
    assert hits[0].similarity is None
    partial = vault.search("restic zebra", mode="keyword")
    # Each word weighs its rarity (RankingSettings.relevance_idf): zebra, in no note, more than
    # restic; a share under 1 counts partial_match_weight (0.5) of it.
    assert 0 < partial[0].matched < 0.5 and partial[0].relevance == pytest.approx(partial[0].matched * 0.5, abs=0.001)
    assert partial.weak and partial.best_relevance == partial[0].relevance
    alike = pms.KnowledgeBase(vault.db_path, embeddings=False, ranking=pms.RankingSettings(relevance_idf=False))
    assert alike.search("restic zebra", mode="keyword")[0].matched == 0.5


def test_several_phrasings_in_one_call_are_fused(vault):
    assert not vault.search("zebra", mode="keyword")
    both = vault.search("zebra", queries=["restic offsite", "syncthing conflict copy"], mode="keyword", k=5)
    assert {h.path for h in both} == {"backup.md", "sync.md"} and both.explain == "3 queries, fused by RRF"
    with pytest.raises(pms.PMSError, match="at most 5"):
        vault.search("x", queries=["a"] * 6)


def test_mcp_search_takes_several_queries_and_an_intent(samples_hybrid):
    home, db = samples_hybrid

    async def main():
        async with mcp_stdio(home, db) as client:
            found = (await client.call_tool("search", {
                "query": "replace my ssh key", "queries": ["ssh key rotation", "lost laptop keys"],
                "intent": "I lost my laptop and need to secure my servers", "k": 3})).structured_content
            assert found["hits"][0]["path"] == "samples/dev/ssh-key-rotation.md"
            too_many = await client.call_tool("search", {"query": "x", "queries": ["a"] * 6})
            assert too_many.is_error and "queries" in too_many.content[0].text

    anyio.run(main)
