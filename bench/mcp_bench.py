#!/usr/bin/env python3
"""The MCP server's speed: warm hybrid search over HTTP, stdio start-up, memory (docs/mcp.md).

    PMS_MODEL_DIR=.cache/minilm .venv/bin/python bench/mcp_bench.py            # SciFact, 5,183 notes
    .venv/bin/python bench/mcp_bench.py --index my.sqlite --queries 50 --json
    .venv/bin/python bench/mcp_bench.py --index RUSTBOOK.sqlite --fixture bench/rustbook_queries.json

Measures, each in a fresh ``pms.py mcp`` process:

* ``search`` over Streamable HTTP, after three warm-up calls: round-trip
  latency per SciFact test query (median, p95) with the official SDK client
  and with plain JSON-RPC POSTs (httpx2, one session: the server's own cost),
  and the same queries in-process (``KnowledgeBase.search``) in this run, for
  the ratio that says what the protocol costs; and the size of each answer
  (the text a model reads, and the structured JSON), in bytes;
* stdio: process start to the answer of the first ``tools/list`` (raw pipes:
  initialize, initialized, tools/list written at once), against ``python -c
  pass`` and ``pms.py --help`` in the same run;
* the serving process's RSS (current and peak) after the searches;
* one-shot ``pms.py search`` (loads the model per call), for comparison, and
  the same command while the HTTP server runs (it then asks the server).

The SciFact index is the dev suite's cached MiniLM index (``--workdir``,
default .cache/bench/scifact), built once if missing (embedding 5k notes takes
several minutes on 2 cores). The server serves a copy of the index (SQLite's
backup), so its folder watcher and migrations never write to a cached index.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, percentile, pms, process_memory_mb, timing_summary  # noqa: E402
from suite import load_set  # noqa: E402

PMS = str(REPO / "pms.py")


def summary(seconds: list[float]) -> dict:
    return {key: round(value, 1) if isinstance(value, float) else value for key, value in timing_summary(seconds).items()}


def start_http(db: Path, env: dict) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, PMS, "--db", str(db), "mcp", "--http", "--port", "0"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        m = re.search(r"MCP server at (\S+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # keep draining
            return proc, m.group(1)
    raise SystemExit(f"the MCP server did not start (exit code {proc.wait()})")


def http_search_latency(db: Path, queries: list[str], k: int, home: Path) -> tuple[dict, dict, dict, dict, str]:
    import anyio
    from mcp import Client

    env = {**os.environ, "PMS_HOME": str(home)}  # the server's announcement goes there, not into the user's data folder
    proc, url = start_http(db, env)
    times: list[float] = []
    modes: set[str] = set()
    sizes: dict[str, list[int]] = {"text": [], "structured": []}
    try:
        async def main():
            async with Client(url) as client:
                for q in queries[:3]:  # the first call may still wait for the model
                    await client.call_tool("search", {"query": q, "k": k})
                for q in queries:
                    t0 = time.perf_counter()
                    result = await client.call_tool("search", {"query": q, "k": k})
                    times.append(time.perf_counter() - t0)
                    if result.is_error:
                        raise SystemExit(f"search failed: {result.content[0].text}")
                    modes.add(result.structured_content["mode"])
                    if len(result.structured_content["hits"]) == k:
                        sizes["text"].append(len(result.content[0].text.encode()))
                        sizes["structured"].append(len(json.dumps(result.structured_content, ensure_ascii=False).encode()))

        anyio.run(main)
        raw = raw_http_latency(url, queries, k)
        cli = summary([wall([sys.executable, PMS, "--db", str(db), "search", q, "--json"], env) for q in queries[:5]])
        memory = process_memory_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)
    memory["answer_bytes"] = {name: {"n": len(v), "median": statistics.median(v) if v else None,
                                     "p95": percentile(v, 0.95) if v else None} for name, v in sizes.items()}
    return summary(times), raw, cli, memory, ",".join(sorted(modes))


def raw_http_latency(url: str, queries: list[str], k: int) -> dict:
    """Plain JSON-RPC over HTTP/1.1 keep-alive: what the server costs, without the SDK client's own work."""
    import httpx2 as httpx  # comes with the mcp SDK

    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    times = []
    with httpx.Client(timeout=60) as http:
        hello = http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
        headers |= {"mcp-session-id": hello.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
        http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        for i, q in enumerate(queries):
            call = {"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                    "params": {"name": "search", "arguments": {"query": q, "k": k}}}
            t0 = time.perf_counter()
            answer = http.post(url, headers=headers, json=call)
            times.append(time.perf_counter() - t0)
            if answer.status_code != 200 or answer.json()["result"].get("isError"):
                raise SystemExit(f"search failed: {answer.text[:300]}")
    return summary(times)


def in_process_latency(db: Path, queries: list[str], k: int) -> dict:
    kb = pms.KnowledgeBase(db)
    kb.keep_vectors_in_memory()  # as `pms mcp` does
    try:
        for q in queries[:3]:
            kb.search(q, k=k)
        times = []
        for q in queries:
            t0 = time.perf_counter()
            kb.search(q, k=k)
            times.append(time.perf_counter() - t0)
    finally:
        kb.close()
    return summary(times)


def stdio_first_tools_list(db: Path) -> tuple[float, float]:
    """(wall, CPU) seconds from spawning ``pms.py mcp`` to reading its tools/list answer.

    CPU time (user + system of the process, which exits right after) is what
    the start-up costs on an idle machine; on a busy one the wall time waits for
    a core too. ``db`` should be a keyword-only index, so no model starts
    loading after the answer and the CPU figure is the start-up's alone.
    """
    hello = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, PMS, "--db", str(db), "mcp"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    proc.stdin.write("".join(json.dumps(m) + "\n" for m in hello))
    proc.stdin.flush()
    for line in proc.stdout:
        if json.loads(line).get("id") == 2:
            elapsed = time.perf_counter() - t0
            break
    else:
        raise SystemExit("the stdio server gave no tools/list answer")
    proc.stdin.close()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return elapsed, usage.ru_utime + usage.ru_stime


def keyword_index(folder: Path) -> Path:
    """A small keyword-only index of the sample notes (the start-up does not depend on the index's size)."""
    db = folder / "startup.sqlite"
    if not db.exists():
        subprocess.run([sys.executable, PMS, "--db", str(db), "collection", "add", str(REPO / "sample-notes"),
                        "--name", "samples", "--no-embed"], check=True, stdout=subprocess.DEVNULL)
    return db


def wall(cmd: list[str], env: dict | None = None) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", type=Path, help="an index to serve (default: SciFact's, built once)")
    ap.add_argument("--workdir", type=Path, default=REPO / ".cache" / "bench" / "scifact")
    ap.add_argument("--queries", type=int, default=300, help="SciFact test queries to time (default all 300)")
    ap.add_argument("--query", action="append", help="time this query instead (with --index; repeatable)")
    ap.add_argument("--repeat", type=int, default=7, help="stdio start-ups to time (default 7)")
    ap.add_argument("-k", type=int, default=10)
    ap.add_argument("--fixture", type=Path, help="take the queries from this judged fixture (e.g. bench/rustbook_queries.json)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    if args.index and (args.query or args.fixture):
        db = args.index
        queries = args.query or [j.query for j in pms.load_fixture(args.fixture)][: args.queries]
    else:
        kb, judged = load_set("scifact", args.workdir.parent, pms.DEFAULT_PASSAGE_CHARS, embed=not args.index)
        db, queries = args.index or kb.index_path, [j.query for j in judged][: args.queries]
        kb.close()
    import sqlite3

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as index:  # read only: a cached index is never migrated here
        notes = index.execute("SELECT count(*) FROM documents").fetchone()[0]

    result = {"index": str(db), "notes": notes, "queries": len(queries), "cores": os.cpu_count()}
    import tempfile

    with tempfile.TemporaryDirectory() as home:
        served = Path(home) / "index.sqlite"
        with sqlite3.connect(db) as source, sqlite3.connect(served) as copy:
            source.backup(copy)
        db = served
        (result["http_search_sdk_client"], result["http_search_raw"], result["cli_search_via_server"],
         result["http_server_memory"], result["mode"]) = http_search_latency(db, queries, args.k, Path(home))
        result["in_process_search"] = in_process_latency(db, queries, args.k)
    with tempfile.TemporaryDirectory() as tmp:
        starts = [stdio_first_tools_list(keyword_index(Path(tmp))) for _ in range(args.repeat)]
    result["stdio_first_tools_list"] = summary([wall_s for wall_s, _ in starts])
    result["stdio_first_tools_list_cpu"] = summary([cpu for _, cpu in starts])
    result["python_bare_start"] = summary([wall([sys.executable, "-c", "pass"]) for _ in range(args.repeat)])
    result["pms_help_start"] = summary([wall([sys.executable, PMS, "--help"]) for _ in range(args.repeat)])
    with tempfile.TemporaryDirectory() as home:
        served = Path(home) / "index.sqlite"
        with sqlite3.connect(args.index or result["index"]) as source, sqlite3.connect(served) as copy:
            source.backup(copy)
        result["cli_one_shot_hybrid_search"] = summary([wall([sys.executable, PMS, "--db", str(served), "search", q, "--json"],
                                                             {**os.environ, "PMS_HOME": home}) for q in queries[:3]])
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{notes} notes, {len(queries)} queries, mode {result['mode']}, {result['cores']} cores")
    for key in ("http_search_sdk_client", "http_search_raw", "in_process_search", "stdio_first_tools_list",
                "stdio_first_tools_list_cpu", "python_bare_start", "pms_help_start",
                "cli_one_shot_hybrid_search", "cli_search_via_server"):
        s = result[key]
        print(f"{key:<28} median {s['median_ms']:>8.1f} ms   p95 {s['p95_ms']:>8.1f} ms   (n={s['n']})")
    m = result["http_server_memory"]
    print(f"{'serving process RSS':<28} {m['rss_mb']} MB now, {m['peak_rss_mb']} MB peak")
    for name, b in m["answer_bytes"].items():
        print(f"{f'{args.k}-hit answer, {name}':<28} median {b['median']} bytes   p95 {b['p95']} bytes   (n={b['n']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
