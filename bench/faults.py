"""Fault suite: PMS under kill -9, concurrency and a blocked network.

    PMS_MODEL_DIR=.cache/minilm .venv/bin/python bench/faults.py [--kills 20] [--notes 200]

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

Prints one line per check and a summary; exits 1 when anything failed.
Figures are recorded in docs/robustness.md.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import random
import re
import shutil
import signal
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
from common import process_memory_mb  # noqa: E402

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
        chunks = conn.execute("SELECT d.path, ch.seq, ch.hash, ch.start_line, ch.end_line, ch.embedded FROM chunks ch "
                              "JOIN documents d ON d.id = ch.document_id ORDER BY 1, 2").fetchall()
        has_vectors = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'chunk_vectors_rowids'").fetchone()
        vectors = conn.execute("SELECT count(*) FROM chunk_vectors_rowids").fetchone()[0] if has_vectors else 0
        orphans = conn.execute("SELECT count(*) FROM chunk_vectors_rowids WHERE id NOT IN (SELECT id FROM chunks)"
                               ).fetchone()[0] if has_vectors else 0
    finally:
        conn.close()
    return {"documents": docs, "chunks": chunks, "vectors": vectors, "orphan_vectors": orphans}


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--notes", type=int, default=200, help="generated notes besides the sample notes")
    ap.add_argument("--syncs", type=int, default=16, help="concurrent sync processes")
    ap.add_argument("--searches", type=int, default=2000)
    ap.add_argument("--no-embed", action="store_true", help="keyword-only (no model needed)")
    ap.add_argument("--only", choices=["kill", "concurrency", "network", "hostile"], help="run one part")
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
        check(tree_hash(vault) == before, "the notes folder is byte-for-byte unchanged (names, modes, mtimes, contents)")
        print(f"\nfaults: {len(failures)} failures in {time.monotonic() - started:.0f}s"
              + "".join(f"\n  - {f}" for f in failures))
        return 1 if failures else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
