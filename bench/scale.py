"""How PMS grows with the vault: keyword indexing, re-sync, index size, search latency and memory.

A vault of N notes is generated from the corpora in ../shared/data (tldr pages in every
language, SciFact and NFCorpus abstracts, the Rust book) under --workdir (never in the
repo): varied folders, frontmatter (tags, dates, aliases), wikilinks, spread mtimes.
Vectors are synthetic (a deterministic int8 vector per passage, clustered like real
embeddings), written by a real sync through a stand-in Embedder, so vector search and
memory are measured without a model; an index is padded with extra vectors (ids of no
passage) to reach each --vectors count. The embedding model's own rate is bench/perf.py's.

Each measurement runs in a fresh interpreter (its own peak RSS). Usage:

    .venv/bin/python bench/scale.py                        # 10k and 100k notes, 100k and 1M vectors
    .venv/bin/python bench/scale.py --sizes 2000 --vectors 20000 --queries 20   # a quick look
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
import hashlib
import itertools
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, SHARED_DATA
from perf import connect_with_vec, extract, fresh, overhead, percentiles

import pms

DIM = 384
CLUSTERS = 512  # synthetic vectors gather around this many centres, as real topics do
ANN_EF = 256  # usearch expansion_search: candidates kept while searching (recall against latency)
FOLDERS = ["projects", "areas/health", "areas/work", "archive/2022", "archive/2023", "inbox", "reading", "reference"]
TAGS = ["todo", "idea", "reading", "work", "health", "rust", "shell", "science", "draft", "review"]


# -- the vault -------------------------------------------------------------------------
def corpus_items(workdir: Path, data: Path) -> list[tuple[str, str, str]]:
    """(folder, stem, Markdown body) of every source note, in a fixed order."""
    items: list[tuple[str, str, str]] = []
    src = workdir / "src"
    tldr = extract(data / "corpora" / "tldr.tar.gz", src)
    for path in sorted(tldr.rglob("*.md")):
        rel = path.relative_to(tldr)
        items.append(("tldr/" + "/".join(rel.parts[-3:-1]), path.stem, path.read_text(encoding="utf-8", errors="replace")))
    book = extract(data / "corpora" / "rust-book.tar.gz", src)
    for path in sorted(book.rglob("*.md")):
        items.append(("rust-book", path.stem, path.read_text(encoding="utf-8", errors="replace")))
    for corpus, folder in (("scifact", "science"), ("nfcorpus", "nutrition")):
        with open(data / corpus / "corpus.jsonl", encoding="utf-8") as f:
            for line in f:
                doc = json.loads(line)
                items.append((folder, f"{corpus}-{doc['_id']}", f"# {doc['title']}\n\n{doc['text']}\n"))
    random.Random(1).shuffle(items)
    return items


def build_vault(workdir: Path, data: Path, notes: int) -> Path:
    """``notes`` Markdown files under workdir/vault-N (made once; a marker says it is complete)."""
    root = workdir / f"vault-{notes}"
    if (root / ".complete").exists():
        return root
    items = corpus_items(workdir, data)
    rng = random.Random(notes)
    now = time.time()
    stems: list[str] = []
    for i in range(notes):
        folder, stem, body = items[i % len(items)]
        copy = i // len(items)
        top = FOLDERS[int(hashlib.md5(f"{folder}{stem}{copy}".encode()).hexdigest(), 16) % len(FOLDERS)]
        name = stem if not copy else f"{stem}-{copy}"
        path = root / top / folder / f"{name}.md"
        meta = ""
        if i % 3:
            day = f"20{19 + i % 7}-{1 + i % 12:02d}-{1 + i % 28:02d}"
            tags = ", ".join(rng.sample(TAGS, 1 + i % 3))
            meta = f"---\ntags: [{tags}]\ndate: {day}\n" + (f"aliases: [{name} note]\n" if i % 5 == 0 else "") + "---\n"
        links = f"\n\nSee also [[{stems[rng.randrange(len(stems))]}]].\n" if stems and i % 4 == 0 else ""
        revision = f"\n\nRevision {copy}: notes kept in {top}.\n" if copy else ""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(meta + body + revision + links, encoding="utf-8")
        when = now - rng.uniform(0, 3 * 365 * 86400)  # modified over three years
        os.utime(path, (when, when))
        stems.append(name)
    (root / ".complete").write_text(str(notes))
    return root


def queries_for(vault: Path, n: int, seed: int = 7) -> list[str]:
    """Two or three words from the first lines of random notes (a mix of languages)."""
    rng = random.Random(seed)
    paths = sorted(vault.rglob("*.md"))
    out: list[str] = []
    while len(out) < n:
        text = rng.choice(paths).read_text(encoding="utf-8", errors="replace")
        words = [w.strip(".,:;()[]`#*>\"'") for w in text.split() if len(w) > 3 and w.isprintable() and "---" not in w]
        words = [w for w in words if w and not w.startswith(("tags", "date", "aliases", "[[", "{{"))]
        if len(words) >= 3:
            start = rng.randrange(max(1, len(words) - 3))
            out.append(" ".join(words[start:start + rng.choice((2, 3))]))
    return out


# -- synthetic vectors -----------------------------------------------------------------
def synthetic_vector(text: str) -> bytes:
    """A deterministic int8 vector for ``text``: a cluster centre plus noise."""
    import numpy as np

    seed = int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")
    rng = np.random.default_rng(seed)
    centre = np.random.default_rng(seed % CLUSTERS).standard_normal(DIM)
    vec = centre + 0.6 * rng.standard_normal(DIM)
    return np.clip(np.round(vec / np.abs(vec).max() * 127), -127, 127).astype(np.int8).tobytes()


class SyntheticEmbedder(pms.Embedder):
    """Writes a synthetic vector per passage through the real sync path (no model)."""

    def __init__(self):
        super().__init__("synthetic/int8-384", allow_download=False)

    def load(self):
        self.dim = DIM
        return self

    def embed_stream(self, texts):
        for text in texts:
            yield synthetic_vector(text)

    def embed_query(self, text: str) -> bytes:
        return synthetic_vector("query " + text)


def pad_vectors(db: Path, total: int) -> int:
    """Add synthetic vectors (ids of no passage) until the index holds ``total``; the count reached."""
    import numpy as np

    con = connect_with_vec(db)
    have, top = con.execute("SELECT count(*), coalesce(max(chunk_id), 0) FROM chunk_vectors").fetchone()
    rng = np.random.default_rng(total)
    centres = rng.standard_normal((CLUSTERS, DIM))
    next_id = max(top, 10**9) + 1
    while have < total:
        n = min(20000, total - have)
        vecs = centres[rng.integers(0, CLUSTERS, n)] + 0.6 * rng.standard_normal((n, DIM))
        vecs = np.clip(np.round(vecs / np.abs(vecs).max(axis=1, keepdims=True) * 127), -127, 127).astype(np.int8)
        con.execute("BEGIN")
        con.executemany("INSERT INTO chunk_vectors(chunk_id, embedding, collection_id) VALUES (?, vec_int8(?), 1)",
                        ((next_id + j, vecs[j].tobytes()) for j in range(n)))
        con.execute("INSERT INTO meta(key, value) VALUES ('vectors_version', 1) "
                    "ON CONFLICT(key) DO UPDATE SET value = value + 1")
        con.execute("COMMIT")
        have, next_id = have + n, next_id + n
    con.close()
    return have


# -- measurements, each in a fresh interpreter -----------------------------------------
def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def child_index(db: str, vault: str) -> dict:
    """Keyword indexing, unchanged re-sync, re-sync after touching 100 notes; index size."""
    kb = pms.KnowledgeBase(fresh(Path(db)), embeddings=False)
    kb.collections.create(vault, name="vault")
    t, cpu = time.perf_counter(), time.process_time()
    report = kb.sync()
    index_s, index_cpu_s = time.perf_counter() - t, time.process_time() - cpu
    unchanged, unchanged_cpu = [], []
    for _ in range(3):
        t, cpu = time.perf_counter(), time.process_time()
        kb.sync()
        unchanged.append(time.perf_counter() - t)
        unchanged_cpu.append(time.process_time() - cpu)
    paths = sorted(Path(vault).rglob("*.md"))
    for path in random.Random(3).sample(paths, min(100, len(paths))):
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"\nTouched at {time.time()}.\n")
    t = time.perf_counter()
    touched = kb.sync()
    touch_s = time.perf_counter() - t
    kb.close()
    # CPU time too: on a shared machine wall time says more about the neighbours than about PMS.
    return {"notes": report.added, "index_s": index_s, "notes_per_s": report.added / index_s,
            "notes_per_cpu_s": report.added / index_cpu_s, "resync_unchanged_s": statistics.median(unchanged),
            "resync_unchanged_cpu_s": statistics.median(unchanged_cpu), "resync_touched_s": touch_s,
            "touched_updated": touched.updated, "peak_rss_mb": peak_rss_mb(), **overhead(Path(db))}


def child_embed(db: str) -> dict:
    """Synthetic vectors for every passage through sync; the longest gap between two
    committed batches bounds how long one write transaction held the index."""
    kb = pms.KnowledgeBase(db, embedder=SyntheticEmbedder())
    marks: list[float] = []
    t = time.perf_counter()
    report = kb.sync(embed=True, progress=lambda p: marks.append(time.perf_counter()) if p.phase == "embed" else None)
    seconds = time.perf_counter() - t
    gaps = [b - a for a, b in itertools.pairwise(marks)]
    kb.close()
    return {"embedded": report.embedded, "embed_s": seconds, "batches": len(marks),
            "max_batch_gap_s": max(gaps, default=0.0), "error": report.embed_error}


def search_fn(kb, mode: str):
    return lambda q: kb.search(q, k=10, mode=mode)


def child_warm(db: str, queries: list[str], modes: list[str]) -> dict:
    """Warm latency per mode (a long-running process: the app, the MCP server) and its RSS."""
    kb = pms.KnowledgeBase(db, embedder=SyntheticEmbedder())
    kb.keep_vectors_in_memory()
    out: dict = {}
    for mode in modes:
        fn = search_fn(kb, mode)
        for q in queries[:3]:
            fn(q)  # warm-up: the second vector search reads the vectors into memory
        times = []
        for q in queries:
            t = time.perf_counter()
            fn(q)
            times.append(time.perf_counter() - t)
        out[mode] = percentiles(times)
    out["rss_mb"] = current_rss_mb()
    out["peak_rss_mb"] = peak_rss_mb()
    out["vectors_in_memory_mb"] = kb.status(pending=False)["vectors_in_memory_bytes"] / 2**20
    kb.close()
    return out


def child_oneshot(db: str, query: str, mode: str) -> dict:
    """One search in a fresh process, as `pms search` runs it (synthetic query vector)."""
    kb = pms.KnowledgeBase(db, embedder=SyntheticEmbedder())
    kb.search(query, k=10, mode=mode)
    return {"vectors_in_memory_mb": kb.status(pending=False)["vectors_in_memory_bytes"] / 2**20}


def child_ann(db: str, queries: list[str], threads: int = 2) -> dict:
    """usearch's HNSW over the index's int8 vectors against exact search (numpy, int32 dot
    products: the same distances as sqlite-vec's): build time, memory, latency, recall@10."""
    import numpy as np
    from usearch.index import Index

    con = connect_with_vec(Path(db))
    passage_ids, blobs = zip(*con.execute("SELECT chunk_id, embedding FROM chunk_vectors"))
    con.close()
    ids = np.asarray(passage_ids, dtype=np.int64)
    matrix = np.frombuffer(b"".join(blobs), dtype=np.int8).reshape(len(ids), DIM)
    del blobs
    norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix, dtype=np.int64).astype(np.float64))
    rss_before = current_rss_mb()
    t = time.perf_counter()
    index = Index(ndim=DIM, metric="cos", dtype="i8", connectivity=16, expansion_add=128, expansion_search=ANN_EF)
    index.add(ids, matrix, threads=threads)
    build_s = time.perf_counter() - t
    recalls, exact_ms, ann_ms = [], [], []
    for q in queries:
        query = np.frombuffer(synthetic_vector("query " + q), dtype=np.int8)
        t = time.perf_counter()
        dots = np.einsum("ij,j->i", matrix, query, dtype=np.int32)
        distances = 1.0 - dots / (norms * np.sqrt(float(np.dot(query.astype(np.int32), query.astype(np.int32)))))
        exact = set(ids[np.argpartition(distances, 10)[:10]].tolist())
        exact_ms.append(time.perf_counter() - t)
        t = time.perf_counter()
        found = set(index.search(query, 10).keys.tolist())
        ann_ms.append(time.perf_counter() - t)
        recalls.append(len(exact & found) / 10)
    return {"vectors": len(ids), "build_s": build_s, "index_mb": index.memory_usage / 2**20,
            "rss_added_mb": current_rss_mb() - rss_before, "recall_at_10": statistics.mean(recalls),
            "recall_min": min(recalls), "exact": percentiles(exact_ms), "ann": percentiles(ann_ms)}


