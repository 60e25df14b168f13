#!/usr/bin/env python3
"""Does "nothing looks clearly relevant" (SearchResult.weak) tell answerable queries from the rest?

    .venv/bin/python bench/relevance.py                                  # every pair, keyword and hybrid
    .venv/bin/python bench/relevance.py --sets sample rustbook --modes hybrid --per-set 50

On-topic queries: each set's judged queries on its own notes (each has an answer there).
Off-topic queries: one set's queries on another set's notes, their topics apart (medicine:
scifact, nfcorpus; software: rustbook, tldr, dendron, sample): a SciFact claim on the Rust
book, a Rust question on NFCorpus. For each mode, the best relevance of each search (the
first hit's, SearchResult.best_relevance) gives the false-alarm rate (on-topic queries
flagged weak) and the miss rate (off-topic queries not flagged) at the mode's shipped floor
(RankingSettings.floor_for: keyword_relevance_floor, relevance_floor) and at the others of --floors; the floor with the fewest
errors of both kinds (their mean) is marked. Indexes are the dev suite's (bench/suite.py).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, pms  # noqa: E402
from suite import INDEX_OF, PREPARE, load_set, settings_overrides  # noqa: E402

TOPIC = {"scifact": "medicine", "nfcorpus": "medicine", "rustbook": "software", "tldr": "software", "dendron": "software",
         "sample": "software"}
FLOORS = (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6)


def best_relevance(kb: pms.KnowledgeBase, queries: list[str], mode: str, collection: str) -> list[float]:
    return [kb.search(q, k=10, mode=mode, collections=[collection]).best_relevance or 0.0 for q in queries]


def rates(on: list[float], off: list[float], floor: float) -> tuple[float, float]:
    """(false alarms: on-topic below the floor, misses: off-topic at or above it), as shares."""
    return sum(v < floor for v in on) / max(len(on), 1), sum(v >= floor for v in off) / max(len(off), 1)


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", nargs="+", default=list(TOPIC), choices=list(TOPIC))
    ap.add_argument("--modes", nargs="+", default=["keyword", "hybrid"], choices=pms.BENCH_MODES)
    ap.add_argument("--per-set", type=int, default=100, help="queries of each set, on its notes and on each other set's")
    ap.add_argument("--floors", type=float, nargs="+", default=list(FLOORS))
    ap.add_argument("--workdir", type=Path, default=REPO / ".cache" / "bench", help="the dev suite's notes and cached indexes")
    ap.add_argument("--passage-chars", "--chunk-chars", type=int, default=pms.DEFAULT_PASSAGE_CHARS)
    ap.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE", help="a RankingSettings field (as bench/suite.py)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    overrides = settings_overrides(args.setting)
    settings = pms.RankingSettings(**overrides)
    embed = args.modes != ["keyword"]
    rng = random.Random(7)
    queries: dict[str, list[str]] = {}
    for name in args.sets:
        _, judgments = PREPARE[name](args.workdir / INDEX_OF.get(name, name))
        queries[name] = [j.query for j in rng.sample(judgments, min(args.per_set, len(judgments)))]
    best: dict[str, dict[str, list[float]]] = {mode: {"on": [], "off": []} for mode in args.modes}
    pairs: dict[str, float] = {}
    for vault in args.sets:
        kb, _ = load_set(vault, args.workdir, args.passage_chars, embed, ranking=overrides)
        with kb:
            for mode in args.modes:
                on = best_relevance(kb, queries[vault], mode, vault)
                best[mode]["on"] += on
                pairs[f"{mode} {vault} on {vault}"] = sum(on) / len(on)
                for asked in (s for s in args.sets if TOPIC[s] != TOPIC[vault]):
                    off = best_relevance(kb, queries[asked], mode, vault)
                    best[mode]["off"] += off
                    pairs[f"{mode} {asked} on {vault}"] = sum(off) / len(off)
    out: dict = {"floors": {mode: settings.floor_for(mode) for mode in args.modes}, "modes": {}}
    for mode, values in best.items():
        floor = settings.floor_for(mode)
        sweep = {f: rates(values["on"], values["off"], f) for f in sorted({*args.floors, floor})}
        chosen = min(sweep, key=lambda f: (sum(sweep[f]), abs(f - floor)))
        out["modes"][mode] = {"on_topic": len(values["on"]), "off_topic": len(values["off"]), "sweep": sweep, "fewest_errors": chosen,
                              "best": values}
    if args.json:
        print(json.dumps(out | {"pairs": pairs}, indent=2))
        return 0
    for mode, m in out["modes"].items():
        floor = out["floors"][mode]
        alarms, misses = m["sweep"][floor]
        print(f"{mode}: {m['on_topic']} on-topic and {m['off_topic']} off-topic queries; at the floor {floor:g}: "
              f"false alarms {alarms:.1%}, misses {misses:.1%}")
        print("  floor  " + " ".join(f"{f:>6g}" for f in m["sweep"]))
        print("  alarms " + " ".join(f"{a:6.1%}" for a, _ in m["sweep"].values()))
        print("  misses " + " ".join(f"{b:6.1%}" for _, b in m["sweep"].values()))
        print(f"  fewest errors (their mean) at {m['fewest_errors']:g}")
    print("mean best relevance, queries of a set on a set's notes:")
    for pair, value in pairs.items():
        print(f"  {pair:<34} {value:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
