#!/usr/bin/env python3
"""What a filter costs: hybrid search on SciFact with and without a tag filter.

    PMS_MODEL_DIR=.cache/minilm .venv/bin/python bench/filters.py            # 300 queries x 4 variants
    .venv/bin/python bench/filters.py --queries 50 --json

Every SciFact document gets synthetic tags in its frontmatter: ``t0``..``t9``
(each on 10% of the notes), ``half`` (50%) and ``rare`` (1%). The tagged notes
are indexed by copying the cached SciFact index (bench/scifact.py builds it;
its passages are unchanged by the frontmatter, so sync re-reads the notes but
embeds nothing; the cached index itself is only read). Each query then runs hybrid (k=10) unfiltered and with each
filter, in rotating order; the figures are medians and p95 of the per-query
latency, and the ratio of each filtered median to the unfiltered one.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, pms  # noqa: E402
from scifact import load_scifact  # noqa: E402

VARIANTS = {"unfiltered": {}, "tag 10%": {"tags": ["t3"]}, "tag 50%": {"tags": ["half"]}, "tag 1%": {"tags": ["rare"]},
            "not tag 10%": {"exclude_tags": ["t3"]}}


def tags_for(n: int) -> list[str]:
    return [f"t{n % 10}"] + (["half"] if n % 2 == 0 else []) + (["rare"] if n % 100 == 0 else [])


def tagged_index(workdir: Path, corpus: list[dict]) -> pms.KnowledgeBase:
    """A copy of the cached SciFact index over notes that carry synthetic tags."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", pms.model_settings()[0]).strip("-").lower()
    cached = workdir / "scifact" / f"scifact-{pms.DEFAULT_CHUNK_CHARS}-{slug}.sqlite"
    if not cached.exists():
        raise SystemExit(f"filters: no cached SciFact index at {cached}; build it first: bench/scifact.py --workdir {cached.parent}")
    folder = workdir / "filters" / "notes"
    folder.mkdir(parents=True, exist_ok=True)
    for n, doc in enumerate(corpus):
        path = folder / f"{doc['_id']}.md"
        if not path.exists():
            path.write_text(f"---\ntags: [{', '.join(tags_for(n))}]\n---\n# {doc['title'].strip()}\n\n{doc['text'].strip()}\n",
                            encoding="utf-8")
    target = workdir / "filters" / f"{cached.stem}-tagged.sqlite"
    if not target.exists():
        # A page copy through SQLite's backup API: the cached index is shared with
        # other benchmarks (and other PMS versions), so it is never opened by this one.
        import sqlite3

        source = sqlite3.connect(f"file:{cached}?mode=ro", uri=True)
        dest = sqlite3.connect(target)
        source.backup(dest)
        source.close()
        reset_to_first_schema(dest)
        dest.close()
    kb = pms.KnowledgeBase(target)
    # The copy still points at the untagged notes: point it at the tagged ones (same passages).
    kb.collections.move("scifact", folder)
    t0 = time.monotonic()
    report = kb.sync(collections=["scifact"])
    print(f"tagged copy: {report.summary()} ({time.monotonic() - t0:.0f}s)", file=sys.stderr)
    return kb


# What the first migration creates: the copy keeps only these (and their shadow tables).
FIRST_SCHEMA = ("collections", "documents", "sqlite_sequence", "chunks", "chunks_fts", "meta", "chunk_vectors")
FIRST_TRIGGERS = ("chunks_ai", "chunks_ad", "chunks_au")
FIRST_INDEXES = ("documents_docid", "chunks_document", "chunks_unembedded")
FIRST_COLUMNS = {"documents": ("id", "collection_id", "path", "docid", "title", "tags", "aliases", "size", "mtime_ns",
                               "sha256", "indexed_at")}


def reset_to_first_schema(db) -> None:
    """The cache may have been migrated by another branch's PMS, whose migrations
    are numbered differently: cut the copy back to the first schema, which every
    PMS migrates the same way (its passages and vectors are kept)."""
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        if name not in FIRST_TRIGGERS:
            db.execute(f'DROP TRIGGER "{name}"')
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL").fetchall():
        if name not in FIRST_INDEXES:
            db.execute(f'DROP INDEX "{name}"')
    for table, keep in FIRST_COLUMNS.items():
        for column in [r[1] for r in db.execute(f"PRAGMA table_info({table})")]:
            if column not in keep:
                db.execute(f'ALTER TABLE {table} DROP COLUMN "{column}"')  # SQLite >= 3.35
    rows = db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
    extra = [(name, sql or "") for name, sql in rows if not name.startswith(FIRST_SCHEMA)]
    for name, sql in sorted(extra, key=lambda r: not r[1].upper().startswith("CREATE VIRTUAL")):  # virtual first: they drop their shadows
        if db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone():
            db.execute(f'DROP TABLE "{name}"')
    db.execute("PRAGMA user_version = 1")
    db.commit()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, default=REPO / ".cache" / "bench", help="where the cached indexes live")
    ap.add_argument("--queries", type=int, default=0, help="only the first N test queries")
    ap.add_argument("--related", type=int, default=50, help="time kb.related on this many notes (0: skip)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    corpus, queries, _ = load_scifact()
    kb = tagged_index(args.workdir, corpus)
    mode = kb.search_mode("hybrid").mode
    queries = queries[: args.queries] if args.queries else queries
    for q in queries[:5]:  # warm-up: model, caches
        kb.search(q["text"], k=10, mode=mode)
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    counts: dict[str, list[int]] = {name: [] for name in VARIANTS}
    names = list(VARIANTS)
    for i, q in enumerate(queries):
        for name in names[i % len(names):] + names[: i % len(names)]:  # rotate, so no variant always runs first
            t0 = time.perf_counter()
            hits = kb.search(q["text"], k=10, mode=mode, **VARIANTS[name])
            times[name].append((time.perf_counter() - t0) * 1000)
            counts[name].append(len(hits))
    # Related notes: from a note's passage vectors (up to 24 KNN queries), every 50th note.
    related_ms = []
    for doc in corpus[::50][:args.related]:
        t0 = time.perf_counter()
        kb.related(f"scifact/{doc['_id']}.md", k=10)
        related_ms.append((time.perf_counter() - t0) * 1000)
    base = statistics.median(times["unfiltered"])
    result = {name: {"median_ms": round(statistics.median(t), 1), "p95_ms": round(percentile(t, 0.95), 1),
                     "ratio_to_unfiltered": round(statistics.median(t) / base, 2), "mean_hits": round(statistics.mean(counts[name]), 2)}
              for name, t in times.items()}
    if related_ms:
        result["related"] = {"notes": len(related_ms), "median_ms": round(statistics.median(related_ms), 1),
                             "p95_ms": round(percentile(related_ms, 0.95), 1)}
    result["corpus"] = {"notes": len(corpus), "passages": kb.status(pending=False)["chunks"], "queries": len(queries), "mode": mode, "k": 10}
    kb.close()
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"SciFact, {len(corpus)} notes, {len(queries)} queries, {mode} k=10")
    print(f"{'variant':<14} {'median ms':>10} {'p95 ms':>8} {'ratio':>6} {'hits':>6}")
    for name in VARIANTS:
        r = result[name]
        print(f"{name:<14} {r['median_ms']:>10} {r['p95_ms']:>8} {r['ratio_to_unfiltered']:>6} {r['mean_hits']:>6}")
    if related_ms:
        r = result["related"]
        print(f"related notes ({r['notes']} notes, k=10): median {r['median_ms']} ms, p95 {r['p95_ms']} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
