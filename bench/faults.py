"""Fault suite: PMS under kill -9, concurrency and a blocked network.

    PMS_MODEL_DIR=.cache/minilm .venv/bin/python bench/faults.py [--kills 20] [--notes 200] [--only round3]

1. kill -9 of ``pms sync`` at random moments (keyword and embedding syncs
   alternate), an integrity, FTS5 and foreign-key check after every kill, then
   one sync: the index must equal a clean build of the same notes.
2. Concurrent syncs (processes) beside searches (threads): no "database is
   locked", every sync exits 0.
3. Every command watched by strace: no connection leaves the machine, except
   ``clip`` (to the local test server only).
4. Hostile input (issue 26), one case per item: notes that made the parsing
   patterns backtrack, a far-future mtime, a named pipe where a note was, bad
   arguments, damaged index files, a collection removed during a sync, a page
   built to stall the extractor, a 40 MB stdio line, control characters in
   notes and names, a redirect to a link-local address: each one line or a
   clean result, never a traceback or a stall.
5. The notes folder, hashed before and after all of it: unchanged.
6. Round 3 (issue 37), each case with its time and peak memory (the process tree's):
   11 privacy: the cases of tests/netns_harness.py in a network namespace (canaries on lo,
      a DNS server that rebinds): a proxy set, an embedding server that redirects with the
      key, notes.localhost, a rebinding name, redirects to every non-public range;
   12 deadlines: searches and syncs against a silent, a trickling and a busy (Retry-After:
      3600) embedding server;
   13 orphans: kill -9 of a 3,000-note sync (parse workers, resource tracker) and of a clip;
   14 the HTTP server: 1,100 half-sent connections under a 1,024-descriptor limit, 10,000
      abandoned sessions;
   15 memory: a 3.5 GB flate bomb and a 10-million-character page in PDFs, pages of a
      million elements, of a 3,000 x 300 table, of 180,000 elements;
   16 ids: a deleted note's id beside a longer one it starts;
   17 tracebacks: the command lines the fault pass found, damaged index files x 9 commands.

Prints one line per check and a summary; exits 1 when anything failed.
Figures are recorded in docs/robustness.md.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import pms  # noqa: E402
from common import pdf_file, process_memory_mb  # noqa: E402

PMS = [sys.executable, str(REPO / "pms.py")]
failures: list[str] = []


def check(ok: bool, what: str) -> bool:
    print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        failures.append(what)
    return ok


# -- the vault ------------------------------------------------------------------------------------
WORDS = ("backup restic sync phone laptop rust borrow ownership search index query note folder vault "
         "meeting plan travel recipe garden budget tax invoice python sqlite vector keyword ranking").split()


def make_vault(root: Path, n: int, seed: int = 7) -> None:
    """The sample notes plus ``n`` generated notes with sections, frontmatter and a few bad files."""
    shutil.copytree(REPO / "sample-notes", root)
    rng = random.Random(seed)
    for i in range(n):
        sections = "\n\n".join(f"## Section {j}\n\n" + " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 160)))
                               for j in range(rng.randint(1, 5)))
        tags = ", ".join(rng.sample(WORDS, 2))
        (root / f"gen-{i // 50}").mkdir(exist_ok=True)
        (root / f"gen-{i // 50}" / f"note-{i:04}.md").write_text(f"---\ntags: [{tags}]\n---\n# Note {i}\n\n{sections}\n")
    (root / "binary.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (root / "bomb.md").write_text("---\na: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
                                  "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\ntags: *e\n---\n# Bomb\n")
    if sys.platform == "linux":
        with open(os.path.join(os.fsencode(root), b"bad-name-\xff.md"), "wb") as fh:
            fh.write(b"# Bad name\n")


def tree_hash(root: Path) -> str:
    """Names, modes, mtimes and contents of every file under ``root``."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(os.fsencode(root)):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            h.update(path + f"{st.st_mode}:{st.st_mtime_ns}:{st.st_size}".encode())
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as fh:
                    h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


# -- index checks (read-only, with the standard sqlite3: the file as any tool sees it) ---------------
def index_checks(db: Path) -> list[str]:
    problems = []
    conn = sqlite3.connect(db, timeout=30)
    try:
        if conn.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
            problems.append("integrity_check")
        if conn.execute("PRAGMA foreign_key_check").fetchall():
            problems.append("foreign_key_check")
        try:
            conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
        except sqlite3.DatabaseError as exc:
            problems.append(f"fts5 integrity-check: {exc}")
    finally:
        conn.close()
    return problems


def index_content(db: Path) -> dict:
    """What a user can find, independent of row ids: notes, passages, how many have vectors."""
    conn = sqlite3.connect(db, timeout=30)
    try:
        docs = conn.execute("SELECT c.name, d.path, d.sha256, d.title, d.tags, d.aliases FROM documents d "
                            "JOIN collections c ON c.id = d.collection_id ORDER BY 1, 2").fetchall()
        passages = conn.execute("SELECT d.path, ch.seq, ch.hash, ch.start_line, ch.end_line, ch.embedded FROM chunks ch "
                              "JOIN documents d ON d.id = ch.document_id ORDER BY 1, 2").fetchall()
        has_vectors = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'chunk_vectors_rowids'").fetchone()
        vectors = conn.execute("SELECT count(*) FROM chunk_vectors_rowids").fetchone()[0] if has_vectors else 0
        orphans = conn.execute("SELECT count(*) FROM chunk_vectors_rowids WHERE id NOT IN (SELECT id FROM chunks)"
                               ).fetchone()[0] if has_vectors else 0
    finally:
        conn.close()
    return {"documents": docs, "chunks": passages, "vectors": vectors, "orphan_vectors": orphans}


