#!/usr/bin/env python3
"""README.md's figures, written from the bench's own JSON.

Each figure in README.md sits in a marked span, ``<!-- figure KEY -->0.758<!-- /figure -->``
(invisible when rendered), whose value comes from a file in bench/results/: what a bench
tool printed with ``--json``, reduced to what the README shows, with the command that made
it. ``--check`` (a test runs it) fails when a span differs from its source, names no known
figure, or when the README's prose holds a measured-looking number (ms, MB, %, x, nDCG...)
outside any span: a figure with no command behind it. Settings (``PMS_PDF_TIMEOUT=60``),
flags and examples in code are not figures.

    .venv/bin/python bench/figures.py --check             # what tests/test_bench.py runs
    PMS_MODEL_DIR=.cache/minilm .venv/bin/python bench/suite.py --json > /tmp/suite.json
    .venv/bin/python bench/figures.py --suite /tmp/suite.json   # keep its summary, rewrite README.md
    .venv/bin/python bench/figures.py                     # rewrite README.md from bench/results/
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
README = REPO / "README.md"

def _mean_ndcg(suite: dict, mode: str) -> str:
    return f"{suite['summary']['mean'][mode]['ndcg@10']:.3f}"


# key -> (its file in bench/results/, the value as the README shows it)
FIGURES: dict[str, tuple[str, Callable[[dict], str]]] = {
    "suite.sets": ("suite.json", lambda d: str(len(d["sets"]))),
    **{f"suite.{mode}.ndcg10": ("suite.json", functools.partial(_mean_ndcg, mode=mode)) for mode in ("hybrid", "keyword", "vector")},
    "suite.hybrid.worst": ("suite.json", lambda d: f"{d['summary']['worst']['hybrid']['ndcg@10']:.3f}"),
    "suite.hybrid.worst_set": ("suite.json", lambda d: d["summary"]["worst"]["hybrid"]["set"]),
}

SPAN = re.compile(r"<!-- figure ([\w.@-]+) -->(.*?)<!-- /figure -->", re.S)
# A number that reads as measured: followed by a unit of time, size, share or speed, or after a metric's name.
MEASURED = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:ms|s|MB|GB|KB|kB|%|x|×|notes/s|passages/s|minutes?|seconds?)(?!\w)"
                      r"|(?:nDCG@\d+|MRR|Hit@\d+|p50|p95|median|recall@\d+)\s+\d[\d.]*")


def load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def value(key: str) -> str:
    name, shown = FIGURES[key]
    return shown(load(name))


def rewrite(text: str) -> str:
    """``text`` with every known span's value written from its source."""
    return SPAN.sub(lambda m: f"<!-- figure {m.group(1)} -->{value(m.group(1)) if m.group(1) in FIGURES else m.group(2)}"
                              "<!-- /figure -->", text)


def problems(text: str) -> list[str]:
    """What --check reports: spans that are stale or unknown, measured numbers outside any span."""
    found = []
    for m in SPAN.finditer(text):
        key, shown = m.group(1), m.group(2)
        if key not in FIGURES:
            found.append(f"figure {key!r} has no source (bench/figures.py FIGURES)")
        elif shown != value(key):
            found.append(f"figure {key!r} reads {shown!r}, its source says {value(key)!r} (run bench/figures.py)")
    prose = SPAN.sub("", text)
    prose = re.sub(r"```.*?```", "", prose, flags=re.S)  # commands and examples
    prose = re.sub(r"`[^`\n]*`", "", prose)  # settings, flags, file names
    for line in prose.split("\n"):
        for m in MEASURED.finditer(line):
            found.append(f"README.md: {m.group()!r} is a figure without a source: put it in a "
                         f"<!-- figure KEY --> span fed by bench/results/, or leave it to docs/ ({line.strip()[:80]})")
    return found


def keep_suite(path: Path) -> None:
    """bench/results/suite.json from a ``bench/suite.py --json`` output: its summary, what it covered, and how."""
    data = json.loads(path.read_text(encoding="utf-8"))
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    kept = {"command": "PMS_MODEL_DIR=.cache/minilm .venv/bin/python bench/suite.py --json", "commit": commit,
            "model": data.get("model"), "chunk_chars": data.get("chunk_chars"), "sets": sorted(data["sets"]),
            "summary": data["summary"]}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "suite.json").write_text(json.dumps(kept, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="fail when a README figure is stale or has no source")
    ap.add_argument("--suite", type=Path, help="keep the summary of this bench/suite.py --json output first")
    args = ap.parse_args(argv)
    if args.suite:
        keep_suite(args.suite)
    text = README.read_text(encoding="utf-8")
    if args.check:
        found = problems(text)
        print("\n".join(found) or "README figures: each has its source")
        return 1 if found else 0
    README.write_text(rewrite(text), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
