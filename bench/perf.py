#!/usr/bin/env python3
"""Speed, size and memory benchmarks for PMS (docs/benchmarks.md, "Speed, size and memory").

    .venv/bin/python bench/perf.py keyword     # tldr, 38k files: indexing, re-sync, query latency, CLI wall time
    .venv/bin/python bench/perf.py embed       # part of the rust-book: embedding passages/s and peak RSS per batch size
    .venv/bin/python bench/perf.py embed --embed-experiments   # the same without ONNX's memory arena, at 512 and 256 tokens
    .venv/bin/python bench/perf.py hybrid      # warm hybrid latency, CLI one-shot with model load
    .venv/bin/python bench/perf.py size        # index bytes per passage beyond the text, as built, vacuumed and without vectors
    .venv/bin/python bench/perf.py start       # cold CLI: hybrid on the sample notes; keyword on tldr, python3 pms.py vs the pms command, by part
    .venv/bin/python bench/perf.py static      # the static test model against MiniLM: passages/s, RSS, query time; a 10,000-note vault's collection add
    .venv/bin/python bench/perf.py all

``hybrid`` and ``size`` use ``--hybrid-db INDEX`` (e.g. the dev suite's MiniLM index of
SciFact in .cache/bench/scifact, copied first) or else embed the whole rust-book here.

Corpora come from ../shared/data/corpora (or --data) and are extracted under
--work (default /tmp/pms-perf), never into the repository. Each measurement
that reports peak RSS runs in a fresh Python process, so the figure is that
step's own. The embedding benchmarks need the .venv and a model folder
(PMS_MODEL_DIR, default .cache/minilm built by scripts/fetch_test_model.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, pms, process_memory_mb, timing_summary  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "data" / "corpora"
DEFAULT_MODEL_DIR = REPO / ".cache" / "minilm"
STATIC_MODEL_DIR = REPO / ".cache" / "minilm-static"  # scripts/make_static_model.py
SHARED_DATA = REPO.parent / "shared" / "data"
SWEEP_GLOB = "src/ch0*.md"  # the part of the rust-book the batch-size sweep embeds: 426 passages of prose and code

# Questions a person might type into either corpus; the rest of each query
# set is drawn from the corpus itself (see tldr_queries / rust_book_queries).
TLDR_QUESTIONS = [
    "list files", "compress a directory", "extract tar archive", "show disk usage", "find files by name",
    "git undo last commit", "docker remove container", "kill process by name", "change file permissions",
    "download file from url", "search text in files", "create symbolic link", "check open ports",
    "convert video to mp4", "resize image", "show network interfaces", "mount usb drive", "ssh copy key",
    "\"hard link\"", "python virtual environment", "install package apt", "kubernetes logs pod",
    "edit crontab", "sort lines unique", "count words", "git rebase -merge", "ping*", "C++ compiler",
    "don't overwrite", "how do I see which process uses a port",
]
RUST_QUESTIONS = [
    "how do I read a file into a string", "what is ownership", "borrow checker mutable reference",
    "lifetimes in function signatures", "how to handle errors with Result", "the question mark operator",
    "define a trait with default methods", "generic types", "closures capture environment", "iterator adapters map filter",
    "smart pointers Box", "Rc reference counting", "RefCell interior mutability", "spawn a thread",
    "message passing channels", "Mutex shared state", "pattern matching enums", "if let syntax",
    "cargo workspaces", "publish a crate", "write unit tests", "integration tests directory",
    "unsafe rust raw pointers", "macros declarative", "struct methods impl", "vectors store lists",
    "hash maps", "strings are UTF-8", "modules and privacy", "guessing game random number",
]


###############################################################################
# helpers
###############################################################################

def extract(archive: Path, work: Path) -> Path:
    """Unpack a corpus once into ``work`` and return its top folder."""
    name = archive.name.split(".")[0]
    target = work / name
    if not target.is_dir():
        work.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            tar.extractall(work, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(work)
    if not target.is_dir():
        raise SystemExit(f"{archive} did not unpack to {target}")
    return target


def fresh(path: Path) -> Path:
    for suffix in ("", "-wal", "-shm", ".sync.lock"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    return path


def peak_rss_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def workers_peak_rss_mb(fn, *args, **kwargs):
    """(fn(...), the largest peak resident memory of the worker processes it started): each
    worker's VmHWM (Linux), read every 50 ms while fn runs; 0.0 when it started none. (A
    child's ru_maxrss would count the size of the process that spawned it.)"""
    import multiprocessing
    import threading

    peaks: dict[int, float] = {}
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.05):
            for pid in (worker.pid for worker in multiprocessing.active_children() if worker.pid):
                with contextlib.suppress(OSError, TypeError):  # a worker gone meanwhile
                    peaks[pid] = max(peaks.get(pid, 0.0), process_memory_mb(pid)["peak_rss_mb"])

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        return fn(*args, **kwargs), max(peaks.values(), default=0.0)
    finally:
        done.set()
        watcher.join()


