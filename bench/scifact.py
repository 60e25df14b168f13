#!/usr/bin/env python3
"""BEIR SciFact with PMS: nDCG@10 of keyword, vector and hybrid search.

    PMS_MODEL_DIR=.cache/minilm .venv/bin/python bench/scifact.py            # all 300 test queries
    .venv/bin/python bench/scifact.py --modes keyword                         # no embeddings needed
    .venv/bin/python bench/scifact.py --chunk-chars 900 --json

The corpus (../shared/data/scifact, BEIR format) becomes one Markdown note per
document (``<_id>.md``: ``# title``, blank line, text) in ``--workdir``
(default /tmp/pms-scifact, never inside the repository), indexed by PMS. The
index is cached there, one file per (chunk size, model), so only the first run
embeds (~8k passages, a few minutes on 2 cores). Each hit maps back to its
``_id`` through the file stem; scoring is note-level nDCG@10 with binary
qrels, averaged over all 300 queries (BEIR's definition), computed by the
same code as ``pms.py bench``.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import SHARED_DATA, bench_parser, open_index, pms, print_result  # noqa: E402

DATA = SHARED_DATA / "scifact"
PUBLISHED = {  # nDCG@10 on the same split, for the table
    "BM25 (BEIR paper / Anserini / bm25s)": "0.665 / 0.679 / 0.687",
    "all-MiniLM-L6-v2 (MTEB)": "0.645",
    "bge-small-en-v1.5 (MTEB)": "0.713",
}


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_scifact(data: Path = DATA) -> tuple[list[dict], list[dict], dict[str, set[str]]]:
    """(corpus, test queries that have judgments, query id -> relevant doc ids)."""
    if not (data / "corpus.jsonl").exists():
        raise SystemExit(f"scifact: {data} not found (the evaluation data lives in ../shared/data; see its README)")
    corpus = read_jsonl(data / "corpus.jsonl")
    qrels: dict[str, set[str]] = {}
    for line in (data / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, did, score = line.split("\t")
        if int(score) > 0:
            qrels.setdefault(qid, set()).add(did)
    queries = [q for q in read_jsonl(data / "queries_test.jsonl") if q["_id"] in qrels]
    return corpus, queries, qrels


def write_notes(corpus: list[dict], folder: Path) -> Path:
    """One note per document; rewritten only when missing, so the index cache stays valid."""
    folder.mkdir(parents=True, exist_ok=True)
    for doc in corpus:
        path = folder / f"{doc['_id']}.md"
        if not path.exists():
            path.write_text(f"# {doc['title'].strip()}\n\n{doc['text'].strip()}\n", encoding="utf-8")
    return folder


def subset(corpus, queries, qrels, n_queries: int, n_other: int, seed: int = 13):
    """A small, reproducible slice: n queries, their relevant docs and n other docs."""
    rng = random.Random(seed)
    picked = rng.sample(queries, min(n_queries, len(queries)))
    wanted = set().union(*(qrels[q["_id"]] for q in picked))
    others = [d for d in corpus if d["_id"] not in wanted]
    keep = wanted | {d["_id"] for d in rng.sample(others, min(n_other, len(others)))}
    return [d for d in corpus if d["_id"] in keep], picked


def judgments(queries, qrels) -> list[pms.Judgment]:
    return [pms.Judgment(query=q["text"], relevant={f"{d}.md": 1.0 for d in sorted(qrels[q["_id"]])}) for q in queries]


def main(argv=None) -> int:
    ap = bench_parser(__doc__.split("\n\n")[0], "/tmp/pms-scifact")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--queries", type=int, default=0, help="only a random subset of N queries (with their docs + 1,000 others)")
    args = ap.parse_args(argv)

    corpus, queries, qrels = load_scifact(args.data)
    notes, name = args.workdir / "notes", ""
    if args.queries:
        corpus, queries = subset(corpus, queries, qrels, args.queries, 1000)
        name = f"-sub{args.queries}"
        notes = args.workdir / f"notes{name}"
    write_notes(corpus, notes)
    embed = args.modes != ["keyword"]
    kb = open_index(args.workdir, notes, "scifact" + name, args.chunk_chars, embed)
    t0 = time.monotonic()
    result = pms.run_benchmark(kb, judgments(queries, qrels), modes=args.modes, collections=["scifact" + name])
    result["corpus"] = {"documents": len(corpus), "queries": len(queries), "chunk_chars": args.chunk_chars,
                        "model": pms.model_settings()[0] if embed else None, "seconds": round(time.monotonic() - t0, 1)}
    print_result(f"SciFact test: {len(queries)} queries, {len(corpus)} notes, chunks of {args.chunk_chars} chars", result, args.json)
    if not args.json:
        print("\nPublished nDCG@10: " + "; ".join(f"{k} {v}" for k, v in PUBLISHED.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
