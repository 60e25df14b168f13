#!/usr/bin/env python3
"""The Rust book with PMS: quality of keyword, vector and hybrid search on our own judged questions.

    PMS_MODEL_DIR=.cache/minilm .venv/bin/python bench/rustbook.py
    .venv/bin/python bench/rustbook.py --modes keyword --chunk-chars 900 --json

The book (../shared/data/corpora/rust-book.tar.gz: 478 .md files, with the
redirect stubs of older editions) is extracted to ``--workdir`` (default
/tmp/pms-rustbook, never inside the repository) and indexed whole as one
collection; the index is cached per (chunk size, model). The questions and
their expected chapters are in bench/rustbook_queries.json (graded: relevant
and partial), scored by the same code as ``pms.py bench``.
"""

from __future__ import annotations

import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import SHARED_DATA, bench_parser, open_index, pms, print_result  # noqa: E402

ARCHIVE = SHARED_DATA / "corpora" / "rust-book.tar.gz"
FIXTURE = Path(__file__).resolve().parent / "rustbook_queries.json"


def extract_book(workdir: Path, archive: Path = ARCHIVE) -> Path:
    """Extract once; the book's root folder (holding src/)."""
    root = workdir / "rust-book"
    if not (root / "src" / "SUMMARY.md").exists():
        if not archive.exists():
            raise SystemExit(f"rustbook: {archive} not found (the evaluation data lives in ../shared/data; see its README)")
        workdir.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            tar.extractall(workdir, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(workdir)
    return root


def main(argv=None) -> int:
    ap = bench_parser(__doc__.split("\n\n")[0], "/tmp/pms-rustbook")
    ap.add_argument("--fixture", type=Path, default=FIXTURE)
    args = ap.parse_args(argv)

    root = extract_book(args.workdir)
    kb = open_index(args.workdir, root, "rustbook", args.chunk_chars, embed=args.modes != ["keyword"])
    t0 = time.monotonic()
    result = pms.run_benchmark(kb, pms.load_fixture(args.fixture), modes=args.modes, collections=["rustbook"])
    result["seconds"] = round(time.monotonic() - t0, 1)
    print_result(f"Rust book: {result['queries']} questions, {result['notes']} notes, chunks of {args.chunk_chars} chars",
                 result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