def cpu_seconds() -> float:
    """User + system CPU time of this process, all threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def percentiles(times_s: list[float]) -> dict:
    return timing_summary(times_s)


def timed(fn, *args, **kwargs):
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t


def latency(fn, queries: list[str], warmup: int = 5) -> dict:
    """Wall-time percentiles of fn(query), plus the median CPU time of the process (ONNX threads included)."""
    for q in queries[:warmup]:
        fn(q)
    wall, cpu = [], []
    for q in queries:
        c = time.process_time()
        wall.append(timed(fn, q)[1])
        cpu.append(time.process_time() - c)
    return {**percentiles(wall), "cpu_median_ms": statistics.median(cpu) * 1000}


def run_child(step: str, **params) -> dict:
    """Run one measurement in a fresh interpreter (own peak RSS); it prints JSON last."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "_child", step, json.dumps(params)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"step {step} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def cli_wall(argv: list[str], queries: list[str], runs: int) -> dict:
    """Wall and CPU time (user + system) of one-shot processes, cycling through queries.

    CPU time is reported too because other work on a shared 2-core machine
    stretches wall time without the program doing more.
    """
    wall, cpu = [], []
    for i in range(runs):
        t = time.perf_counter()
        proc = subprocess.Popen([*argv, queries[i % len(queries)]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall.append(time.perf_counter() - t)
        cpu.append(usage.ru_utime + usage.ru_stime)
        if status != 0:
            raise SystemExit(f"{' '.join(argv)} failed with status {status}")
    return {**percentiles(wall), "cpu_median_ms": statistics.median(cpu) * 1000}


def text_bytes(db: Path) -> tuple[int, int]:
    """(passages, UTF-8 bytes of their text) in an index."""
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT count(*), coalesce(sum(length(CAST(body AS BLOB))), 0) FROM chunks").fetchone()
    finally:
        con.close()


def checkpoint(db: Path) -> int:
    """Fold the WAL into the main file (what closing the last connection does) and return its size."""
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return db.stat().st_size


def overhead(db: Path) -> dict:
    passages, text = text_bytes(db)
    size = checkpoint(db)
    return {"file_bytes": size, "chunks": passages, "text_bytes": text,
            "overhead_per_chunk": round((size - text) / max(passages, 1))}


def python_variants(python: str) -> list[tuple[str, list[str]]]:
    """``python3`` as the user types it, plus ``-S``; a pyenv-style shim is also resolved to the real binary."""
    variants = [(python, [python]), (f"{python} -S", [python, "-S"])]
    real = subprocess.run([python, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True).stdout.strip()
    found = shutil.which(python)
    if real and found and Path(found).resolve() != Path(real).resolve():
        variants += [(f"{real} (no shim)", [real]), (f"{real} -S (no shim)", [real, "-S"])]
    return variants


###############################################################################
# query sets
###############################################################################

def tldr_queries(root: Path, n: int = 200, seed: int = 7) -> list[str]:
    """Questions, command names, description words, phrases, prefixes and exclusions from English pages."""
    pages = sorted((root / "pages").glob("*/*.md"))
    rng = random.Random(seed)
    out = list(TLDR_QUESTIONS)
    while len(out) < n:
        page = rng.choice(pages)
        text = page.read_text(encoding="utf-8")
        # Words a person would use: the page's description and its examples' captions,
        # not the "More information: <url>" line every page ends its header with.
        prose = " ".join(line[2:] for line in text.splitlines()
                         if line.startswith(("> ", "- ")) and not line.startswith("> More information"))
        words = [w for w in re.findall(r"[A-Za-z]{3,}", prose) if w.lower() not in pms.STOPWORDS]
        kind = len(out) % 5
        if kind == 0 or len(words) < 3:
            out.append(page.stem)
        elif kind == 1:
            start = rng.randrange(len(words) - 2)
            out.append(" ".join(words[start : start + rng.choice((2, 3))]).lower())
        elif kind == 2:
            start = rng.randrange(len(words) - 1)
            out.append('"' + " ".join(words[start : start + 2]).lower() + '"')
        elif kind == 3:
            out.append(f"{page.stem} {rng.choice(words).lower()[:4]}*")
        else:
            a, b = rng.sample(words, 2)
            out.append(f"{a.lower()} -{b.lower()}")
    return out[:n]


def rust_book_queries(db: Path, n: int = 200, seed: int = 7) -> list[str]:
    """Hand-written questions plus section headings of the book's passages."""
    con = sqlite3.connect(db)
    headings = sorted({h.split(" > ")[-1] for (h,) in con.execute("SELECT headings FROM chunks WHERE headings != ''")})
    con.close()
    rng = random.Random(seed)
    headings = [h for h in headings if len(h.split()) >= 2]
    return (RUST_QUESTIONS + rng.sample(headings, min(len(headings), n)))[:n]


###############################################################################
# steps run in a child process
###############################################################################

def child_index(db: str, folder: str, name: str, glob: str = pms.DEFAULT_GLOB, edit: str | None = None) -> dict:
    """Keyword-only index from scratch, then re-sync unchanged, then re-sync after editing one file."""
    db_path = fresh(Path(db))
    kb = pms.KnowledgeBase(db_path, embeddings=False)
    kb.collections.create(path=folder, name=name, glob=glob)
    (report, seconds), workers_mb = workers_peak_rss_mb(timed, kb.sync, embed=False)
    result = {"files": report.added, "skipped": len(report.skipped), "errors": len(report.errors),
              "seconds": seconds, "files_per_s": report.added / seconds, "peak_rss_mb": peak_rss_mb(),
              "parse_worker_peak_rss_mb": workers_mb}
    info = kb.status(pending=False)
    result.update({key: info[key] for key in ("collections", "documents", "chunks", "embedded")})
    resyncs = [timed(kb.sync, embed=False) for _ in range(3)]
    assert all(r.unchanged == report.added for r, _ in resyncs), "re-sync found changes in an untouched corpus"
    result["resync_unchanged_s"] = statistics.median(s for _, s in resyncs)
    plan, result["dry_run_s"] = timed(kb.check_sync_status)
    if edit:
        target = Path(folder) / edit
        original = target.read_bytes()
        try:
            target.write_bytes(original + b"\n- Benchmark edit: `echo changed`\n")
            report, result["resync_one_edit_s"] = timed(kb.sync, embed=False)
            assert report.updated == 1, report.summary()
        finally:
            target.write_bytes(original)
        kb.sync(embed=False)
    kb.close()
    result["peak_rss_mb_total"] = peak_rss_mb()
    return result


def child_keyword_latency(db: str, queries: list[str]) -> dict:
    kb = pms.KnowledgeBase(db, embeddings=False)
    result = {"keyword": latency(lambda q: kb.search(q, k=10, mode="keyword"), queries),
              "keyword_chunks": latency(lambda q: kb.search(q, k=10, mode="keyword", passages=True), queries),
              "peak_rss_mb": peak_rss_mb()}
    kb.close()
    return result


def child_embed(db: str, batch_size: int | None, arena: bool = True, max_tokens: int | None = None) -> dict:
    """Embed every passage of a keyword-only index (a copy) at one batch size (None: the model's own,
    as a sync chooses it).

    Two experiments PMS does not (yet) make: ``arena=False`` turns off ONNX
    Runtime's CPU memory arena, ``max_tokens`` truncates passages shorter than
    the 512 tokens fastembed allows MiniLM (sentence-transformers uses 256).
    """
    if not arena:
        import functools

        import fastembed  # PMS imports TextEmbedding from it when the model loads

        fastembed.TextEmbedding = functools.partial(fastembed.TextEmbedding, enable_cpu_mem_arena=False)  # type: ignore[misc,assignment]
    embedder = pms.Embedder(batch_size=batch_size)
    kb = pms.KnowledgeBase(db, embedder=embedder)
    _, load_s = timed(embedder.load)
    if max_tokens:
        embedder.load().model.tokenizer.enable_truncation(max_length=max_tokens)
    cpu = cpu_seconds()
    report, seconds = timed(kb.sync)
    cpu = cpu_seconds() - cpu
    if report.embed_error:
        raise SystemExit(report.embed_error)
    kb.close()
    return {"batch_size": embedder.batch_size, "arena": arena, "max_tokens": max_tokens or 512,
            "chunks": report.embedded, "seconds": seconds, "model_load_s": load_s,
            "chunks_per_s": report.embedded / seconds, "cpu_s": cpu,
            "chunks_per_cpu_s": report.embedded / cpu, "peak_rss_mb": peak_rss_mb()}


def interleaved(fns: dict, queries: list[str], passes: int = 2, warmup: list[str] | None = None) -> dict:
    """Wall-time percentiles of each fn(query), the fns taking turns on every query (their
    order rotating), so that other work on a shared machine weighs on all of them alike."""
    for q in warmup or []:
        for fn in fns.values():
            fn(q)
    times: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for i, q in enumerate(queries * passes):
        for name in names[i % len(names):] + names[: i % len(names)]:
            times[name].append(timed(fns[name], q)[1])
    return {name: percentiles(ts) for name, ts in times.items()}


def child_hybrid_latency(db: str, queries: list[str]) -> dict:
    """Warm searches. Each mode has its own KnowledgeBase (each embeds its query itself: a
    KnowledgeBase keeps its last queries' vectors), all on one loaded model; the
    ``*_sqlite_vec`` ones keep no vectors in memory, as a one-shot process. The model is
    loaded first, as the desktop app and the MCP server do (``load_embedder``); queries
    are still embedded by the one-thread query encoder, as in every process."""
    embedder = pms.Embedder()
    _, load_s = timed(embedder.load)
    warm = 1024  # MB: the vectors kept in memory, as the app and the MCP server keep them
    kbs = {"hybrid": pms.KnowledgeBase(db, embedder=embedder, vector_memory_mb=warm),
           "keyword": pms.KnowledgeBase(db, embedder=embedder, vector_memory_mb=warm),
           "vector": pms.KnowledgeBase(db, embedder=embedder, vector_memory_mb=warm),
           "hybrid_sqlite_vec": pms.KnowledgeBase(db, embedder=embedder, vector_memory_mb=0),
           "vector_sqlite_vec": pms.KnowledgeBase(db, embedder=embedder, vector_memory_mb=0)}
    fns: dict = {name: (lambda q, kb=kb, mode=name.split("_")[0]: kb.search(q, k=10, mode=mode)) for name, kb in kbs.items()}
    fns["embed_query"] = embedder.embed_query
    # A KnowledgeBase that never loads fastembed embeds its queries with QueryEncoder when the
    # index remembers how its model embeds them (indexes synced by this PMS do); else with fastembed.
    light = pms.KnowledgeBase(db)
    fns["vector_light"] = lambda q: light.search(q, k=10, mode="vector")
    result = {"model_load_s": load_s, **interleaved(fns, queries[: len(queries) // 2], warmup=queries[-5:])}
    result["hybrid_over_keyword"] = result["hybrid"]["median_ms"] / result["keyword"]["median_ms"]
    info = kbs["hybrid"].status(pending=False)
    result["vectors"] = info["embedded"]
    result["vectors_in_memory_mb"] = info["vectors_in_memory_bytes"] / 1e6
    result["vectors_in_memory_mb_per_10k"] = result["vectors_in_memory_mb"] / max(info["embedded"], 1) * 10_000
    # Reading the vectors into memory: a fresh KnowledgeBase's second vector search, less a warm one's.
    reads = []
    for q in queries[:5]:
        with pms.KnowledgeBase(db, embedder=embedder) as kb:
            kb.search(q, mode="vector")
            second = timed(kb.search, q, mode="vector")[1]
            reads.append(second - timed(kb.search, q, mode="vector")[1])
    result["vectors_read_ms"] = statistics.median(reads) * 1000
    result["peak_rss_mb"] = peak_rss_mb()
    for kb in kbs.values():
        kb.close()
    return result


def child_query_load(db: str, query: str) -> dict:
    """A one-shot process's first query vector: through QueryEncoder (what a CLI search
    uses: the first vector search) and, for comparison, through fastembed."""
    out = {}
    t = time.perf_counter()
    import numpy  # noqa: F401  (both paths need them; timed apart)
    import onnxruntime  # noqa: F401
    import tokenizers  # noqa: F401
    out["import_onnxruntime_tokenizers_numpy_s"] = time.perf_counter() - t
    kb = pms.KnowledgeBase(db)
    t = time.perf_counter()
    kb.search(query, k=1, mode="vector")
    out["first_vector_search_s"] = time.perf_counter() - t  # ONNX session + first inference + KNN
    out["fastembed_imported_by_it"] = "fastembed" in sys.modules
    t = time.perf_counter()
    import fastembed  # noqa: F401
    out["import_fastembed_s"] = time.perf_counter() - t
    t = time.perf_counter()
    kb.load_embedder()
    out["fastembed_model_load_s"] = time.perf_counter() - t
    kb.close()
    return out


def child_collection_add(home: str, model_dir: str, vault: str) -> dict:
    """``pms collection add VAULT`` as a user runs it (a fresh PMS_HOME), then one meaning search:
    wall time to meaning search, and the command's peak RSS."""
    env = {**os.environ, "PMS_HOME": home, "PMS_MODEL_DIR": model_dir}
    cli = [sys.executable, str(REPO / "pms.py")]
    t = time.perf_counter()
    add = subprocess.run([*cli, "collection", "add", vault, "--name", "vault"], env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t
    if add.returncode != 0:
        raise SystemExit(add.stderr[-2000:])
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    search = subprocess.run([*cli, "search", "vitamin D and bone health", "--mode", "vector", "-n", "1"],
                            env=env, capture_output=True, text=True, check=False)
    status = subprocess.run([*cli, "status"], env=env, capture_output=True, text=True, check=False).stdout
    embedded = re.search(r"(\d+) passages embedded in ([\d.]+)s", add.stdout + add.stderr)
    return {"seconds_to_meaning_search": seconds, "peak_rss_mb": rss, "vector_search_ok": search.returncode == 0 and "#1" in search.stdout,
            "status": [line for line in status.splitlines() if line.startswith(("Notes:", "Search mode:"))],
            "passages": int(embedded.group(1)) if embedded else None,
            "embed_seconds": float(embedded.group(2)) if embedded else None}


def child_query_embed(model_dir: str, queries: list[str]) -> dict:
    """One warm process: each query's vector (the query path a search takes), median and p95."""
    os.environ["PMS_MODEL_DIR"] = model_dir
    embedder = pms.Embedder()
    embedder.load()
    return latency(embedder.embed_query, queries)


CHILD_STEPS: dict = {"index": child_index, "keyword_latency": child_keyword_latency, "embed": child_embed,
               "hybrid_latency": child_hybrid_latency, "query_load": child_query_load,
               "collection_add": child_collection_add, "query_embed": child_query_embed}


###############################################################################
# benchmarks
###############################################################################

def bench_keyword(args) -> dict:
    root = extract(args.data / "tldr.tar.gz", args.work)
    db = args.work / "tldr-keyword.sqlite"
    print(f"indexing {root} (keyword only) into {db} ...", flush=True)
    out = {"index": run_child("index", db=str(db), folder=str(root), name="tldr", edit="pages/common/tar.md")}
    ix = out["index"]
    print(f"  {ix['files']} files, {ix['chunks']} passages in {ix['seconds']:.1f}s = {ix['files_per_s']:.0f} files/s "
          f"(skipped {ix['skipped']}, errors {ix['errors']}); peak RSS {ix['peak_rss_mb']:.0f} MB, "
          f"each parsing worker's at most {ix['parse_worker_peak_rss_mb']:.0f} MB")
    print(f"  re-sync unchanged {ix['resync_unchanged_s']:.2f}s; dry run {ix['dry_run_s']:.2f}s; "
          f"re-sync after editing one file {ix['resync_one_edit_s']:.2f}s")
    out["size"] = overhead(db)
    print(f"  index {out['size']['file_bytes'] / 1e6:.1f} MB; {out['size']['overhead_per_chunk']} bytes/passage beyond the text")
    queries = tldr_queries(root)
    out["latency"] = run_child("keyword_latency", db=str(db), queries=queries)
    for key in ("keyword", "keyword_chunks"):
        lat = out["latency"][key]
        print(f"  in-process {key}: median {lat['median_ms']:.2f} ms, p95 {lat['p95_ms']:.2f} ms over {lat['n']} queries "
              f"(median CPU {lat['cpu_median_ms']:.2f} ms)")
    out["cli"] = {}
    for label, argv in python_variants(args.python):
        base = cli_wall([*argv, "-c", "pass"], [""], args.runs)
        wall = cli_wall([*argv, str(REPO / "pms.py"), "--db", str(db), "search", "--mode", "keyword"], queries, args.runs)
        out["cli"][label] = {"search": wall, "interpreter_start": base}
        print(f"  CLI `{label} pms.py search --mode keyword`: median {wall['median_ms']:.0f} ms, p95 {wall['p95_ms']:.0f} ms, "
              f"CPU {wall['cpu_median_ms']:.0f} ms ({args.runs} runs; bare interpreter start {base['median_ms']:.0f} ms)")
    return out


def keyword_rust_book(args, glob: str = pms.DEFAULT_GLOB) -> Path:
    """A keyword-only index of the rust-book (or part of it), the starting point of every embedding run."""
    root = extract(args.data / "rust-book.tar.gz", args.work)
    db = args.work / ("rust-book-keyword.sqlite" if glob == pms.DEFAULT_GLOB else "rust-book-part-keyword.sqlite")
    if not db.exists():
        run_child("index", db=str(db), folder=str(root), name="rust-book", glob=glob)
        checkpoint(db)
    return db


def bench_embed(args) -> list:
    """Embed part of the book (SWEEP_GLOB: 426 passages of ordinary prose and code) at each batch size."""
    base = keyword_rust_book(args, SWEEP_GLOB)
    out = []
    settings = [dict(batch_size=b) for b in args.batch_sizes]
    if args.embed_experiments:
        settings = [dict(batch_size=b, arena=False, max_tokens=t) for t in (None, 256) for b in args.batch_sizes]
    for setting in settings:
        db = fresh(args.work / "rust-book-part-embedded.sqlite")
        shutil.copyfile(base, db)
        chars = text_bytes(db)[1]  # bytes of passage text: characters for the mostly-ASCII book
        res = run_child("embed", db=str(db), **setting)
        res.update(chars=chars, chars_per_s=chars / res["seconds"], chars_per_cpu_s=chars / res["cpu_s"])
        out.append(res)
        print(f"  batch {res['batch_size']:>3}, arena {'on' if res['arena'] else 'off'}, max {res['max_tokens']} tokens: "
              f"{res['chunks']} chunks in {res['seconds']:.1f}s = {res['chunks_per_s']:.1f} passages/s, "
              f"{res['chars_per_s']:,.0f} characters/s ({res['chars_per_cpu_s']:,.0f} per CPU-second), "
              f"peak RSS {res['peak_rss_mb']:.0f} MB (model load {res['model_load_s']:.2f}s; "
              f"{res.get('chunks_per_cpu_s', 0):.1f} chunks per CPU-second)", flush=True)
    return out


def ensure_embedded(args) -> Path:
    """The index of the hybrid and size benchmarks: --hybrid-db (copied), or the whole book embedded."""
    if args.hybrid_db:
        db = args.work / f"copy-of-{args.hybrid_db.name}"
        if not db.exists():
            copy_index(args.hybrid_db, db)
        remember_query_encoder(db)
        return db
    db = args.work / "rust-book-embedded.sqlite"
    figures = db.with_suffix(".json")
    if not figures.exists():
        print("embedding the whole rust-book at the model's batch size ...", flush=True)
        shutil.copyfile(keyword_rust_book(args), fresh(db))
        figures.write_text(json.dumps(run_child("embed", db=str(db), batch_size=None)))
        checkpoint(db)
    return db


def copy_index(source: Path, target: Path) -> None:
    """A consistent copy of an index another process may still be writing (SQLite's backup API)."""
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    dst = sqlite3.connect(fresh(target))
    src.backup(dst)
    dst.close()
    src.close()


def remember_query_encoder(db: Path) -> None:
    """An index embedded before indexes remembered how to embed a query without
    fastembed (meta ``embed_query_spec``, recorded by every sync since) gets it
    here, as a sync would record it, so a search in the copy embeds its query as
    a user's index makes it (QueryEncoder), not through fastembed."""
    con = sqlite3.connect(db)
    meta = dict(con.execute("SELECT key, value FROM meta WHERE key IN ('embed_model', 'embed_query_spec')"))
    if meta.get("embed_model") and not meta.get("embed_query_spec"):
        embedder = pms.Embedder(meta["embed_model"])
        embedder.load()
        if embedder.query_spec:
            with con:
                con.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('embed_query_spec', ?)", (json.dumps(embedder.query_spec),))
            print(f"  (recorded how {meta['embed_model']} embeds a query in the copy, as a sync does now)")
    con.close()


def scifact_queries(args) -> list[str]:
    lines = (args.data.parent / "scifact" / "queries_test.jsonl").read_text().splitlines()
    return [json.loads(line)["text"] for line in lines if line.strip()]


def bench_hybrid(args) -> dict:
    db = ensure_embedded(args)
    # A SciFact index (the dev suite's) gets SciFact's 300 test queries; the rust-book its own set.
    queries = scifact_queries(args) if "scifact" in db.name.lower() else rust_book_queries(db)
    print(f"  index {db} ({text_bytes(db)[0]} passages), {len(queries)} queries")
    out = {"latency": run_child("hybrid_latency", db=str(db), queries=queries)}
    lat = out["latency"]
    print(f"  model load {lat['model_load_s']:.2f}s; peak RSS {lat['peak_rss_mb']:.0f} MB; {lat['vectors']} vectors in memory: "
          f"{lat['vectors_in_memory_mb']:.1f} MB ({lat['vectors_in_memory_mb_per_10k']:.1f} MB per 10k), read in {lat['vectors_read_ms']:.1f} ms")
    print(f"  in-process, {lat['hybrid']['n']} queries, modes interleaved:")
    for key in ("hybrid", "hybrid_sqlite_vec", "keyword", "vector", "vector_sqlite_vec", "vector_light", "embed_query"):
        print(f"    {key}: median {lat[key]['median_ms']:.2f} ms, p95 {lat[key]['p95_ms']:.2f} ms")
    print("    (vector_light: a KnowledgeBase that never loaded fastembed, as the Python API or a bench)")
    print(f"    hybrid / keyword (medians): {lat['hybrid_over_keyword']:.2f}")
    out["cli"] = {}
    runs = max(3, args.runs // 3)
    for label, argv in (("venv python", [sys.executable]),):
        wall = cli_wall([*argv, str(REPO / "pms.py"), "--db", str(db), "search"], queries, runs)
        out["cli"][label] = wall
        print(f"  CLI one-shot hybrid `{label} pms.py search` (model load included): median {wall['median_ms']:.0f} ms, "
              f"p95 {wall['p95_ms']:.0f} ms, CPU {wall['cpu_median_ms']:.0f} ms ({runs} runs)")
    return out


###############################################################################
# size: where the bytes go, and what would shrink them
###############################################################################

def connect_with_vec(db: Path):
    mod = pms.sqlite_module(True)
    con = mod.connect(str(db), isolation_level=None)
    import sqlite_vec

    con.enable_load_extension(True)
    sqlite_vec.load(con)
    return con


def table_sizes(db: Path) -> dict[str, int]:
    """Bytes per table and index (dbstat), shadow tables grouped under their virtual table."""
    con = connect_with_vec(db)
    sizes: dict[str, int] = {}
    for name, size in con.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
        group = re.sub(r"_(data|idx|docsize|config|content|chunks|rowids|vector_chunks\d+|metadatachunks\d+|"
                       r"metadatatext\d+|info|auxiliary)$", "", name)
        sizes[group] = sizes.get(group, 0) + size
    con.close()
    return dict(sorted(sizes.items(), key=lambda kv: -kv[1]))


def variant(source: Path, target: Path, statements: list[str]) -> dict:
    """Copy an index, apply SQL, VACUUM, and measure bytes per passage beyond the text."""
    shutil.copyfile(source, fresh(target))
    con = connect_with_vec(target)
    for sql in statements:
        con.execute(sql)
    con.execute("VACUUM")
    con.close()
    return overhead(target)


def bench_size(args) -> dict:
    out = {}
    tldr = args.work / "tldr-keyword.sqlite"
    embedded = ensure_embedded(args)
    indexes = {"rust-book keyword": keyword_rust_book(args), f"{embedded.stem} (with vectors)": embedded}
    if tldr.exists():
        indexes["tldr keyword"] = tldr
    scratch = args.work / "size-variant.sqlite"
    for label, db in indexes.items():
        res = {"as built": overhead(db), "tables": table_sizes(db)}
        # The index as a user's copy settles (VACUUM), and what the vectors weigh.
        experiments: dict[str, list[str]] = {"VACUUM": []}
        if "vectors" in label:
            experiments["without vectors"] = ["DROP TABLE chunk_vectors"]
        for name, sql in experiments.items():
            res[name] = variant(db, scratch, sql)
        out[label] = res
        print(f"  {label}: {res['as built']['chunks']} passages, {res['as built']['file_bytes'] / 1e6:.2f} MB, "
              f"{res['as built']['overhead_per_chunk']} B/passage beyond the text")
        print("    tables: " + ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in res["tables"].items() if v > 50_000))
        for name in experiments:
            print(f"    {name}: {res[name]['file_bytes'] / 1e6:.2f} MB, {res[name]['overhead_per_chunk']} B/passage")
    fresh(scratch)
    return out


###############################################################################
# start: a cold CLI process, and where its time goes
###############################################################################

def compile_ms(runs: int = 9) -> float:
    """Compiling pms.py, which Python does on every `python3 pms.py` (a script's bytecode is never cached)."""
    source = (REPO / "pms.py").read_text(encoding="utf-8")
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        compile(source, str(REPO / "pms.py"), "exec")
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def bench_start(args) -> dict:
    out: dict = {"compile_pms_py_ms": compile_ms()}
    print(f"  compiling pms.py ({(REPO / 'pms.py').stat().st_size // 1024} KB): median {out['compile_pms_py_ms']:.0f} ms")
    # Hybrid, cold, on the sample notes (22 notes), with the model the index remembers.
    db = args.work / "sample-notes-hybrid.sqlite"
    if not db.exists():
        with pms.KnowledgeBase(db) as kb:
            kb.collections.create(REPO / "sample-notes", name="sample-notes")
            kb.sync()
    queries = ["sync notes across devices", "rust ownership borrow", "what should I pack for a trip", "how do I rotate ssh keys"]
    runs = max(5, args.runs // 2)
    env_free = {k: v for k, v in os.environ.items() if not k.startswith("PMS_")}  # a new shell: the index names its model
    os.environ.clear()
    os.environ.update(env_free)
    try:
        wall = cli_wall([sys.executable, str(REPO / "pms.py"), "--db", str(db), "search"], queries, runs)
        parts = [run_child("query_load", db=str(db), query=q) for q in queries[:3]]
    finally:
        os.environ.setdefault("PMS_MODEL_DIR", str(DEFAULT_MODEL_DIR))
    part = {k: statistics.median(p[k] for p in parts) for k in parts[0] if k.endswith("_s")}
    part_fastembed = any(p["fastembed_imported_by_it"] for p in parts)
    out["hybrid"] = {"cli": wall, "parts": part}
    print(f"  CLI cold hybrid `pms.py search` on the sample notes: median {wall['median_ms']:.0f} ms, p95 {wall['p95_ms']:.0f} ms, "
          f"CPU {wall['cpu_median_ms']:.0f} ms ({runs} runs)")
    print("    " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in part.items())
          + f"; the vector search imported fastembed: {part_fastembed}")
    # Keyword on tldr (38k notes), with the real interpreter: the script, and the pms command that
    # `pms.py setup` writes (pms.py imported from its cached bytecode).
    root = extract(args.data / "tldr.tar.gz", args.work)
    kdb = args.work / "tldr-keyword.sqlite"
    if not kdb.exists():
        run_child("index", db=str(kdb), folder=str(root), name="tldr")
    tq = tldr_queries(root, n=50)
    real = subprocess.run([args.python, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True).stdout.strip()
    bin_dir = args.work / "bin"
    subprocess.run([real, str(REPO / "pms.py"), "setup", "--command-only", "--bin-dir", str(bin_dir)], check=True,
                   stdout=subprocess.DEVNULL)
    script, command = [real, str(REPO / "pms.py"), "--db", str(kdb)], [str(bin_dir / "pms"), "--db", str(kdb)]
    variants = {
        "interpreter start": ([real, "-c", "pass"], None),
        "interpreter -S start": ([real, "-S", "-c", "pass"], None),
        "import pms (cached bytecode)": ([real, "-c", f"import sys; sys.path.insert(0, {str(REPO)!r}); import pms"], None),
        "python3 pms.py --help": ([*script, "--help"], None),
        "pms --help": ([*command, "--help"], None),
        "python3 pms.py status": ([*script, "status"], None),
        "pms status": ([*command, "status"], None),
        "python3 pms.py search": ([*script, "search", "--mode", "keyword"], tq),
        "pms search": ([*command, "search", "--mode", "keyword"], tq),
        "pms search (auto mode)": ([*command, "search"], tq),
    }
    if args.compare_with:  # the same commands of another copy of pms.py (e.g. a checkout of main), in the same rounds
        other_bin = args.work / "bin-compare"
        subprocess.run([real, str(args.compare_with / "pms.py"), "setup", "--command-only", "--bin-dir", str(other_bin)],
                       check=True, stdout=subprocess.DEVNULL)
        other = [str(other_bin / "pms"), "--db", str(kdb)]
        variants["compared: pms search"] = ([*other, "search", "--mode", "keyword"], tq)
        variants["compared: pms search (auto mode)"] = ([*other, "search"], tq)
    out["keyword"] = cli_wall_interleaved(variants, args.runs)
    out["keyword"]["python"] = real
    out["keyword"]["load_average"] = os.getloadavg()
    start = out["keyword"]["interpreter start"]["median_ms"]
    print(f"  (load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}; x = wall median / interpreter start's)")
    for label in variants:
        wall = out["keyword"][label]
        print(f"  {label}: median {wall['median_ms']:.0f} ms, p95 {wall['p95_ms']:.0f} ms, CPU {wall['cpu_median_ms']:.0f} ms, "
              f"x{wall['median_ms'] / start:.1f}")
    parts = [start_parts(real, kdb, q) for q in tq[: max(5, args.runs // 2)]]
    out["keyword_parts_cpu_ms"] = {k: statistics.median(p[k] for p in parts) for k in parts[0]}
    print("  CPU of a cold `pms search`, by part (medians): "
          + ", ".join(f"{k} {v:.1f} ms" for k, v in out["keyword_parts_cpu_ms"].items()))
    return out


def cli_wall_interleaved(variants: dict[str, tuple[list[str], list[str] | None]], runs: int) -> dict:
    """cli_wall for several commands in turn, one run of each per round, so a change in the
    machine's load reaches all alike; a command with queries gets the next one as its last argument."""
    times: dict[str, tuple[list[float], list[float]]] = {label: ([], []) for label in variants}
    for i in range(runs + 1):
        for label, (argv, queries) in variants.items():
            t = time.perf_counter()
            proc = subprocess.Popen([*argv, *([queries[i % len(queries)]] if queries else [])],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _, status, usage = os.wait4(proc.pid, 0)
            if status != 0:
                raise SystemExit(f"{label} failed with status {status}")
            if i:  # the first round warms the file cache
                times[label][0].append(time.perf_counter() - t)
                times[label][1].append(usage.ru_utime + usage.ru_stime)
    return {label: {**percentiles(wall), "cpu_median_ms": statistics.median(cpu) * 1000} for label, (wall, cpu) in times.items()}


# A cold `pms search`, part by part, in CPU milliseconds (time.process_time: the
# machine's other work does not stretch it). Each part is measured in a fresh
# process, since a second run of anything is warmer: the standard modules that
# pms.py imports at its top, then pms itself from cached bytecode, then either
# the whole main() or, through the API, opening the index and the search alone.
START_PARTS = """
import sys, time
repo, db, query, what = sys.argv[1:5]
cpu, parts = time.process_time, {}
for name in ("re", "contextlib", "pathlib", "collections", "threading"):
    t = cpu(); __import__(name); parts[f"import {name}"] = (cpu() - t) * 1000
import contextlib, io, json
sys.path.insert(0, repo)
t = cpu(); import pms; parts["import pms (the rest: its bytecode, body and small imports)"] = (cpu() - t) * 1000
if what == "main":
    t = cpu()
    with contextlib.redirect_stdout(io.StringIO()):
        pms.main(["--db", db, "search", "--mode", "keyword", query])
    parts["main(): argparse, open the index, search, print"] = (cpu() - t) * 1000
else:
    t = cpu(); kb = pms.KnowledgeBase(db); parts["of which: open the index"] = (cpu() - t) * 1000
    t = cpu(); kb.search(query, mode="keyword"); parts["of which: the search"] = (cpu() - t) * 1000
print(json.dumps(parts))
"""


def start_parts(python: str, db: Path, query: str) -> dict:
    parts = {}
    for what in ("main", "api"):
        out = subprocess.run([python, "-c", START_PARTS, str(REPO), str(db), query, what], capture_output=True, text=True, check=True)
        parts.update({k: v for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items() if k not in parts})
    return parts


def static_vault(args, notes: int = 10_000) -> Path:
    """A vault of ``notes`` notes from ../shared/data: every SciFact and NFCorpus abstract as a note
    (``# title``, text), then tldr pages (English, sorted by path) up to the count."""
    vault = args.work / f"vault-{notes // 1000}k"
    if (vault / ".complete").exists():
        return vault
    shutil.rmtree(vault, ignore_errors=True)
    count = 0
    for name in ("scifact", "nfcorpus"):
        (vault / name).mkdir(parents=True)
        with open(SHARED_DATA / name / "corpus.jsonl", encoding="utf-8") as f:
            for line in f:
                doc = json.loads(line)
                (vault / name / f"{doc['_id']}.md").write_text(f"# {doc['title'].strip()}\n\n{doc['text'].strip()}\n", encoding="utf-8")
                count += 1
    tldr = extract(args.data / "tldr.tar.gz", args.work)
    for page in sorted(tldr.glob("pages/*/*.md")):
        if count >= notes:
            break
        target = vault / "tldr" / page.parent.name / page.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(page, target)
        count += 1
    (vault / ".complete").write_text(str(count))
    return vault


def bench_static(args) -> dict:
    """The static test model (scripts/make_static_model.py) against MiniLM: passages/s and peak RSS
    on the same part of the rust-book, a query's vector, and a 10,000-note vault's ``collection add``."""
    if not STATIC_MODEL_DIR.is_dir():
        subprocess.run([sys.executable, str(REPO / "scripts" / "make_static_model.py")], check=True)
    base = keyword_rust_book(args, SWEEP_GLOB)
    out: dict = {"embed": {}, "query": {}}
    queries = RUST_QUESTIONS + TLDR_QUESTIONS
    for label, folder in (("static", STATIC_MODEL_DIR), ("minilm", DEFAULT_MODEL_DIR)):
        os.environ["PMS_MODEL_DIR"] = str(folder)
        db = fresh(args.work / f"rust-book-part-{label}.sqlite")
        shutil.copyfile(base, db)
        res = out["embed"][label] = run_child("embed", db=str(db), batch_size=None)
        print(f"  {label}: {res['chunks']} passages in {res['seconds']:.2f}s = {res['chunks_per_s']:,.0f} passages/s "
              f"({res['chunks_per_cpu_s']:,.0f} per CPU-second), peak RSS {res['peak_rss_mb']:.0f} MB", flush=True)
        q = out["query"][label] = run_child("query_embed", model_dir=str(folder), queries=queries)
        print(f"  {label}: a query's vector {q['median_ms']:.3f} ms median, {q['p95_ms']:.3f} ms p95", flush=True)
    vault = static_vault(args)
    home = args.work / "static-home"
    shutil.rmtree(home, ignore_errors=True)
    res = out["vault"] = run_child("collection_add", home=str(home), model_dir=str(STATIC_MODEL_DIR), vault=str(vault))
    print(f"  collection add of {vault} ({(vault / '.complete').read_text()} notes), static model: meaning search after "
          f"{res['seconds_to_meaning_search']:.1f}s ({res['passages']} passages embedded in {res['embed_seconds']}s), "
          f"peak RSS {res['peak_rss_mb']:.0f} MB, vector search answered: {res['vector_search_ok']}; {res['status']}", flush=True)
    return out


BENCHMARKS: dict = {"keyword": bench_keyword, "embed": bench_embed, "hybrid": bench_hybrid, "size": bench_size, "start": bench_start,
              "static": bench_static}


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 2 and sys.argv[1] == "_child":
        result = CHILD_STEPS[sys.argv[2]](**json.loads(sys.argv[3]))
        print(json.dumps(result))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("benchmark", choices=[*BENCHMARKS, "all"])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with tldr.tar.gz and rust-book.tar.gz")
    parser.add_argument("--work", type=Path, default=Path("/tmp/pms-perf"), help="scratch folder for corpora and indexes")
    parser.add_argument("--runs", type=int, default=15, help="CLI runs per variant")
    parser.add_argument("--python", default="python3", help="interpreter for the keyword CLI timings")
    parser.add_argument("--batch-sizes", type=lambda s: [None if x == "model" else int(x) for x in s.split(",")],
                        default=[None], help="embed: passages per ONNX call, e.g. 1,4,8 ('model': the model's own, as a sync; the default)")
    parser.add_argument("--embed-experiments", action="store_true",
                        help="embed: with ONNX Runtime's memory arena off, at 512 and at 256 tokens")
    parser.add_argument("--hybrid-db", type=Path, help="an embedded index for the hybrid and size benchmarks "
                        "(e.g. the dev suite's SciFact index in .cache/bench/scifact; it is copied first); default: the rust-book, embedded here")
    parser.add_argument("--compare-with", type=Path, help="start: also time the pms command of the pms.py in this folder "
                        "(a checkout of another commit), interleaved with this one's")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if not (args.data / "tldr.tar.gz").exists():
        parser.error(f"no corpora in {args.data} (pass --data)")
    if DEFAULT_MODEL_DIR.is_dir():
        os.environ.setdefault("PMS_MODEL_DIR", str(DEFAULT_MODEL_DIR))
    results: dict = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "sqlite": sqlite3.sqlite_version}}
    for name in (BENCHMARKS if args.benchmark == "all" else [args.benchmark]):
        # The load average shows how much other work shared the CPUs during a run.
        print(f"== {name} (load average {os.getloadavg()[0]:.1f})", flush=True)
        results[name] = BENCHMARKS[name](args)
        results[f"{name}_load_average_after"] = os.getloadavg()[0]
        print(f"   (load average after: {os.getloadavg()[0]:.1f})")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
