#!/usr/bin/env python3
"""PDF text extraction: pypdfium2 against pypdf (docs/benchmarks.md, "PDFs").

    .venv/bin/python bench/pdf_bench.py              # 500 pages, 3 runs per library
    .venv/bin/python bench/pdf_bench.py --pages 2000 --runs 5

Makes a PDF of known text with fpdf2 (prose with ligature-prone words, a
heading per page, a two-column table every tenth page), then reads every page
in a fresh Python process per run and library, so each peak RSS is that
library's own. Text quality is the share of each page's known words found on
that page (recall) and the share of extracted words that are known (precision).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WORDS = [
    "office", "efficient", "affluent", "flight", "waffle", "fjord", "reflection", "artificial", "difficult",
    "official", "search", "engine", "passage", "notes", "vault", "index", "keyword", "hybrid", "vector",
    "retrieval", "fusion", "ownership", "borrow", "reference", "lifetime", "compiler", "thread", "channel",
    "socket", "buffer", "stream",
]


def page_words(page: int) -> list[str]:
    rng = random.Random(page)
    return [rng.choice(WORDS) for _ in range(220)] + [f"marker{page:04d}"]


def make_pdf(path: Path, pages: int) -> None:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_title("Benchmark manual")
    for page in range(1, pages + 1):
        pdf.add_page()
        pdf.set_font("Helvetica", "B", 16)
        pdf.cell(0, 10, f"Chapter {page}", new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("Helvetica", size=11)
        pdf.multi_cell(0, 6, " ".join(page_words(page)))
    pdf.output(str(path))


CHILD = r"""
import json, resource, sys, time
lib, path = sys.argv[1], sys.argv[2]
start = time.perf_counter()
pages = []
if lib == "pypdfium2":
    import pypdfium2 as pdfium
    doc = pdfium.PdfDocument(path)
    for i in range(len(doc)):
        page = doc[i]
        textpage = page.get_textpage()
        pages.append(textpage.get_text_bounded())
        textpage.close(); page.close()
    doc.close()
else:
    import pypdf
    reader = pypdf.PdfReader(path)
    for page in reader.pages:
        pages.append(page.extract_text() or "")
seconds = time.perf_counter() - start
rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
json.dump({"seconds": seconds, "rss_mb": rss_mb, "pages": pages}, sys.stdout)
"""


SYNC_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[3])
import pms
folder, db = sys.argv[1], sys.argv[2]
kb = pms.KnowledgeBase(db, embeddings=False)
kb.collections.create(folder, name="bench")
start = time.perf_counter()
report = kb.sync()
seconds = time.perf_counter() - start
assert not report.errors, report.errors
json.dump({"seconds": seconds, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "worker_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
           "passages": kb.status(pending=False)["passages"]}, sys.stdout)
"""


def run_sync(folder: Path, db: Path) -> dict:
    """A keyword-only ``pms sync`` of the folder: worker start, reading, passages, FTS."""
    repo = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", SYNC_CHILD, str(folder), str(db), str(repo)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def run(lib: str, path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, lib, str(path)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def quality(pages: list[str]) -> tuple[float, float]:
    found = known = extracted = right = 0
    vocabulary = set(WORDS)
    for number, text in enumerate(pages, 1):
        want = page_words(number)
        got = text.split()
        got_set = set(got)
        known += len(want)
        found += sum(1 for w in want if w in got_set)
        extracted += len(got)
        right += sum(1 for w in got if w in vocabulary or w == f"marker{number:04d}" or w in ("Chapter", str(number)))
    return found / known, right / max(extracted, 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=500)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.pdf"
        make_pdf(path, args.pages)
        print(f"{args.pages} pages, {path.stat().st_size / 1e6:.1f} MB; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        baseline = subprocess.run([sys.executable, "-c", "import resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"],
                                  capture_output=True, text=True, check=True)
        print(f"bare python peak RSS {int(baseline.stdout) / 1024:.0f} MB")
        for lib in ("pypdfium2", "pypdf"):
            results = [run(lib, path) for _ in range(args.runs)]
            rates = sorted(args.pages / r["seconds"] for r in results)
            rss = max(r["rss_mb"] for r in results)
            recall, precision = quality(results[0]["pages"])
            print(f"{lib:10} pages/s median {statistics.median(rates):7.0f} (runs {', '.join(f'{x:.0f}' for x in rates)}); "
                  f"peak RSS {rss:.0f} MB; word recall {recall:.4f}, precision {precision:.4f}")
        syncs = []
        for i in range(args.runs):
            syncs.append(run_sync(path.parent, Path(tmp) / f"index-{i}.sqlite"))
        rates = sorted(args.pages / r["seconds"] for r in syncs)
        print(f"pms sync   pages/s median {statistics.median(rates):7.0f} (runs {', '.join(f'{x:.0f}' for x in rates)}); "
              f"peak RSS {max(r['rss_mb'] for r in syncs):.0f} MB (worker {max(r['worker_rss_mb'] for r in syncs):.0f} MB); "
              f"{syncs[0]['passages']} passages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