CHILDREN: dict[str, Callable[..., object]] = {"ann": child_ann, "index": child_index, "embed": child_embed, "warm": child_warm, "oneshot": child_oneshot}


def run_child(step: str, *args) -> dict:
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "_child", step, json.dumps(args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t = time.perf_counter()
    out, err = proc.communicate()
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"step {step} failed:\n{err[-3000:]}")
    return {**json.loads(out.strip().splitlines()[-1]), "process_wall_s": wall}


# Linux counts a child's peak memory from the process that spawned it: os.wait4 reports 313 MB
# for `python -c pass` spawned by a 300 MB process. This benchmark grows to hundreds of MB (it
# pads indexes with vectors), so one-shot commands are spawned by a small helper of their own
# (python -S, ~10 MB), which reports each command's wall time, peak resident memory and output.
_SPAWNER = r"""
import json, os, subprocess, sys, time
for line in sys.stdin:
    t = time.perf_counter()
    proc = subprocess.Popen(json.loads(line), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    print(json.dumps({"wall_s": time.perf_counter() - t, "peak_rss_mb": usage.ru_maxrss / 1024, "status": status,
                      "stdout": out.decode(errors="replace")}), flush=True)
"""


def oneshot(argv_for, queries: list[str]) -> dict:
    """Wall time and peak RSS of one-shot processes, ``argv_for(query)`` each, spawned by _SPAWNER."""
    wall, rss, extra = [], [], {}
    spawner = subprocess.Popen([sys.executable, "-S", "-c", _SPAWNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert spawner.stdin is not None and spawner.stdout is not None
    try:
        for q in queries:
            spawner.stdin.write(json.dumps(argv_for(q)) + "\n")
            spawner.stdin.flush()
            done = json.loads(spawner.stdout.readline())
            if done["status"] != 0:
                raise SystemExit(f"{argv_for(q)} failed with status {done['status']}")
            wall.append(done["wall_s"])
            rss.append(done["peak_rss_mb"])
            if done["stdout"].strip().startswith("{"):
                extra = json.loads(done["stdout"].strip().splitlines()[-1])
    finally:
        spawner.stdin.close()
        spawner.wait()
    return {**percentiles(wall), "peak_rss_mb": max(rss), **extra}


# -- the run ---------------------------------------------------------------------------
def index_ratio(db: Path) -> dict:
    """Index file size against its passages' text plus their int8 vectors."""
    o = overhead(db)
    con = connect_with_vec(db)
    vectors = con.execute("SELECT count(*) FROM chunk_vectors").fetchone()[0]
    con.close()
    raw = o["text_bytes"] + vectors * DIM
    return {**o, "vectors": vectors, "bytes_per_passage": o["file_bytes"] / max(o["chunks"], 1),
            "size_ratio": o["file_bytes"] / max(raw, 1)}


def measure_searches(db: Path, queries: list[str], runs: int, modes: list[str]) -> dict:
    python, this = sys.executable, str(Path(__file__).resolve())
    out = {"warm": run_child("warm", str(db), queries, modes)}
    if "keyword" in modes:
        out["cli_keyword"] = oneshot(lambda q: [python, str(REPO / "pms.py"), "--db", str(db), "search", q, "--mode", "keyword"],
                                     queries[:runs])
    out["oneshot_hybrid"] = oneshot(lambda q: [python, this, "_child", "oneshot", json.dumps([str(db), q, "hybrid"])],
                                    queries[:runs])
    return out


def run(args) -> dict:
    for corpus in ("corpora/tldr.tar.gz", "corpora/rust-book.tar.gz", "scifact/corpus.jsonl", "nfcorpus/corpus.jsonl"):
        if not (args.data / corpus).exists():
            raise SystemExit(f"scale bench: {args.data / corpus} is missing (the corpora live in ../shared/data)")
    args.workdir.mkdir(parents=True, exist_ok=True)
    results: dict = {"load_before": os.getloadavg(), "notes": [], "vectors": []}
    dbs: list[tuple[int, Path]] = []
    for n in sorted(args.sizes):
        t = time.perf_counter()
        vault = build_vault(args.workdir, args.data, n)
        print(f"{n} notes: vault ready in {time.perf_counter() - t:.0f}s", file=sys.stderr)
        db = args.workdir / f"index-{n}.sqlite"
        row: dict = {"notes_asked": n, **run_child("index", str(db), str(vault))}
        print(f"{n} notes: indexed at {row['notes_per_s']:.0f} notes/s", file=sys.stderr)
        row["embed"] = run_child("embed", str(db))
        row["size"] = index_ratio(db)
        queries = queries_for(vault, args.queries)
        row.update(measure_searches(db, queries, args.oneshot_runs, ["keyword", "vector", "hybrid"]))
        results["notes"].append(row)
        dbs.append((row["size"]["chunks"], db))
        print(f"{n} notes: searched", file=sys.stderr)
    queries = queries_for(args.workdir / f"vault-{min(args.sizes)}", args.queries)
    for total in sorted(args.vectors):
        # The largest vault whose own passages fit under this count, padded up to it.
        passages, db = max([d for d in dbs if d[0] <= total] or [min(dbs)])
        t = time.perf_counter()
        have = pad_vectors(db, total)
        row = {"vectors": have, "passages": passages, "pad_s": time.perf_counter() - t, "index_bytes": db.stat().st_size,
               **measure_searches(db, queries, args.oneshot_runs, ["vector", "hybrid"])}
        if args.ann and have <= args.ann_max:
            row["ann"] = run_child("ann", str(db), queries)
        results["vectors"].append(row)
        print(f"{have} vectors: searched", file=sys.stderr)
    results["load_after"] = os.getloadavg()
    return results


def table(results: dict) -> str:
    lines = [("| notes | passages | index notes/s | re-sync unchanged | re-sync 100 touched | bytes/passage | index / (text+vectors) "
              "| keyword warm med/p95 | vector warm | hybrid warm | warm RSS | CLI keyword (RSS) | one-shot hybrid (RSS) |"),
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results["notes"]:
        w = r["warm"]
        cpu_rate = f" ({r['notes_per_cpu_s']:,.0f}/CPU-s)" if "notes_per_cpu_s" in r else ""
        cpu_resync = f" ({r['resync_unchanged_cpu_s']:.2f} CPU-s)" if "resync_unchanged_cpu_s" in r else ""
        lines.append(f"| {r['notes']:,} | {r['size']['chunks']:,} | {r['notes_per_s']:,.0f}{cpu_rate} | {r['resync_unchanged_s']:.2f} s{cpu_resync} "
                     f"| {r['resync_touched_s']:.2f} s | {r['size']['bytes_per_passage']:,.0f} | {r['size']['size_ratio']:.2f} "
                     f"| {w['keyword']['median_ms']:.1f} / {w['keyword']['p95_ms']:.1f} ms "
                     f"| {w['vector']['median_ms']:.1f} / {w['vector']['p95_ms']:.1f} ms "
                     f"| {w['hybrid']['median_ms']:.1f} / {w['hybrid']['p95_ms']:.1f} ms | {w['rss_mb']:.0f} MB "
                     f"| {r['cli_keyword']['median_ms']:.0f} ms ({r['cli_keyword']['peak_rss_mb']:.0f} MB) "
                     f"| {r['oneshot_hybrid']['median_ms']:.0f} ms ({r['oneshot_hybrid']['peak_rss_mb']:.0f} MB) |")
    lines += ["", ("| vectors | of them passages | vector warm med/p95 | hybrid warm med/p95 | warm RSS (vectors in memory) "
                   "| one-shot hybrid (RSS, vectors in memory) |"), "|---:|---:|---:|---:|---:|---:|"]
    for r in results["vectors"]:
        w, o = r["warm"], r["oneshot_hybrid"]
        lines.append(f"| {r['vectors']:,} | {r['passages']:,} | {w['vector']['median_ms']:.1f} / {w['vector']['p95_ms']:.1f} ms "
                     f"| {w['hybrid']['median_ms']:.1f} / {w['hybrid']['p95_ms']:.1f} ms "
                     f"| {w['rss_mb']:.0f} MB ({w['vectors_in_memory_mb']:.0f} MB) "
                     f"| {o['median_ms']:.0f} ms ({o['peak_rss_mb']:.0f} MB, {o.get('vectors_in_memory_mb', 0):.0f} MB) |")
    if any("ann" in r for r in results["vectors"]):
        lines += ["", "| vectors | exact (numpy) med/p95 | usearch HNSW med/p95 | recall@10 mean (min) | build | HNSW memory |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for r in results["vectors"]:
            a = r.get("ann")
            if a:
                lines.append(f"| {a['vectors']:,} | {a['exact']['median_ms']:.1f} / {a['exact']['p95_ms']:.1f} ms "
                             f"| {a['ann']['median_ms']:.2f} / {a['ann']['p95_ms']:.2f} ms | {a['recall_at_10']:.3f} ({a['recall_min']:.1f}) "
                             f"| {a['build_s']:.0f} s | {a['index_mb']:.0f} MB |")
    lines.append(f"\nload average {results['load_before'][0]:.1f} before, {results['load_after'][0]:.1f} after")
    return "\n".join(lines)


def plot(results: dict, path: Path) -> bool:
    try:
        import matplotlib
    except ImportError:
        print("scale bench: matplotlib is not installed, no plot (pip install -r requirements-dev.txt)", file=sys.stderr)
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lat, mem) = plt.subplots(1, 2, figsize=(10, 4))
    notes = results["notes"]
    xs = [r["size"]["chunks"] for r in notes]
    for mode, style in (("keyword", "o-"), ("vector", "s-"), ("hybrid", "^-")):
        lat.plot(xs, [r["warm"][mode]["median_ms"] for r in notes], style, label=f"{mode} (vault)")
    vx = [r["vectors"] for r in results["vectors"]]
    for mode, style in (("vector", "s--"), ("hybrid", "^--")):
        lat.plot(vx, [r["warm"][mode]["median_ms"] for r in results["vectors"]], style, label=f"{mode} (padded vectors)")
    lat.set(xscale="log", yscale="log", xlabel="passages / vectors", ylabel="warm median latency (ms)", title="Search latency")
    lat.legend(fontsize=7)
    mem.plot(xs + vx, [r["warm"]["rss_mb"] for r in notes + results["vectors"]], "o", label="warm process RSS")
    mem.plot(xs + vx, [r["oneshot_hybrid"]["peak_rss_mb"] for r in notes + results["vectors"]], "x", label="one-shot hybrid peak RSS")
    mem.set(xscale="log", xlabel="passages / vectors", ylabel="MB", title="Memory")
    mem.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return True


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_child"]:
        print(json.dumps(CHILDREN[argv[1]](*json.loads(argv[2]))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="vault sizes in notes")
    ap.add_argument("--vectors", type=int, nargs="+", default=[100_000, 1_000_000], help="vector counts (padded)")
    ap.add_argument("--queries", type=int, default=50, help="queries per warm latency")
    ap.add_argument("--oneshot-runs", type=int, default=5, help="one-shot processes per figure")
    ap.add_argument("--workdir", type=Path, default=REPO / ".cache" / "scale", help="vaults and indexes (outside git)")
    ap.add_argument("--data", type=Path, default=SHARED_DATA)
    ap.add_argument("--ann", action="store_true", help="also measure usearch's HNSW against exact search (pip install usearch)")
    ap.add_argument("--ann-max", type=int, default=200_000, help="largest vector count for --ann (building HNSW is slow)")
    ap.add_argument("--plot", type=Path, help="save a PNG plot here (docs/scale.png)")
    ap.add_argument("--json", type=Path, help="save every figure here")
    args = ap.parse_args(argv)
    t = time.perf_counter()
    results = run(args)
    results["total_s"] = time.perf_counter() - t
    print(table(results))
    print(f"whole bench: {results['total_s']:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
