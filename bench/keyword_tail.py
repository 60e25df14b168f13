"""Keyword search tail latency on tldr-pages (38k notes, 9k of them Chinese,
Japanese or Korean), with the queries that used to be slow: short ones mixing
CJK, combining marks and control characters, next to ordinary ones.

    .venv/bin/python bench/keyword_tail.py [--workdir /tmp/pms-bench] [--queries 600]

Prints median, p99 and max of wall and CPU time per query (in-process API,
keyword mode, k=10). Figures: docs/robustness.md.
"""
from __future__ import annotations

import argparse
import random
import re
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED_DATA, pms  # noqa: E402

UNSPACED = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
ODD = ["\u0301", "\u0308", "\u200b", "\x07", "\x1b", "\t", "\ufeff", "e\u0301", "*", '"', "-"]


def query_set(root: Path, n: int, seed: int = 11) -> dict[str, list[str]]:
    """Ordinary queries (English words of the pages) and hard ones (CJK pieces, marks, controls)."""
    rng = random.Random(seed)
    english = sorted((root / "pages").glob("*/*.md"))
    cjk_pages = sorted(p for folder in ("pages.zh", "pages.zh_TW", "pages.ja") for p in (root / folder).glob("*/*.md"))
    runs = [run for p in rng.sample(cjk_pages, min(400, len(cjk_pages))) for run in UNSPACED.findall(p.read_text(encoding="utf-8"))]
    words = [w for p in rng.sample(english, 400) for w in re.findall(r"[a-z]{4,}", p.read_text(encoding="utf-8").lower())]
    ordinary = [" ".join(rng.sample(words, rng.choice((1, 2, 3)))) for _ in range(n // 3)]
    hard = []
    while len(hard) < n - len(ordinary):
        run = rng.choice(runs)
        start = rng.randrange(len(run))
        piece = run[start : start + rng.choice((1, 2, 2, 3, 4))]
        kind = len(hard) % 5
        if kind == 0:
            hard.append(piece)
        elif kind == 1:
            hard.append(piece + rng.choice(ODD) + rng.choice(runs)[:2])
        elif kind == 2:
            hard.append(f"{rng.choice(words)} {piece}")
        elif kind == 3:
            hard.append(rng.choice(ODD).join(piece))
        else:
            hard.append(" ".join(rng.choice(runs)[:rng.choice((1, 2))] for _ in range(rng.randint(2, 6))))
    return {"ordinary": ordinary, "hard": hard}


def stats(values: list[float]) -> dict:
    values = sorted(values)
    pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
    return {"n": len(values), "p50_ms": pick(0.5) * 1000, "p99_ms": pick(0.99) * 1000, "max_ms": values[-1] * 1000}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/pms-bench"))
    ap.add_argument("--queries", type=int, default=600)
    ap.add_argument("--db", type=Path, help="an existing keyword index of tldr (default: built in the workdir)")
    opts = ap.parse_args()
    root = opts.workdir / "tldr"
    if not root.is_dir():
        archive = SHARED_DATA / "corpora" / "tldr.tar.gz"
        if not archive.exists():
            sys.exit(f"tldr.tar.gz not found in {archive.parent}")
        opts.workdir.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            tar.extractall(opts.workdir)
    db = opts.db or opts.workdir / "tldr-keyword-tail.sqlite"
    with pms.KnowledgeBase(db, embeddings=False) as kb:
        if not kb.collections.list():
            kb.collections.create(root, name="tldr")
        report = kb.sync()
        if report.added:
            print(f"indexed: {report.summary()}", file=sys.stderr)
        sets = query_set(root, opts.queries)
        for name, queries in sets.items():
            kb.search(queries[0], mode="keyword")  # warm the page cache
            wall, cpu, worst = [], [], (0.0, "")
            for q in queries:
                w0, c0 = time.perf_counter(), time.process_time()
                kb.search(q, mode="keyword")
                w, c = time.perf_counter() - w0, time.process_time() - c0
                wall.append(w)
                cpu.append(c)
                worst = max(worst, (c, q))
            sw, sc = stats(wall), stats(cpu)
            print(f"{name:>8} ({sw['n']} queries): wall p50 {sw['p50_ms']:.1f} ms, p99 {sw['p99_ms']:.1f} ms, max {sw['max_ms']:.1f} ms; "
                  f"CPU p50 {sc['p50_ms']:.1f} ms, p99 {sc['p99_ms']:.1f} ms, max {sc['max_ms']:.1f} ms (slowest: {worst[1]!r})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
