#!/usr/bin/env python3
"""nDCG@10 per kind of query, from a saved ``bench/suite.py --json`` run.

    PMS_MODEL_DIR=.cache/minilm .venv/bin/python bench/suite.py --sets sample --json > /tmp/sample.json
    .venv/bin/python bench/by_kind.py /tmp/sample.json                # one row per mode, one column per kind
    .venv/bin/python bench/by_kind.py /tmp/sample.json --queries      # and every query's nDCG@10 per mode

The kinds come from the ``kind`` field of the fixture's queries
(bench/sample_notes_queries.json: name, howto, concept, syntax, non-english);
``pms.load_fixture`` ignores the field, so the fixture stays qmd's format.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO  # noqa: E402


def by_kind(run: dict, fixture: dict, set_name: str) -> tuple[list[str], dict[str, dict[str, float]], dict[str, int]]:
    """(kinds in fixture order, mode -> kind -> mean nDCG@10, kind -> number of queries)."""
    kind_of = {q["query"]: q.get("kind", "other") for q in fixture["queries"]}
    kinds = list(dict.fromkeys(kind_of.values()))
    counts = {k: sum(1 for v in kind_of.values() if v == k) for k in kinds}
    table = {}
    for mode, result in run["sets"][set_name]["modes"].items():
        if not result.get("available"):
            continue
        scores: dict[str, list[float]] = {k: [] for k in kinds}
        for q in result["per_query"]:
            scores[kind_of[q["query"]]].append(q["ndcg@10"])
        table[mode] = {k: sum(v) / len(v) for k, v in scores.items() if v}
    return kinds, table, counts


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="the output of bench/suite.py --json")
    ap.add_argument("--set", default="sample")
    ap.add_argument("--fixture", type=Path, default=REPO / "bench" / "sample_notes_queries.json")
    ap.add_argument("--queries", action="store_true", help="also every query's nDCG@10 per mode")
    args = ap.parse_args(argv)
    run = json.loads(args.run.read_text(encoding="utf-8"))
    fixture = json.loads(args.fixture.read_text(encoding="utf-8"))
    kinds, table, counts = by_kind(run, fixture, args.set)
    print(f"{'nDCG@10':<9}" + "".join(f"{k:>12}" for k in kinds))
    for mode, row in table.items():
        print(f"{mode:<9}" + "".join(f"{row.get(k, float('nan')):12.3f}" for k in kinds))
    print(f"{'queries':<9}" + "".join(f"{counts[k]:12d}" for k in kinds))
    if args.queries:
        modes = list(table)
        print(f"\n{'query':<58}" + "".join(f"{m[:8]:>9}" for m in modes) + "  kind")
        per_mode = {m: {q["query"]: q["ndcg@10"] for q in run["sets"][args.set]["modes"][m]["per_query"]} for m in modes}
        for q in fixture["queries"]:
            print(f"{q['query'][:57]:<58}" + "".join(f"{per_mode[m][q['query']]:9.2f}" for m in modes) + f"  {q.get('kind', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