def run(args, env, timeout=600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*PMS, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout, **kw)


# -- 1. kill -9 ---------------------------------------------------------------------------------------------
def kill_test(vault: Path, work: Path, env: dict, kills: int, embed: bool) -> None:
    clean_db, killed_db = work / "clean.sqlite", work / "killed.sqlite"
    t0 = time.monotonic()
    r = run(["--db", clean_db, "collection", "add", vault, "--name", "vault"] + ([] if embed else ["--no-embed"]), env)
    build_seconds = time.monotonic() - t0
    check(r.returncode == 0, f"clean build in {build_seconds:.1f}s (exit {r.returncode})")
    clean = index_content(clean_db)
    print(f"     {len(clean['documents'])} notes, {len(clean['chunks'])} passages, {clean['vectors']} vectors", flush=True)
    run(["--db", killed_db, "collection", "add", vault, "--name", "vault", "--no-sync"], env)
    rng = random.Random(42)
    bad = killed = 0
    for i in range(kills):
        with_embedding = embed and i % 2 == 1
        args = ["--db", killed_db, "sync"] + ([] if with_embedding else ["--no-embed"])
        if with_embedding and i % 4 == 3:
            args.append("--reembed")  # also kill a rebuild of every vector
        proc = subprocess.Popen([*PMS, *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        time.sleep(rng.uniform(0.2, min(30.0, max(1.0, build_seconds * 0.8))))  # model load, indexing or embedding
        finished = proc.poll() is not None
        if not finished:
            proc.send_signal(signal.SIGKILL)
            killed += 1
        proc.wait()
        problems = index_checks(killed_db)
        bad += bool(problems)
        if problems or i == kills - 1:
            check(not problems, f"kill {i + 1}/{kills} ({'embedding' if with_embedding else 'keyword'} sync, "
                                f"{'finished first' if finished else 'killed'}): {', '.join(problems) or 'index checks pass'}")
    check(bad == 0, f"{kills} kills ({killed} mid-sync, {kills - killed} after the sync had finished): "
                    f"integrity, FTS5 and foreign-key checks passed after {kills - bad} of {kills}")
    r = run(["--db", killed_db, "sync"] + ([] if embed else ["--no-embed"]), env)
    check(r.returncode == 0, f"the sync after the kills finishes (exit {r.returncode})")
    after = index_content(killed_db)
    same = after == clean
    detail = "" if same else " ".join(f"{k}: {len(clean[k]) if isinstance(clean[k], list) else clean[k]} vs "
                                      f"{len(after[k]) if isinstance(after[k], list) else after[k]}"
                                      for k in clean if clean[k] != after[k])
    check(same, f"after {kills} kills the index equals a clean build {detail}".rstrip())


# -- 2. concurrency --------------------------------------------------------------------------------------------
def concurrency_test(vault: Path, work: Path, env: dict, syncs: int, searches: int) -> None:
    db = work / "concurrent.sqlite"
    run(["--db", db, "collection", "add", vault, "--name", "vault", "--no-sync"], env)
    errors: list[str] = []
    done = threading.Event()

    def search_loop():
        queries = ["backup restic", "rust borrow", "sync phone", "中文", "\"section 3\" -tax", "vec*"]
        with pms.KnowledgeBase(db, embeddings=False) as kb:
            for i in range(searches):
                try:
                    kb.search(queries[i % len(queries)], mode="keyword")
                except Exception as exc:  # counted, not raised: this is what is measured
                    errors.append(f"search: {type(exc).__name__}: {exc}")
        done.set()

    searcher = threading.Thread(target=search_loop)
    searcher.start()
    procs = [subprocess.Popen([*PMS, "--db", str(db), "sync", "--no-embed"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(syncs)]
    for p in procs:
        out, err = p.communicate(timeout=900)
        if p.returncode != 0 or "locked" in err:
            errors.append(f"sync exit {p.returncode}: {err.strip()[-200:]}")
    searcher.join()
    locked = sum("locked" in e for e in errors)
    check(not errors, f"{syncs} concurrent syncs beside {searches} searches: {len(errors)} errors, {locked} 'database is locked'"
          + (f" (first: {errors[0]})" if errors else ""))
    check(not index_checks(db), "index checks pass after the concurrent syncs")


# -- 3. the network ---------------------------------------------------------------------------------------------
class Page(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        body = ("<!doctype html><html><head><title>Fault suite page</title></head><body><article><h1>Fault suite page</h1>"
                + "".join(f"<p>Paragraph {i} explains the fault suite in plain words, with enough text to be an article "
                          f"that a reader would keep as a note for later searching.</p>" for i in range(8))
                + "</article></body></html>").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def remote_connections(trace: str) -> list[str]:
    """connect() calls to an IP address other than 127.0.0.1 / ::1."""
    out = []
    for line in trace.splitlines():
        if "connect(" not in line or "AF_INET" not in line:
            continue
        if re.search(r'inet_addr\("127\.0\.0\.1"\)|inet_pton\(AF_INET6, "::1"', line):
            continue
        out.append(line.strip())
    return out


def network_test(vault: Path, work: Path, env: dict, embed: bool) -> None:
    if not shutil.which("strace"):
        check(False, "strace is not installed: the network check cannot run (apt-get install strace)")
        return
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/page"
    db = work / "network.sqlite"
    clips = work / "clips"
    clips.mkdir()
    no_embed = [] if embed else ["--no-embed"]
    commands: list[list] = [
        ["collection", "add", vault, "--name", "vault", *no_embed], ["collection", "add", clips, "--name", "clips", "--no-sync"],
        ["collection", "list"], ["collection", "show", "vault"], ["sync", *no_embed], ["sync", "--dry-run"], ["status"],
        ["search", "backup restic"], ["search", "--mode", "keyword", "rust borrow"], ["search", "--json", "sync phone"],
        ["get", "vault/sync-notes-across-devices.md"], ["bench", REPO / "bench" / "sample_notes_queries.json", "--mode", "keyword"],
        ["clip", url, "-c", "clips", *no_embed], ["collection", "rename", "clips", "clipped"], ["collection", "remove", "clipped"],
    ]
    if embed:
        commands.insert(8, ["search", "--mode", "vector", "how do I keep my phone in sync"])
    try:
        for args in commands:
            log = work / "strace.txt"
            r = subprocess.run(["strace", "-f", "-qq", "-e", "trace=connect", "-o", str(log), *PMS, "--db", str(db), *map(str, args)],
                               capture_output=True, text=True, env=env, timeout=600)
            remote = remote_connections(log.read_text())
            label = " ".join(str(a) if not isinstance(a, Path) else a.name for a in args)
            ok = r.returncode == 0 and not remote
            check(ok, f"offline: pms {label}: exit {r.returncode}, {len(remote)} connections off the machine"
                  + (f" ({remote[0][:120]})" if remote else "") + (f" ({r.stderr.strip()[-160:]})" if r.returncode else ""))
    finally:
        httpd.shutdown()
        httpd.server_close()


# -- 4. hostile input ------------------------------------------------------------------------------------------
class Hostile(Page):
    """/stall: one <p> with 100,000 attributes; /to?URL: a redirect to URL; else the article."""

    def do_GET(self):
        if self.path.startswith("/to?"):
            self.send_response(302)
            self.send_header("Location", self.path[4:])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path != "/stall":
            return super().do_GET()
        attrs = " ".join(f"a{i}='x'" for i in range(100_000))
        body = f"<html><body><article><h1>Stall</h1><p {attrs}>text</p></article></body></html>".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def one_line_error(r: subprocess.CompletedProcess) -> bool:
    return r.returncode != 0 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def timed(args, env, **kw) -> tuple[subprocess.CompletedProcess, float]:
    """A command and the CPU seconds its process took."""
    before = os.times()
    r = run(args, env, **kw)
    after = os.times()
    return r, (after.children_user - before.children_user) + (after.children_system - before.children_system)


def hostile_test(work: Path, env: dict) -> None:
    vault = work / "hostile"
    vault.mkdir()
    (vault / "ok.md").write_text("# Fine\n\nbananas and restic\n")
    (vault / "heading.md").write_text("# a" + " " * 20_000 + "b\n\ntext\n")
    (vault / "brackets.md").write_text("# " + "[" * 25_600 + "](\n\nx " + "[" * 500_000 + "](\n")
    (vault / "code.md").write_text("`" * 100_000 + " #tag " + "``x" * 30_000 + "\n")
    (vault / "escape\x1b[2J.md").write_text("# Title \x1b]0;pwned\x07\n\nbananas \x1b[31mred\n")
    (vault / "future.md").write_text("# Future\n\nfar future\n")
    os.utime(vault / "future.md", (10_413_792_000, 10_413_792_000))  # 2300-01-01
    db = work / "hostile.sqlite"
    r, cpu = timed(["--db", db, "collection", "add", vault, "--name", "h", "--no-embed"], env)
    check(r.returncode == 0 and "Traceback" not in r.stderr,
          f"1+2. adversarial headings, links, code spans and a far-future mtime: sync exit {r.returncode} in {cpu:.1f} s CPU")
    r = run(["--db", db, "sync", "--no-embed"], env)
    check(r.returncode == 0 and "+0 new" in r.stdout, f"2. the next sync is clean (exit {r.returncode})")
    if hasattr(os, "mkfifo"):
        (vault / "ok.md").unlink()
        os.mkfifo(vault / "ok.md")
        r = run(["--db", db, "get", "h/ok.md"], env, timeout=60)
        check(one_line_error(r) and "not a regular file" in r.stderr, f"3. get of a named pipe: one line ({r.stderr.strip()[:80]})")
        r = run(["--db", db, "sync", "--no-embed"], env, timeout=120)
        check(r.returncode == 0, f"3. sync beside a named pipe: exit {r.returncode}")
        (vault / "ok.md").unlink()
        (vault / "ok.md").write_text("# Fine\n\nbananas and restic\n")
        run(["--db", db, "sync", "--no-embed"], env)
    bad: list[list] = [["search", "x", "--path", "[z-a]"], ["search", "x", "--path", "{a,[z-a]}"], ["multi-get", "x/[]x"],
           ["multi-get", "h/*.md", "--max-bytes", "4611686018427387904"], ["get", "~nosuchuser/x.md"],
           ["clip", "http://127.0.0.1:9/", "--timeout", "nan"], ["search", "x", *["--tag", "t"] * 1100],
           ["multi-get", "*" * 20 + "#"], ["collection", "add", vault, "--name", "g", "--glob", "[z-a]"]]
    failures_here = []
    for args in bad:
        r = run(["--db", db, *args], env)
        if "Traceback" in r.stderr or (r.returncode and len(r.stderr.strip().splitlines()) != 1):
            failures_here.append(f"{' '.join(map(str, args))[:60]}: {r.stderr.strip()[-120:]}")
    check(not failures_here, f"4. {len(bad)} bad arguments: one line each" + (f" (first: {failures_here[0]})" if failures_here else ""))
    r = run(["--db", db, "search", "--mode", "keyword", "bananas"], env)
    r2 = run(["--db", db, "multi-get", "h/escape*"], env)
    check(r.returncode == 0 and "\x1b" not in r.stdout and "\x1b" not in r2.stdout.splitlines()[0],
          "9. search output and multi-get headers escape control characters")
    damaged = 0
    for how in ("empty", "truncated", "not sqlite", "user_version", "dropped table", "foreign"):
        copy = work / f"damaged-{how.replace(' ', '-')}.sqlite"
        shutil.copy(db, copy)
        if how == "empty":
            copy.write_bytes(b"")
        elif how == "truncated":
            copy.write_bytes(copy.read_bytes()[: copy.stat().st_size // 2 + 100])
        elif how == "not sqlite":
            copy.write_bytes(b"# a note\n" * 500)
        elif how == "foreign":
            copy.unlink()
            conn = sqlite3.connect(copy)
            conn.execute("CREATE TABLE documents(x)")
            conn.close()
        else:
            conn = sqlite3.connect(copy)
            conn.executescript("PRAGMA user_version = 3" if how == "user_version" else "PRAGMA foreign_keys=OFF; DROP TABLE documents")
            conn.close()
        before = copy.read_bytes()
        r = run(["--db", copy, "search", "bananas"], env)
        said = "not a PMS index" if how == "foreign" else "is damaged"
        damaged += one_line_error(r) and said in r.stderr and copy.read_bytes() == before
    check(damaged == 6, f"5. damaged index files (empty, truncated, not SQLite, schema version, dropped table, another "
                        f"program's): {damaged} of 6 reported in one line and left as they were")
    big = work / "big"
    for i in range(3000):
        (big / f"d{i // 500}").mkdir(parents=True, exist_ok=True)
        (big / f"d{i // 500}" / f"n{i}.md").write_text(f"# Note {i}\n\n" + " ".join(WORDS) + "\n")
    db2 = work / "remove.sqlite"
    run(["--db", db2, "collection", "add", big, "--name", "big", "--no-sync"], env)
    sync = subprocess.Popen([*PMS, "--db", str(db2), "sync", "--no-embed"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    time.sleep(1.0)
    removed = run(["--db", db2, "collection", "remove", "big"], env)
    _out, err = sync.communicate(timeout=600)
    check(sync.returncode == 0 and removed.returncode == 0 and "Traceback" not in err and not index_checks(db2),
          f"6. collection remove during a sync: sync exit {sync.returncode}, index checks pass ({err.strip()[-100:]})")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    clips = work / "hostile-clips"
    clips.mkdir()
    run(["--db", db, "collection", "add", clips, "--name", "hc", "--no-sync"], env)
    try:
        r, cpu = timed(["--db", db, "clip", f"{base}/stall", "-c", "hc", "--timeout", "30", "--no-embed"], env)
        check(one_line_error(r) and "too complex" in r.stderr, f"7. a page with 100,000 attributes: one line in {cpu:.1f} s CPU")
        r = run(["--db", db, "clip", f"{base}/to?http://169.254.169.254/latest/meta-data/", "-c", "hc", "--no-embed"], env)
        check(one_line_error(r) and "link-local" in r.stderr, "10. a redirect to a link-local address is refused")
    finally:
        httpd.shutdown()
        httpd.server_close()
    try:
        import mcp  # noqa: F401
    except ImportError:
        check(False, "8. the MCP SDK is not installed: the stdio check cannot run")
        return
    proc = subprocess.Popen([*PMS, "--db", str(db), "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env)
    try:
        proc.stdin.write(b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "' + b"a" * (50 << 20) + b'"}}\n')
        proc.stdin.write(b'{"jsonrpc": "2.0", "id": 2, "method": "ping"}\n')
        proc.stdin.flush()
        answers = [proc.stdout.readline() for _ in range(2)]
        peak = process_memory_mb(proc.pid)["peak_rss_mb"]
    finally:
        proc.kill()
        proc.wait()
    check(b"-32700" in answers[0] and b'"id":2' in answers[1].replace(b" ", b""),
          f"8. a 50 MB stdio line: a parse error, the server answers on; peak RSS {peak} MB")


# -- 6. round 3 (issue 37): privacy, deadlines, orphans, the HTTP server, memory, ids, tracebacks -------------------
class PeakMemory:
    """The peak resident memory of a process and everything it starts (sampled every 50 ms from
    /proc: the sum of VmRSS over the tree), and its largest process (VmHWM)."""

    def __init__(self, pid: int):
        self.pid, self.peak_tree_mb, self.peak_process_mb, self._stop = pid, 0.0, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _tree(self) -> list[int]:
        parents: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
        tree, frontier = [self.pid], [self.pid]
        while frontier:
            frontier = [pid for pid, parent in parents.items() if parent in frontier]
            tree += frontier
        return tree

    def _sample(self) -> None:
        while not self._stop.is_set():
            total = 0.0
            for pid in self._tree():
                try:
                    memory = process_memory_mb(pid)
                except OSError:
                    continue
                total += memory["rss_mb"] or 0
                self.peak_process_mb = max(self.peak_process_mb, memory["peak_rss_mb"] or 0)
            self.peak_tree_mb = max(self.peak_tree_mb, total)
            self._stop.wait(0.05)

    def stop(self) -> str:
        self._stop.set()
        self._thread.join()
        return f"peak {self.peak_tree_mb:.0f} MB (largest process {self.peak_process_mb:.0f} MB)"


def measured(args, env, timeout=900, stdin=None) -> tuple[subprocess.CompletedProcess, float, str]:
    """A pms command: (what it answered, seconds, its peak memory, workers included)."""
    started = time.monotonic()
    proc = subprocess.Popen([*PMS, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            stdin=subprocess.DEVNULL if stdin is None else stdin)
    peak = PeakMemory(proc.pid)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        memory = peak.stop()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), time.monotonic() - started, memory


def one_line_end(r: subprocess.CompletedProcess) -> bool:
    """An exit code and, when it failed, one last line that says why; no traceback, no internal error."""
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    if "Traceback" in r.stderr or "internal error" in r.stderr:
        return False
    return r.returncode == 0 or (bool(lines) and (lines[-1].startswith("pms: ") or ": error: " in lines[-1]))


def privacy_round3(work: Path) -> None:
    """The outbound cases of tests/netns_harness.py, in a network namespace when one can be made."""
    namespace = ["unshare", "--user", "--map-root-user", "--net", "--mount"]
    usable = shutil.which("unshare") and subprocess.run([*namespace, "true"], capture_output=True).returncode == 0
    where = "in a network namespace (canaries on lo)" if usable else "on loopback stand-ins (no namespaces here)"
    for case, reached in (("proxy", lambda r: [req["line"] for req in r["proxy"]["requests"]
                                             if not req["line"].startswith(f"GET http://{r['at']['93.184.216.34']}")]),
                          ("redirect-with-key", lambda r: r["canary"]["requests"] or r["canary"]["connections"]),
                          ("localhost-names", lambda r: r["canary"]["connections"]),
                          ("rebinding", lambda r: r["metadata"]["connections"]),
                          ("private-redirects", lambda r: sum(c["connections"] for c in r["canaries"].values())),
                          ("remote-consent", lambda r: r["requests after allow=False"])):
        proc = subprocess.run([*(namespace if usable else []), sys.executable, str(REPO / "tests" / "netns_harness.py"),
                               *([] if usable else ["--loopback"]), case], capture_output=True, text=True, timeout=600)
        try:
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            leaked = reached(result)
        except (IndexError, ValueError, KeyError) as exc:
            check(False, f"11. privacy, {case}: the harness failed ({type(exc).__name__}: {proc.stderr.strip()[-200:]})")
            continue
        check(not leaked, f"11. privacy, {case} {where}: {leaked or 'no byte'} reached a canary off this machine")


class SilentEmbeddings(BaseHTTPRequestHandler):
    """/ok: vectors of hashed words; /silent: reads the request, never answers; /trickle: headers,
    then a byte every 0.2 s; /busy: 429 with Retry-After: 3600."""

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        try:
            if self.path.startswith("/ok"):
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                vectors = [[1.0 + sum(hash(w) % 7 == i for w in text.split()) for i in range(16)] for text in texts]
                answer = json.dumps({"data": [{"index": i, "embedding": v} for i, v in enumerate(vectors)]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
                return
            if self.path.startswith("/busy"):
                self.send_response(429)
                self.send_header("Retry-After", "3600")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.path.startswith("/trickle"):
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
            for _ in range(3000):  # ten minutes at most
                time.sleep(0.2)
                if self.path.startswith("/trickle"):
                    self.wfile.write(b" ")
                    self.wfile.flush()
        except OSError:
            return


def deadlines_round3(work: Path, env: dict) -> None:
    """Searches and syncs against servers that never answer, trickle, or ask to wait an hour."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), SilentEmbeddings)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    vault = work / "deadline-vault"
    vault.mkdir()
    (vault / "a.md").write_text("# Backups\n\nrestic copies the laptop every night\n")
    db = work / "deadline.sqlite"
    try:
        r = run(["--db", db, "--embed-url", f"{base}/ok", "--embed-model", "m", "collection", "add", vault, "--name", "v"], env)
        check(r.returncode == 0 and "1 new" in r.stdout, f"12. an index embedded by a working server (exit {r.returncode})")
        for kind in ("silent", "trickle", "busy"):
            r, seconds, _ = measured(["--db", db, "--embed-url", f"{base}/{kind}", "--embed-model", "m", "search", "backups"], env)
            check(r.returncode == 0 and "a.md" in r.stdout, f"12. a search against a {kind} server (auto mode; --mode hybrid fails instead, as documented): answered by keywords in "
                  f"{seconds:.1f} s (within the query deadline)")
        for kind in ("silent", "busy"):
            (vault / f"{kind}.md").write_text(f"# {kind}\n\na note to embed\n")
            r, seconds, _ = measured(["--db", db, "--embed-url", f"{base}/{kind}", "--embed-model", "m", "sync"], env)
            said = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
            check(r.returncode == 0 and one_line_end(r), f"12. a sync against a {kind} server ends in {seconds:.1f} s, "
                  f"the notes indexed for keywords: {said[:150]}")
    finally:
        httpd.shutdown()
        httpd.server_close()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid and fields[0] != "Z":
                    found.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return found


def orphans_round3(work: Path, env: dict) -> None:
    big = work / "orphan-vault"
    for i in range(3000):
        (big / f"d{i // 300}").mkdir(parents=True, exist_ok=True)
        (big / f"d{i // 300}" / f"n{i}.md").write_text(f"# Note {i}\n\n" + " ".join(WORDS) * 3 + "\n")
    page = work / "slow-page.html"
    page.write_text("<html><body><article>" + "<div><p>word</p></div>" * 90_000 + "</article></body></html>")
    clips = work / "orphan-clips"
    clips.mkdir()
    temp = work / "orphan-tmp"
    temp.mkdir()
    db = work / "orphans.sqlite"
    run(["--db", db, "collection", "add", clips, "--name", "clips", "--no-sync"], env)
    for label, args, wanted in (("collection add of 3,000 notes (parse workers, resource tracker)",
                                 ["collection", "add", big, "--name", "big", "--no-embed"], 3),
                                ("clip of a slow page (the page reader)", ["clip", page, "--url", "https://example.org/a", "-c",
                                                                          "clips", "--subfolder", "new/deep", "--timeout", "600",
                                                                          "--no-embed"], 1)):
        proc = subprocess.Popen([*PMS, "--db", str(db), *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env={**env, "TMPDIR": str(temp)})
        deadline = time.monotonic() + 300
        while len(children(proc.pid)) < wanted and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        workers = children(proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed = time.monotonic()
        while any(alive(pid) for pid in workers) and time.monotonic() - killed < 300:
            time.sleep(0.05)
        left = [pid for pid in workers if alive(pid)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        check(len(workers) >= wanted and not left, f"13. kill -9 of a {label}: {len(workers)} workers, "
              f"{'all ended' if not left else f'{len(left)} still alive'} {time.monotonic() - killed:.1f} s later")
    check(list(clips.iterdir()) == [] and list(temp.iterdir()) == [], "13. the killed clip left no temp file and no folder")


def server_round3(work: Path, env: dict) -> None:
    """1,100 half-sent connections under a 1,024-descriptor limit, then a new client; 10,000 abandoned sessions."""
    import http.client
    import resource

    db = work / "server.sqlite"
    vault = work / "server-vault"
    vault.mkdir()
    (vault / "a.md").write_text("# A\n\nrestic\n")
    run(["--db", db, "collection", "add", vault, "--name", "v", "--no-embed"], env)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    log = work / "server-log.txt"
    with open(log, "w") as err:
        proc = subprocess.Popen(["prlimit", "--nofile=1024:1024", *PMS, "--db", str(db), "mcp", "--http", "--port", "0"],
                                stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        deadline = time.monotonic() + 120
        while "MCP server at" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        port = int(re.search(r"MCP server at http://[^:]+:(\d+)/", log.read_text()).group(1))  # type: ignore[union-attr]
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "faults", "version": "1"}}})
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}

        def initialize(connection=None) -> tuple[int, float]:
            connection = connection or http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            started = time.monotonic()
            connection.request("POST", "/mcp", body, headers)
            answer = connection.getresponse()
            answer.read()
            return answer.status, time.monotonic() - started

        held = []
        for _ in range(1100):
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")
            held.append(sock)
        cpu0 = sum(map(int, open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[11:13]))
        status, seconds = initialize()
        time.sleep(15)
        cpu = (sum(map(int, open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[11:13])) - cpu0) / os.sysconf("SC_CLK_TCK")
        still = 0
        for sock in held:
            sock.setblocking(False)
            try:
                still += sock.recv(1) != b""
            except BlockingIOError:
                still += 1
            except OSError:
                pass
            sock.close()
        check(status == 200 and still == 0, f"14. 1,100 half-sent connections under a 1,024-descriptor limit: a new initialize "
              f"answered in {seconds:.2f} s; server CPU {cpu:.1f} s in the next 15 s; {still} of them open after; "
              f"log {log.stat().st_size} bytes")
        rss0 = process_memory_mb(proc.pid)["rss_mb"]
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for _ in range(10_000):
            initialize(connection)
        rss1 = process_memory_mb(proc.pid)["rss_mb"]
        check(rss1 - rss0 < 300, f"14. 10,000 abandoned sessions (over the default cap of sessions): RSS {rss0:.0f} -> {rss1:.0f} MB")
    finally:
        proc.terminate()
        proc.wait(30)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    text = log.read_text()
    check("Traceback" not in text and text.count("cannot accept") <= 1, f"14. the server's log: {len(text.splitlines())} lines, no traceback")


def pdf_document(content: bytes) -> bytes:
    """A one-page PDF whose page content is ``content`` (a FlateDecode stream), written by hand."""
    stream = b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(content) + content + b"\nendstream"
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>",
               stream, b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    return pdf_file(objects)


def flate_bomb(gigabytes: float = 3.5) -> bytes:
    """A page whose content inflates to ``gigabytes`` of spaces (3.5 MB on disk)."""
    import zlib

    packer, block = zlib.compressobj(9), b" " * (1 << 20)
    return pdf_document(b"".join(packer.compress(block) for _ in range(int(gigabytes * 1024))) + packer.flush())


def text_flood(chars: int = 10_000_000) -> bytes:
    """One page that draws ``chars`` characters of text (21 KB on disk)."""
    import zlib

    packer, line = zlib.compressobj(9), b"(" + b"a" * 1000 + b") Tj 0 -0.05 Td\n"
    return pdf_document(packer.compress(b"BT /F1 0.05 Tf 10 750 Td\n") + b"".join(packer.compress(line) for _ in range(chars // 1000))
                        + packer.compress(b"ET") + packer.flush())


def memory_round3(work: Path, env: dict) -> None:
    pdfs = work / "memory-pdfs"
    pdfs.mkdir()
    (pdfs / "flate-bomb.pdf").write_bytes(flate_bomb())
    (pdfs / "text-flood.pdf").write_bytes(text_flood())
    (pdfs / "note.md").write_text("# After\n\nthis note about otters is indexed after the PDFs\n")
    for name in ("flate-bomb.pdf", "text-flood.pdf"):
        folder = work / f"memory-{name}"
        folder.mkdir()
        shutil.copy(pdfs / name, folder / name)
        (folder / "note.md").write_text("# After\n\notters\n")
        r, seconds, peak = measured(["--db", work / f"memory-{name}.sqlite", "collection", "add", folder, "--no-embed"],
                                    {**env, "PMS_PDF_TIMEOUT": "600"})
        said = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
        check(r.returncode in (0, 1) and "PMS_PDF_MEMORY_MB" in r.stderr and one_line_end(r),
              f"15. {name} ({(folder / name).stat().st_size >> 10} KB): {seconds:.1f} s, {peak}: {said[-130:]}")
    pages = {"a million elements": "<html><body><article>" + "<p>w</p>" * 1_000_000 + "</article></body></html>",
             "a 3,000 x 300 table": "<html><body><article><table>" + ("<tr>" + "<td>c</td>" * 300 + "</tr>") * 3000
                                    + "</table></article></body></html>",
             "180,000 elements (under the budget)": "<html><body><article>" + "<div><p>word</p></div>" * 90_000
                                                    + "</article></body></html>"}
    clips = work / "memory-clips"
    clips.mkdir()
    db = work / "memory-clips.sqlite"
    run(["--db", db, "collection", "add", clips, "--name", "mc", "--no-sync"], env)
    for label, html in pages.items():
        page = work / "memory-page.html"
        page.write_text(html)
        r, seconds, peak = measured(["--db", db, "clip", page, "--url", "https://example.org/x", "-c", "mc", "--timeout", "30",
                                     "--no-embed"], env)
        said = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.stdout.strip()[-80:]
        check(one_line_end(r), f"15. a page of {label} ({len(html) >> 20} MB): {seconds:.1f} s, {peak}: {said[-130:]}")


def ids_round3(work: Path, env: dict) -> None:
    vault = work / "ids"
    vault.mkdir()
    for name in ("n16463.md", "n156658.md"):  # their ids in collection 1 share 8 hex digits: the second gets 9
        (vault / name).write_text(f"# {name}\n\nbananas\n")
    db = work / "ids.sqlite"
    run(["--db", db, "collection", "add", vault, "--name", "ids", "--no-embed"], env)
    ids = {name: json.loads(run(["--db", db, "get", f"ids/{name}", "--json"], env).stdout)["docid"] for name in ("n16463.md", "n156658.md")}
    short = min(ids, key=lambda name: len(ids[name]))
    (vault / short).unlink()
    run(["--db", db, "sync", "--no-embed"], env)
    r = run(["--db", db, "get", f"#{ids[short]}"], env)
    check(r.returncode == 1 and r.stdout == "" and one_line_end(r),
          f"16. the id of a deleted note (#{ids[short]}) beside #{max(ids.values(), key=len)}: {r.stderr.strip()[:100]}")


# The cases the fault pass on 0.3.1 found (issue 37, items 12 and 13): each ends in one line.
FOUND_ARGV = [
    ["sync", "--reembed", "--no-embed"],
    ["sync", "-c", os.fsdecode(b"\xff")], ["search", "restic", "-c", os.fsdecode(b"\xff")],
    ["collection", "describe", os.fsdecode(b"\xff"), "x"],
    ["collection", "add", "{tmp}/" + "n" * 300], ["collection", "add", "{tmp}/v", "--name", "n" * 300],
    ["--db", "{tmp}/" + "n" * 300 + ".sqlite", "status"], ["--db", "{tmp}/" + "n" * 300 + "/i.sqlite", "status"],
    ["get", "v/a.md", "--max-bytes", "-5"], ["get", "#" + "f" * 8], ["multi-get", ",".join(f"nope{i}" for i in range(1000))],
    ["bench", "{tmp}/deep.json"], ["bench", "{tmp}/inf.json"], ["search", "-n", "1e400", "x"], ["search", "--min-score", "nan", "x"],
]


def damaged_copies(clean: Path, folder: Path, count: int, seed: int = 37) -> list[tuple[str, Path]]:
    """``count`` damaged copies of the index ``clean``: cut short, pages overwritten with noise,
    tables dropped (the ones every command reads first, then any), the version changed, a header
    byte flipped, an empty file."""
    rng = random.Random(seed)
    data = clean.read_bytes()
    page = 4096
    conn = sqlite3.connect(clean)
    tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'index') "
                                             "AND name NOT LIKE 'sqlite_%'")]
    conn.close()
    first = [name for name in ("meta", "collections", "documents", "chunks", "chunks_fts") if name in tables]
    made = []
    for n in range(count):
        kind = ["truncate", "noise", "drop", "version", "header", "empty"][n % 6]
        path = folder / f"damaged-{n}-{kind}.sqlite"
        if kind == "truncate":
            path.write_bytes(data[: rng.randrange(1, len(data))])
        elif kind == "noise":
            damaged = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                at = rng.randrange(0, max(1, len(data) // page)) * page
                damaged[at : at + page] = rng.randbytes(page)
            path.write_bytes(bytes(damaged))
        elif kind in ("drop", "version"):
            path.write_bytes(data)
            db = sqlite3.connect(path)
            if kind == "drop":
                name = first.pop(0) if first else rng.choice(tables)
                kind += f" {name}"
                for what in ("TABLE", "INDEX", "VIEW"):
                    try:
                        db.execute(f'DROP {what} IF EXISTS "{name}"')
                    except sqlite3.DatabaseError:
                        continue
            else:
                db.execute(f"PRAGMA user_version = {rng.choice([-1, 0, 3, 999, 2**31 - 1])}")
            db.commit()
            db.close()
        elif kind == "header":
            damaged = bytearray(data)
            damaged[rng.randrange(0, 100)] ^= 0xFF
            path.write_bytes(bytes(damaged))
        else:
            path.write_bytes(b"")
        made.append((kind, path))
    return made


def tracebacks_round3(work: Path, env: dict, damaged: int) -> None:
    tmp = work / "argv"
    (tmp / "v").mkdir(parents=True)
    (tmp / "v" / "a.md").write_text("# A\n\nrestic copies the laptop every night\n")
    (tmp / "deep.json").write_text("[" * 5000)
    (tmp / "inf.json").write_text('{"queries": [{"query": "restic", "relevant_paths": ["a.md"], "expected_in_top_k": -1e999}]}')
    db = tmp / "i.sqlite"
    run(["--db", db, "collection", "add", tmp / "v", "--name", "v", "--no-embed"], env)
    bad = []
    for argv in FOUND_ARGV:
        argv = [a.replace("{tmp}", str(tmp)) for a in argv]
        r = subprocess.run([*PMS, *(["--db", str(db)] if "--db" not in argv else []), *argv], capture_output=True, text=True,
                           env=env, timeout=300)
        if not one_line_end(r) or r.stderr.count("\n") > 12:
            bad.append(f"{' '.join(argv)[:50]}: {r.stderr.strip()[-120:]}")
    check(not bad, f"17. {len(FOUND_ARGV)} command lines the fault pass found: one line and an exit code each"
          + (f" (first bad: {bad[0]})" if bad else ""))
    sqlite3.connect(db).execute("PRAGMA wal_checkpoint(TRUNCATE)").close()
    cases = damaged_copies(db, work, damaged)
    commands = [["status"], ["search", "restic"], ["search", "restic", "--json"], ["get", "v/a.md"], ["sync", "--no-embed"],
                ["collection", "list"], ["tags"], ["related", "v/a.md"], ["multi-get", "v/*.md"]]
    bad = []
    for kind, path in cases:
        for command in commands:
            r = run(["--db", path, *command], env, timeout=300)
            if not one_line_end(r):
                bad.append(f"{kind}, {command[0]}: {r.stderr.strip()[-120:]}")
    check(not bad, f"17. {len(cases)} damaged index files x {len(commands)} commands: one line and an exit code each"
          + (f" ({len(bad)} bad, first: {bad[0]})" if bad else ""))


def round3_test(work: Path, env: dict, damaged: int) -> None:
    privacy_round3(work)
    deadlines_round3(work, env)
    orphans_round3(work, env)
    server_round3(work, env)
    memory_round3(work, env)
    ids_round3(work, env)
    tracebacks_round3(work, env, damaged)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--notes", type=int, default=200, help="generated notes besides the sample notes")
    ap.add_argument("--syncs", type=int, default=16, help="concurrent sync processes")
    ap.add_argument("--searches", type=int, default=2000)
    ap.add_argument("--no-embed", action="store_true", help="keyword-only (no model needed)")
    ap.add_argument("--only", choices=["kill", "concurrency", "network", "hostile", "round3"], help="run one part")
    ap.add_argument("--damaged", type=int, default=36, help="damaged index files in round 3")
    opts = ap.parse_args()
    embed = not opts.no_embed and not pms.Embedder.missing_packages() and bool(os.environ.get("PMS_MODEL_DIR"))
    if not opts.no_embed and not embed:
        print("note: no PMS_MODEL_DIR or fastembed: keyword-only syncs", file=sys.stderr)
    work = Path(tempfile.mkdtemp(prefix="pms-faults-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PMS_") or k == "PMS_MODEL_DIR"}
    env.update(PMS_HOME=str(work / "home"))
    try:
        vault = work / "vault"
        make_vault(vault, opts.notes)
        before = tree_hash(vault)
        started = time.monotonic()
        if opts.only in (None, "kill"):
            kill_test(vault, work, env, opts.kills, embed)
        if opts.only in (None, "concurrency"):
            concurrency_test(vault, work, env, opts.syncs, opts.searches)
        if opts.only in (None, "network"):
            network_test(vault, work, env, embed)
        if opts.only in (None, "hostile"):
            hostile_test(work, env)
        if opts.only in (None, "round3"):
            round3_test(work, env, opts.damaged)
        check(tree_hash(vault) == before, "the notes folder is byte-for-byte unchanged (names, modes, mtimes, contents)")
        print(f"\nfaults: {len(failures)} failures in {time.monotonic() - started:.0f}s"
              + "".join(f"\n  - {f}" for f in failures))
        return 1 if failures else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
