"""Shared by the benchmark scripts: the evaluation sets, a cached PMS index per (corpus, passage size,
model), and one way to summarise timings (median and p95)."""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# The engine measured: this checkout's pms.py, or another's (PMS_BENCH_ENGINE, a checkout's folder:
# bench/suite.py --compare runs this suite over another revision's engine).
sys.path.insert(0, os.environ.get("PMS_BENCH_ENGINE") or str(REPO))

import pms  # noqa: E402

# ../shared/data beside the checkout; PMS_TEST_SHARED_DATA names it for a checkout elsewhere (a git worktree).
SHARED_DATA = Path(os.environ.get("PMS_TEST_SHARED_DATA") or REPO.parent / "shared" / "data")
RUST_BOOK = SHARED_DATA / "corpora" / "rust-book.tar.gz"


def percentile(values, q: float) -> float:
    """Nearest-rank percentile (q in 0..1), the definition ``pms bench`` reports."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(len(ordered), max(int(-(-len(ordered) * q // 1)), 1)) - 1]


def process_memory_mb(pid: int) -> dict:
    """A running process's current and peak resident memory in MB (Linux /proc: VmRSS, VmHWM).
    The peak of the process itself: a child's ru_maxrss also counts the process that spawned it."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = round(int(value.split()[0]) / 1024, 1)
    return {"rss_mb": fields.get("VmRSS"), "peak_rss_mb": fields.get("VmHWM")}


def timing_summary(seconds) -> dict:
    """Median, p95, min and max of timings in seconds, as milliseconds."""
    ms = [s * 1000 for s in seconds]
    if not ms:
        return {"n": 0}
    return {"n": len(ms), "median_ms": round(statistics.median(ms), 2), "p95_ms": round(percentile(ms, 0.95), 2),
            "min_ms": round(min(ms), 2), "max_ms": round(max(ms), 2)}


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def beir(name: str, workdir: Path) -> tuple[Path, list[pms.Judgment]]:
    """A BEIR set as one note per document (``<_id>.md``: ``# title``, text); graded gains scaled to 1."""
    data = SHARED_DATA / name
    if not (data / "corpus.jsonl").exists():
        raise FileNotFoundError(f"{data} not found (the evaluation data lives in ../shared/data; see its README)")
    folder = workdir / "notes"
    folder.mkdir(parents=True, exist_ok=True)
    for doc in read_jsonl(data / "corpus.jsonl"):
        path = folder / f"{doc['_id']}.md"
        if not path.exists():  # rewritten only when missing, so the cached index stays valid
            path.write_text(f"# {doc['title'].strip()}\n\n{doc['text'].strip()}\n", encoding="utf-8")
    grades: dict[str, dict[str, int]] = {}
    for line in (data / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, did, score = line.split("\t")
        if int(score) > 0:
            grades.setdefault(qid, {})[did] = int(score)
    judgments = []
    for q in read_jsonl(data / "queries_test.jsonl"):
        if q["_id"] in grades:
            top = max(grades[q["_id"]].values())
            judgments.append(pms.Judgment(q["text"], {f"{d}.md": g / top for d, g in sorted(grades[q["_id"]].items())}))
    return folder, judgments


def extract_book(workdir: Path, archive: Path = RUST_BOOK) -> Path:
    """The Rust book, extracted once under ``workdir``: its root folder (holding src/)."""
    root = workdir / "rust-book"
    if not (root / "src" / "SUMMARY.md").exists():
        if not archive.exists():
            raise FileNotFoundError(f"{archive} not found (the evaluation data lives in ../shared/data; see its README)")
        workdir.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            tar.extractall(workdir, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(workdir)
    return root


def open_index(workdir: Path, folder: Path, collection: str, passage_chars: int, embed: bool,
               embedding: dict | None = None, ranking: dict | None = None) -> pms.KnowledgeBase:
    """The cached index of ``folder`` for this passage size and model, synced (and embedded) as needed.

    The file name records passage size and model, so changing either builds a
    new index instead of silently mixing passages or vectors. ``ranking``: RankingSettings
    fields other than the defaults.
    """
    model = ((embedding or {}).get("model") or pms.model_settings()[0]) if embed else "keyword"
    slug = re.sub(r"[^A-Za-z0-9]+", "-", model).strip("-").lower()
    workdir.mkdir(parents=True, exist_ok=True)
    # Only when asked: an older engine (bench/suite.py --compare) has no ranking argument.
    knobs: dict[str, Any] = {"ranking": pms.RankingSettings(**ranking)} if ranking else {}
    kb = pms.KnowledgeBase(workdir / f"{collection}-{passage_chars}-{slug}.sqlite", embeddings=embed, passage_chars=passage_chars,
                           embedding=embedding if embed else None, **knobs)
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


def pdf_file(objects: list[bytes]) -> bytes:
    """A PDF of ``objects`` (numbered from 1; the first the catalog) with its cross-reference
    table. Written by hand: the benches and tests need PDFs no generator makes (broken fonts,
    flate bombs)."""
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1) + b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)
