"""Shared by the benchmark scripts: a cached PMS index per (corpus, chunk size, model)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import pms  # noqa: E402

SHARED_DATA = REPO.parent / "shared" / "data"


def bench_parser(description: str, workdir: str):
    """The options every quality benchmark takes."""
    import argparse

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--workdir", type=Path, default=Path(workdir), help="corpus notes and cached indexes (outside the repo)")
    ap.add_argument("--chunk-chars", type=int, default=pms.DEFAULT_CHUNK_CHARS)
    ap.add_argument("--modes", nargs="+", default=list(pms.BENCH_MODES), choices=pms.BENCH_MODES)
    ap.add_argument("--json", action="store_true")
    return ap


def open_index(workdir: Path, folder: Path, collection: str, chunk_chars: int, embed: bool,
               embedding: dict | None = None) -> pms.KnowledgeBase:
    """The cached index of ``folder`` for this chunk size and model, synced (and embedded) as needed.

    The file name records chunk size and model, so changing either builds a
    new index instead of silently mixing passages or vectors.
    """
    model = ((embedding or {}).get("model") or pms.model_settings()[0]) if embed else "keyword"
    slug = re.sub(r"[^A-Za-z0-9]+", "-", model).strip("-").lower()
    workdir.mkdir(parents=True, exist_ok=True)
    kb = pms.KnowledgeBase(workdir / f"{collection}-{chunk_chars}-{slug}.sqlite", embeddings=embed, chunk_chars=chunk_chars,
                           embedding=embedding if embed else None)
    cached = {c.name: c.path for c in kb.collections.list()}
    if collection not in cached:
        kb.collections.create(folder, name=collection)
    elif cached[collection] != folder.resolve():
        # The cache is shared by several checkouts (.cache may be a symlink): measure this
        # checkout's notes, not those of whichever one built it; unchanged passages keep their vectors.
        kb.collections.move(collection, folder)
    t0 = time.monotonic()
    report = kb.sync(embed=embed, progress=pms.ProgressPrinter())
    if embed and kb.search_mode().code == "reembed-needed":  # a cache from an older PMS or model
        report = kb.sync(reembed=True, progress=pms.ProgressPrinter())
    if report.added or report.embedded:
        print(f"{collection}: indexed in {time.monotonic() - t0:.0f}s: {report.summary()}", file=sys.stderr)
    if embed and report.embed_error:
        print(f"{collection}: embeddings unavailable: {report.embed_error}", file=sys.stderr)
    return kb


def print_result(title: str, result: dict, as_json: bool) -> None:
    import json

    if as_json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        print(title)
        print(pms.format_benchmark(result))
