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

from common import REPO, bench_parser, open_index, pms  # noqa: E402
from rustbook import FIXTURE as RUST_FIXTURE  # noqa: E402
from rustbook import extract_book  # noqa: E402

UNANSWERABLE = ["best sourdough bread hydration", "zxqv flurble wibble", "how to change a car tire",
                "stock market tax rules in Brazil", "quantum chromodynamics lattice", "knitting a scarf pattern",
                "what is the capital of Mongolia"]


def best(kb: pms.KnowledgeBase, queries: list[str]) -> list[tuple[float, str]]:
    return sorted((kb.search(q, k=10, mode="hybrid").best_relevance or 0.0, q) for q in queries)


def main(argv=None) -> int:
    args = bench_parser(__doc__.split("\n\n")[0], "/tmp/pms-relevance").parse_args(argv)
    floor = pms.RankingSettings().relevance_floor
    sets = [("sample notes", REPO / "sample-notes", "samples", REPO / "bench" / "sample_notes_queries.json"),
            ("Rust book", extract_book(args.workdir), "rustbook", RUST_FIXTURE)]
    for title, folder, name, fixture in sets:
        kb = open_index(args.workdir, folder, name, args.chunk_chars, embed=True)
        answerable = best(kb, [j.query for j in pms.load_fixture(fixture)])
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
