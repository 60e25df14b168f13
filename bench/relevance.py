#!/usr/bin/env python3
"""Does the absolute relevance (Hit.relevance) tell answerable queries from the rest?

    PMS_MODEL_DIR=.cache/minilm .venv/bin/python bench/relevance.py [--workdir /tmp/pms-relevance]

For the sample notes' and the Rust book's judged queries (each has an answer in the
notes) and for queries the notes cannot answer, the best hit's relevance in hybrid
mode: how many of each fall below RankingSettings.relevance_floor, the lowest
answerable ones, the highest unanswerable ones (docs/benchmarks.md, "Relevance").
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import pms  # noqa: E402
from suite import load_set  # noqa: E402

UNANSWERABLE = ["best sourdough bread hydration", "zxqv flurble wibble", "how to change a car tire",
                "stock market tax rules in Brazil", "quantum chromodynamics lattice", "knitting a scarf pattern",
                "what is the capital of Mongolia"]


def best(kb: pms.KnowledgeBase, queries: list[str]) -> list[tuple[float, str]]:
    return sorted((kb.search(q, k=10, mode="hybrid").best_relevance or 0.0, q) for q in queries)


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/pms-relevance"), help="corpus notes and cached indexes")
    ap.add_argument("--chunk-chars", type=int, default=pms.DEFAULT_CHUNK_CHARS)
    ap.add_argument("--sets", nargs="+", default=["sample", "rustbook"], choices=["sample", "rustbook"])
    args = ap.parse_args(argv)
    floor = pms.RankingSettings().relevance_floor
    for name in args.sets:
        title = {"sample": "sample notes", "rustbook": "Rust book"}[name]
        kb, judgments = load_set(name, args.workdir, args.chunk_chars, embed=True)
        answerable = best(kb, [j.query for j in judgments])
        other = best(kb, UNANSWERABLE)
        kb.close()
        values = [v for v, _ in answerable]
        print(f"{title}: {len(values)} judged queries, best relevance median {statistics.median(values):.3f}, "
              f"{sum(v < floor for v in values)} below {floor}; lowest {[(round(v, 3), q) for v, q in answerable[:3]]}")
        print(f"  {len(other)} unanswerable: {sum(v < floor for v, _ in other)} below {floor}; "
              f"highest {[(round(v, 3), q) for v, q in other[-3:]]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
