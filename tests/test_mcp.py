"""The MCP server (pms.py mcp) driven by the official SDK's own clients.

Each server runs as a real subprocess on a real index of the sample notes,
reached through the SDK's stdio client or its Streamable HTTP client; raw
HTTP and raw stdin lines cover what a well-behaved client never sends.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, mcp_env, mcp_http, mcp_http_client, mcp_stdio, model_dir, run_cli, write

mcp = pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install -r requirements-dev.txt)")
anyio = pytest.importorskip("anyio")
httpx2 = pytest.importorskip("httpx2")
from mcp import Client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

SAMPLES = REPO / "sample-notes"
DESCRIPTION = "sample notes shipped with PMS"
TOOLS = {"search", "get", "multi_get", "status", "sync", "related", "links"}



def build_index(tmp: Path, folder: Path) -> tuple[Path, Path]:
    home, db = tmp / "home", tmp / "index.sqlite"
    home.mkdir()
    done = run_cli("collection", "add", folder, "--name", "samples", "--description", DESCRIPTION, db=db,
                   env=mcp_env(home), timeout=600)
    assert done.returncode == 0, done.stderr
    return home, db


@pytest.fixture(scope="module")
def index(tmp_path_factory, embedding_model_dir) -> tuple[Path, Path]:
    """(PMS_HOME, index file) of the sample notes, embedded with the offline model (hybrid search)."""
    return build_index(tmp_path_factory.mktemp("mcp"), SAMPLES)





def run(coro_fn, *args):
    return anyio.run(coro_fn, *args)


def error_text(result) -> str:
    assert result.is_error, result
    return result.content[0].text


# -- every tool through both transports -------------------------------------------------

async def exercise_every_tool(client: Client, sync_allowed: bool) -> None:
    listed = {t.name: t for t in (await client.list_tools()).tools}
    assert set(listed) == (TOOLS if sync_allowed else TOOLS - {"sync"})  # a tool that is off is not offered
    for tool in listed.values():
        assert len(tool.description or "") > 40, tool.name
        for name, schema in tool.input_schema.get("properties", {}).items():
            assert schema.get("description"), f"{tool.name}.{name} has no description"
    assert listed["search"].input_schema["required"] == ["query"]
    assert listed["search"].input_schema["properties"]["mode"]["enum"] == ["auto", "hybrid", "keyword", "vector"]

    found = await client.call_tool("search", {"query": "rotate my ssh keys", "k": 3})
    assert not found.is_error, found.content
    hits = found.structured_content["hits"]
    assert found.structured_content["mode"] == "hybrid"
    assert 1 <= len(hits) <= 3
    top = hits[0]
    assert set(top) == {"path", "title", "lines", "score", "relevance", "snippet", "docid"}  # lean by default
    assert top["path"] == "samples/dev/ssh-key-rotation.md"
    start, end = top["lines"]
    assert 1 <= start <= end
    assert f"1. {top['path']}:{start}-{end} #{top['docid']} relevance" in found.content[0].text  # the same answer, as text
    detailed = (await client.call_tool("search", {"query": "rotate my ssh keys", "k": 3, "detail": True})).structured_content
    assert detailed["hits"][0]["collection_description"] == DESCRIPTION

    # The hit's line range, read back with get, is those very lines of the file.
    file_lines = (SAMPLES / top["path"].removeprefix("samples/")).read_text(encoding="utf-8").split("\n")
    count = end - start + 1
    passage = await client.call_tool("get", {"path": f"{top['path']}:{start}:{count}"})
    doc = passage.structured_content
    assert (doc["from_line"], doc["to_line"]) == (start, end)
    assert doc["text"] == "\n".join(file_lines[start - 1 : end])
    numbered = await client.call_tool("get", {"path": f"#{top['docid']}", "from_line": 2.0, "count": 2, "line_numbers": True})
    assert numbered.structured_content["text"] == f"    2  {file_lines[1]}\n    3  {file_lines[2]}"

    tagged = (await client.call_tool("search", {"query": "keys", "k": 10, "tags": ["security"], "detail": True})).structured_content
    assert tagged["hits"] and all("security" in h["tags"] for h in tagged["hits"])
    in_home = (await client.call_tool("search", {"query": "list", "k": 10, "path_filter": "home/"})).structured_content
    assert in_home["hits"] and all(h["path"].startswith("samples/home/") for h in in_home["hits"])
    in_prefix = (await client.call_tool("search", {"query": "list", "path_filter": "hom"})).structured_content
    assert not in_prefix["hits"] and "path_filter hom is a folder; 'hom*' matches names that start with it" in in_prefix["notice"]
    listed_by_tag = (await client.call_tool("search", {"query": "", "tags": ["security"]})).structured_content
    assert {h["path"] for h in listed_by_tag["hits"]} >= {"samples/dev/ssh-key-rotation.md"}

    related = (await client.call_tool("related", {"path": "samples/dev/rust-ownership-and-borrowing.md", "k": 3,
                                                  "detail": True})).structured_content
    assert 1 <= len(related["hits"]) <= 3 and "samples/dev/rust-ownership-and-borrowing.md" not in [h["path"] for h in related["hits"]]
    assert all(h["heading_path"] and h["snippet"] and "<mark>" not in h["snippet"] for h in related["hits"])
    links = (await client.call_tool("links", {"path": "samples/reading/reading-list.md"})).structured_content["links"]
    assert {"samples/reading/how-to-take-smart-notes.md", "samples/dev/rust-ownership-and-borrowing.md"} <= {link["path"] for link in links}
    back = await client.call_tool("links", {"path": "samples/reading/reading-list.md", "direction": "backlinks"})
    back_paths = [link["path"] for link in back.structured_content["links"]]
    assert "samples/reading/how-to-take-smart-notes.md" in back_paths and "samples/reading/reading-list.md" not in back_paths

    passages = await client.call_tool("search", {"query": "ssh key", "k": 5, "passages": True, "mode": "keyword",
                                               "collections": ["samples"]})
    assert passages.structured_content["mode"] == "keyword"
    assert len({(h["path"], h["lines"][0]) for h in passages.structured_content["hits"]}) == len(passages.structured_content["hits"])
    by_note = await client.call_tool("search", {"query": "ssh key", "k": 5, "mode": "keyword", "collections": ["samples"]})
    assert len({h["path"] for h in by_note.structured_content["hits"]}) == len(by_note.structured_content["hits"])
    # "chunks", the old name of "passages", still works
    old_name = await client.call_tool("search", {"query": "ssh key", "k": 5, "chunks": True, "mode": "keyword",
                                               "collections": ["samples"]})
    assert old_name.structured_content["hits"] == passages.structured_content["hits"] != by_note.structured_content["hits"]

    # max_bytes bounds the whole answer: notes are added whole while they fit, the rest are skipped.
    wanted = ["dev/shell-one-liners.md", "dev/sqlite-full-text-search.md", "dev/ssh-key-rotation.md", "quick-capture.md"]
    several = (await client.call_tool("multi_get", {"pattern": "samples/dev/s*.md, samples/quick-capture.md",
                                                    "max_bytes": 2500})).structured_content
    got = {d["path"] for d in several["documents"]}
    skipped = {s["ref"] for s in several["skipped"]}
    assert got | skipped == {f"samples/{p}" for p in wanted} and not got & skipped
    assert sum(len(d["text"].encode()) for d in several["documents"]) <= 2500
    assert several["truncated"] and several["count"] == len(got) >= 1
    for d in several["documents"]:
        whole = (SAMPLES / d["path"].removeprefix("samples/")).read_text(encoding="utf-8")
        assert d["text"] == whole or (d.get("truncated") and whole.startswith(d["text"]))

    status = (await client.call_tool("status", {})).structured_content
    assert [(c["name"], c["description"], c["notes"]) for c in status["collections_detail"]] == \
        [("samples", DESCRIPTION, len(list(SAMPLES.rglob("*.md"))))]
    assert status["pending"] == {"added": 0, "updated": 0, "deleted": 0}
    assert status["warnings"] == []  # lines of a .pmsignore that cannot be read (tests/test_agents.py)

    synced = await client.call_tool("sync", {})
    if sync_allowed:
        assert not synced.is_error and synced.structured_content["unchanged"] == status["notes"]
    else:
        assert "--allow-sync" in error_text(synced)


def test_stdio_client_lists_and_calls_every_tool(index):
    home, db = index

    async def main():
        async with mcp_stdio(home, db) as client:
            await exercise_every_tool(client, sync_allowed=False)

    run(main)


def test_http_client_lists_and_calls_every_tool(index):
    home, db = index

    async def main(url):
        async with mcp_http_client(url) as client:
            await exercise_every_tool(client, sync_allowed=True)

    with mcp_http(home, db, "--allow-sync") as (url, _proc, _log):
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/mcp", url)
        run(main, url)


def test_search_k_counts_results_and_names_their_copies(tmp_path, embedding_model_dir):
    """A copy (a print chapter holding a section's text) is named on its original's row, not counted in k."""
    folder = tmp_path / "v"
    paragraphs = ["Ownership is a set of rules that govern how a program manages memory while it runs.",
                  "Each value has an owner, there can only be one owner at a time, and the value is dropped with its owner."]
    write(folder / "ownership.md", "# What Is Ownership?\n\n" + "\n\n".join(paragraphs) + "\n")
    write(folder / "book.md", "# Understanding Ownership\n\n## What Is Ownership?\n\n" + "\n\n".join(paragraphs)
          + "\n\n## Slices\n\nSlices let you reference a contiguous sequence of elements rather than the whole collection.\n")
    for i in range(3):
        write(folder / f"memory-{i}.md", f"# Memory {i}\n\nHow a program manages memory by the rules, note {i}.\n")
    home, db = build_index(tmp_path, folder)

    async def main():
        async with mcp_stdio(home, db) as client:
            found = await client.call_tool("search", {"query": "ownership rules memory", "k": 2, "mode": "keyword"})
            assert not found.is_error, found.content
            answer = found.structured_content
            paths = [h["path"] for h in answer["hits"]]
            assert answer["count"] == len(paths) == 2 and paths[0] == "samples/ownership.md", paths
            assert answer["hits"][0]["copies"] == ["samples/book.md"] and "copies" not in answer["hits"][1]
            assert "   copies: samples/book.md" in found.content[0].text

    run(main)


# -- bad requests: a clean one-line error, and the next call still works --------------

async def still_works(client: Client) -> None:
    again = await client.call_tool("search", {"query": "shakshuka", "k": 1})
    assert not again.is_error and again.structured_content["hits"][0]["path"] == "samples/home/shakshuka-recipe.md"


async def check_bad_calls(client: Client) -> None:
    with pytest.raises(MCPError, match="unknown tool 'delete_everything'"):
        await client.call_tool("delete_everything", {})
    await still_works(client)
    cases: list[tuple[dict, str]] = [
        ({"query": "x", "k": 0}, "bad argument 'k' for search: 0 is less than the minimum of 1"),
        ({"query": "x", "mode": "fuzzy"}, "bad argument 'mode' for search: 'fuzzy' is not one of"),
        ({"k": 3}, "bad argument for search: 'query' is a required property"),
        ({"query": "x", "limit": 3}, "bad argument for search: Additional properties are not allowed"),
        ({"query": "x", "collections": ["nope"]}, "no collection named 'nope'"),
        ({"query": "x", "after": "last tuesday"}, "last tuesday"),
        ({"query": "x", "tags": "security"}, "bad argument 'tags' for search: 'security' is not of type 'array'"),
    ]
    for arguments, message in cases:
        text = error_text(await client.call_tool("search", arguments))
        assert text.startswith(message) or message in text, text
        assert "\n" not in text and "Traceback" not in text
        await still_works(client)
    secret = "/etc/passwd"
    for path in [secret, "../../../../etc/passwd", "samples/../../../etc/passwd", str(SAMPLES.parent / "README.md")]:
        text = error_text(await client.call_tool("get", {"path": path}))
        assert text.startswith("no indexed note matches"), text
        assert "root:" not in text
        await still_works(client)
    multi = await client.call_tool("multi_get", {"pattern": "/etc/*, ../*"})
    assert multi.structured_content["documents"] == []
    await still_works(client)


def test_stdio_bad_calls_get_clean_errors(index):
    home, db = index

    async def main():
        async with mcp_stdio(home, db) as client:
            await check_bad_calls(client)

    run(main)


def test_http_bad_calls_get_clean_errors(index):
    home, db = index

    async def main(url):
        async with mcp_http_client(url) as client:
            await check_bad_calls(client)

    with mcp_http(home, db) as (url, _proc, _log):
        run(main, url)


def test_stdio_malformed_lines_get_json_rpc_errors(index):
    """Raw lines on stdin: not JSON, then JSON that is no JSON-RPC message; the session goes on."""
    home, db = index
    lines = [
        "{not json",
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json.dumps({"hello": "world"}),
        json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "get", "arguments": {"path": "samples/quick-capture.md:1:1"}}}),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PMS_")} | mcp_env(home)
    proc = subprocess.Popen([sys.executable, str(REPO / "pms.py"), "--db", str(db), "mcp"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        proc.stdin.write("\n".join(lines) + "\n")
        proc.stdin.flush()
        answers = [json.loads(proc.stdout.readline()) for _ in range(4)]  # the notification gets none
    finally:
        proc.stdin.close()
        proc.wait(30)
    assert answers[0] == {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error: not valid JSON"}}
    assert answers[1]["id"] == 1 and answers[1]["result"]["serverInfo"]["name"] == "pms"
    assert answers[2]["id"] is None and answers[2]["error"]["code"] == -32600
    assert answers[3]["id"] == 2
    first_line = (SAMPLES / "quick-capture.md").read_text(encoding="utf-8").split("\n")[0]
    assert answers[3]["result"]["structuredContent"]["text"] == first_line
    assert "Traceback" not in proc.stderr.read()


def test_http_rejects_foreign_hosts_bad_json_and_missing_token(index):
    home, db = index
    token = "correct-horse-battery"
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    good = {**accept, "Authorization": f"Bearer {token}"}

    async def session_works(url):
        async with mcp_http_client(url, {"Authorization": f"Bearer {token}"}) as client:
            await still_works(client)

    with mcp_http(home, db, "--token", token) as (url, _proc, _log):
        with httpx2.Client(timeout=30) as http:
            assert http.post(url, json=ping, headers=accept).status_code == 401
            assert http.post(url, json=ping, headers={**accept, "Authorization": "Bearer wrong"}).status_code == 401
            run(session_works, url)
            # DNS rebinding: a page on evil.example that resolves to 127.0.0.1 sends its own Host and Origin.
            assert http.post(url, json=ping, headers={**good, "Host": "evil.example"}).status_code == 421
            assert http.post(url, json=ping, headers={**good, "Origin": "http://evil.example"}).status_code == 403
            run(session_works, url)
            for body, code in [("{not json", -32700), ('{"hello": "world"}', None), ("[]", None)]:
                answer = http.post(url, content=body, headers=good)
                assert answer.status_code == 400, body
                error = answer.json()["error"]
                assert "\n" not in error["message"], error
                if code:
                    assert error["code"] == code
                run(session_works, url)
            ok = http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}},
                headers={**good, "Origin": "http://localhost:3000"})
            assert ok.status_code == 200 and '"serverInfo"' in ok.text


@pytest.mark.stdlib
def test_mcp_without_the_sdk_says_how_to_get_it(tmp_path):
    """The stdlib-only interpreter (-S: no site-packages) gets one line, not a traceback."""
    done = run_cli("mcp", db=tmp_path / "index.sqlite", python_flags=("-S",), env={"PMS_HOME": str(tmp_path)})
    assert done.returncode == 1
    assert done.stderr.strip() == ("pms: error: the MCP server needs the mcp package"
                                   ": pip install mcp (run: python3 pms.py setup)")


# -- concurrency -----------------------------------------------------------------------

@pytest.mark.slow
def test_two_clients_search_while_a_sync_runs(tmp_path, embedding_model_dir):
    """One client re-indexes 150 new notes while two others keep searching and reading: no call fails."""
    folder = tmp_path / "notes"
    shutil.copytree(SAMPLES, folder)
    home, db = build_index(tmp_path, folder)
    for i in range(150):
        (folder / "bulk" / f"note-{i:03}.md").parent.mkdir(exist_ok=True)
        (folder / "bulk" / f"note-{i:03}.md").write_text(
            f"# Bulk note {i}\n\nAbout topic {i % 7}: lighthouses, tide tables and harbour {i}.\n\n"
            + "Another paragraph on rope knots and sail repair.\n" * 5, encoding="utf-8")
    calls: dict[str, int] = {"reader-1": 0, "reader-2": 0}

    async def reader(url, name, sync_done):
        async with mcp_http_client(url) as client:
            while not sync_done.is_set() or calls[name] == 0:
                found = await client.call_tool("search", {"query": "ssh key rotation", "k": 3})
                assert not found.is_error, found.content
                assert found.structured_content["hits"][0]["path"] == "samples/dev/ssh-key-rotation.md"
                read = await client.call_tool("get", {"path": "samples/dev/ssh-key-rotation.md:1:3"})
                assert not read.is_error, read.content
                calls[name] += 1

    async def main(url):
        sync_done = anyio.Event()
        report = {}

        async def syncer():
            async with mcp_http_client(url) as client:
                result = await client.call_tool("sync", {})
                assert not result.is_error, result.content
                report.update(result.structured_content)
                sync_done.set()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(syncer)
            tasks.start_soon(reader, url, "reader-1", sync_done)
            tasks.start_soon(reader, url, "reader-2", sync_done)
        assert report["added"] == 150 and not report["errors"]
        async with mcp_http_client(url) as client:
            found = await client.call_tool("search", {"query": "lighthouses tide tables", "k": 3, "mode": "keyword"})
            assert found.structured_content["hits"][0]["path"].startswith("samples/bulk/")

    with mcp_http(home, db, "--allow-sync", "--no-watch") as (url, _proc, _log):  # the sync tool does the syncing here
        run(main, url)
    assert min(calls.values()) >= 2, calls  # the readers really ran during the sync


def test_multi_get_from_the_command_line(index):
    """The API behind the multi_get tool, from the CLI: a glob plus a comma list, the answer within --max-bytes."""
    home, db = index
    done = run_cli("multi-get", "samples/home/*.md, #nope00", "--max-bytes", "1500", "--json", db=db,
                   env={"PMS_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    home_notes = sorted(p.relative_to(SAMPLES).as_posix() for p in (SAMPLES / "home").glob("*.md"))
    got = [d["path"] for d in answer["documents"]]
    assert got and sum(len(d["text"].encode()) for d in answer["documents"]) <= 1500
    assert {s["ref"] for s in answer["skipped"]} == {"#nope00"} | {f"samples/{p}" for p in home_notes if p not in got}


def test_cli_search_uses_a_running_http_server(index, tmp_path):
    """`pms.py search` asks a running `pms.py mcp --http` on the same index (warm model), else searches itself."""
    home, db = index
    no_model = {"PMS_HOME": str(home), "PMS_MODEL_DIR": str(tmp_path / "no-model-here")}
    query = ["search", "rotate my ssh keys", "-n", "3", "--json"]
    # Every flag travels (the server runs the same KnowledgeBase.search and answers its SearchResult).
    every_flag_query = ["search", "rotate my ssh keys", "--also", "renew credentials", "--intent", "security chores",
                        "--passages", "--min-score", "0.1", "--no-tag", "nosuchtag", "--after", "1990-01-01", "-n", "4",
                        "--json", "--explain"]
    other_db = tmp_path / "other.sqlite"
    (tmp_path / "other" / "keys.md").parent.mkdir()
    (tmp_path / "other" / "keys.md").write_text("# Other keys\n\nI rotate my ssh keys by hand.\n", encoding="utf-8")
    assert run_cli("collection", "add", tmp_path / "other", "--no-embed", db=other_db, env=no_model).returncode == 0
    with mcp_http(home, db) as (url, _proc, _log):
        (announcement,) = (home / "mcp-servers").glob("*.json")  # one file per server
        announced = json.loads(announcement.read_text(encoding="utf-8"))
        assert announced["url"] == url
        served = run_cli(*query, db=db, env=no_model)
        other_index = run_cli(*query, db=other_db, env=no_model)
        filtered = run_cli("search", "what to pack", "--path", "home/", "--json", db=db, env=no_model)
        every_flag = run_cli(*every_flag_query, db=db, env=no_model)
        printed = run_cli(*query[:-1], "--explain", db=db, env=no_model)
    assert filtered.returncode == 0, filtered.stderr
    filtered_hits = json.loads(filtered.stdout)
    assert filtered_hits and all(h["path"].startswith("home/") for h in filtered_hits)
    assert any(h["vector_rank"] for h in filtered_hits)  # the filter travelled to the server's hybrid search
    assert served.returncode == 0, served.stderr
    hits = json.loads(served.stdout)
    # Hybrid ranks, although this process could not have loaded a model: the server searched.
    assert hits[0]["path"] == "dev/ssh-key-rotation.md" and hits[0]["vector_rank"] == 1
    # Another index is never answered by this server.
    assert [h["path"] for h in json.loads(other_index.stdout)] == ["keys.md"]
    assert not announcement.exists()  # the server withdrew its announcement when it stopped

    with_model = {"PMS_HOME": str(home), "PMS_MODEL_DIR": str(model_dir())}
    in_process = run_cli(*query, db=db, env=with_model)
    assert json.loads(in_process.stdout) == hits  # the same answer, searched here
    assert every_flag.returncode == 0 and json.loads(every_flag.stdout), every_flag.stderr
    assert json.loads(every_flag.stdout) == json.loads(run_cli(*every_flag_query, db=db, env=with_model).stdout)
    assert "meaning #1" in printed.stdout  # the rendering reads the served result's mode (hybrid)
    assert printed.stdout == run_cli(*query[:-1], "--explain", db=db, env=with_model).stdout
    alone = run_cli(*query, db=db, env=no_model)
    assert all(h["vector_rank"] is None for h in json.loads(alone.stdout))  # no server, no model: keyword


def test_status_summarises_long_lists_with_their_counts(tmp_path):
    """A wiki with many links to missing notes: status over MCP carries the counts and at
    most 20 examples of each list, not thousands of entries (issue 36: 14.5 KB, 13.5 of them links)."""
    folder = tmp_path / "wiki"
    for i in range(60):
        write(folder / f"page-{i:02d}.md", f"# Page {i}\n\nSee [[missing page {i}]], [[gone {i}]] and [[page-{(i + 1) % 60:02d}]].\n")
    home, db = tmp_path / "home", tmp_path / "index.sqlite"
    home.mkdir()
    assert run_cli("collection", "add", folder, "--name", "wiki", "--no-embed", db=db, env=mcp_env(home)).returncode == 0
    whole = json.loads(run_cli("status", "--json", db=db, env=mcp_env(home)).stdout)
    assert whole["unresolved_links_count"] == 120 and len(whole["unresolved_links"]) == 120  # the CLI's JSON: all of them

    async def status():
        async with mcp_stdio(home, db) as client:
            return await client.call_tool("status", {})

    answer = run(status)
    summary = answer.structured_content
    assert summary["unresolved_links_count"] == 120 and len(summary["unresolved_links"]) == 20
    assert summary["unresolved_links"][0] == whole["unresolved_links"][0]
    assert summary["notes"] == summary["documents"] == 60 and summary["collections_detail"][0]["notes"] == 60  # documents: the old key
    assert len(answer.content[0].text.encode()) < 6000
