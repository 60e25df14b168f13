#!/usr/bin/env python3
"""Fusion experiments on the dev suite, in seconds: the ranked lists of every
judged query are computed once (vector lists cached on disk), then each fusion
variant is a pure function over them (``pms.fuse``), scored like ``pms bench``.

    PMS_MODEL_DIR=.cache/minilm .venv/bin/python bench/fusion_lab.py

Prints nDCG@10 per set and the mean / worst set for each variant in VARIANTS.
The suite (bench/suite.py) remains the reference: it runs the real search path.
"""

from __future__ import annotations

import functools
import hashlib
import re
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO  # noqa: E402
from suite import SETS, load_set, pms  # noqa: E402

DEPTH = 100


def collect(name: str, workdir: Path) -> list[dict]:
    """Per query: gains of judged notes, and each list as [(note path, value)] best first.

    Keyword and name lists come from the keyword-only index, fresh each run;
    vector lists from the embedded index, cached (embedding the queries is slow)."""
    kb, judgments = load_set(name, workdir, pms.DEFAULT_CHUNK_CHARS, embed=False)
    notes = [(c.name, p) for c in kb.collections.list() for p in c.files]
    found, _ = pms.resolve_targets({t for j in judgments for t in j.relevant}, notes)
    key = hashlib.sha1(json.dumps([pms.model_settings()[0], DEPTH, [j.query for j in judgments]]).encode()).hexdigest()[:10]
    cache = workdir / name / f"vector-lists-{key}.json"
    if not cache.exists():
        embedded, _ = load_set(name, workdir, pms.DEFAULT_CHUNK_CHARS, embed=True)
        with embedded:
            cache.write_text(json.dumps([[(path, v) for _, path, v in embedded.ranked_lists(j.query, DEPTH, [name])["vector"]]
                                         for j in judgments]))
    vector_lists = json.loads(cache.read_text())
    out = []
    for j, vec in zip(judgments, vector_lists):
        lists = {n: [(path, value) for _, path, value in ranking] for n, ranking in kb.ranked_lists(j.query, DEPTH, [name]).items()}
        lists["vector"] = [tuple(x) for x in vec]
        gains = {}
        for target, g in j.relevant.items():
            p = found[target][1]
            gains[p] = max(g, gains.get(p, 0.0))
        out.append({"query": j.query, "parsed": pms.parse_query(j.query), "gains": gains, "lists": lists})
    kb.close()
    return out


def score(queries: list[dict], ranker) -> float:
    total = 0.0
    for q in queries:
        ranked = ranker(q)[:10]
        total += pms.query_metrics([q["gains"].get(p, 0.0) for p in ranked], list(q["gains"].values()))["ndcg@10"]
    return total / len(queries)


QUESTION = re.compile(r"^(how|what|why|when|where|which|who|whom|whose|can|could|does|do|did|is|are|was|were|should|would|will)\b", re.I)


def signals(q) -> dict:
    words = q["parsed"].words
    def peak(lst):
        v = [x for _, x in lst[:10]]
        if len(v) < 3 or v[0] == v[-1]:
            return 0.0
        return (v[0] - v[1]) / (v[0] - v[-1])
    return {"terms": len(q["parsed"].terms), "question": bool(QUESTION.match(q["query"].strip())) or q["query"].rstrip().endswith("?"),
            "kw_peak": peak(q["lists"]["keyword"]), "vec_peak": peak(q["lists"]["vector"]),
            "words": len(words)}


def fused(settings, lists=("keyword", "vector", "name"), weights_of=None):
    def ranker(q):
        lsts = {n: q["lists"][n] for n in lists if q["lists"][n]}
        w = {n: x for n, x in (weights_of(q, settings) if weights_of else settings.weights()).items() if n in lsts}
        return [e.unit for e in pms.fuse(lsts, settings, w)]
    return ranker


def convex(alpha, name_w=0.0, norm="minmax"):
    """score = alpha * keyword + (1 - alpha) * vector (+ name_w * name), each min-max normalised over its list."""
    def ranker(q):
        total = {}
        for n, w in (("keyword", alpha), ("vector", 1 - alpha), ("name", name_w)):
            lst = q["lists"][n][:DEPTH]
            if not lst or not w:
                continue
            vals = [v for _, v in lst]
            hi, lo = max(vals), min(vals)
            mean = sum(vals) / len(vals)
            sd = (sum((v - mean) ** 2 for v in vals) / len(vals)) ** 0.5 or 1.0
            for unit, v in lst:
                if n == "name":
                    x = v
                elif norm == "minmax":
                    x = (v - lo) / (hi - lo) if hi > lo else 1.0
                elif norm == "tm":  # theoretical minimum: 0 for BM25 and for cosine similarity
                    x = v / hi if hi > 0 else 0.0
                else:  # z-score, shifted so the list's worst is 0
                    x = (v - lo) / sd
                total[unit] = total.get(unit, 0.0) + w * x
        return sorted(total, key=lambda u: -total[u])
    return ranker


def adaptive(question_boost=0.0, short_boost=0.0, peak_gain=0.0, long_terms=5):
    def weights_of(q, st):
        sig = signals(q)
        w = st.weights()
        if sig["question"] or sig["terms"] >= long_terms:
            w["vector"] *= 1 + question_boost
        if peak_gain:
            w["keyword"] *= 1 + peak_gain * sig["kw_peak"]
            w["vector"] *= 1 + peak_gain * sig["vec_peak"]
        return w
    return weights_of


def main() -> int:
    workdir = REPO / ".cache" / "bench"
    sets = sys.argv[1:] or list(SETS)
    data = {name: collect(name, workdir) for name in sets}
    # The variants measured before the score share existed keep it off; score_share rows add it.
    F = functools.partial(pms.FusionSettings, score_share=0.0)
    variants = {
        "keyword": lambda q: [p for p, _ in q["lists"]["keyword"]],
        "vector": lambda q: [p for p, _ in q["lists"]["vector"]],
        "before: rrf 2:1 bonus .005": fused(F(method="rrf", keyword_weight=2.0, vector_weight=1.0, top_bonus=0.005, name_weight=0)),
        "rrf 1:1": fused(F(method="rrf", keyword_weight=1.0, vector_weight=1.0, top_bonus=0, name_weight=0)),
        "rrf 1.5:1 bonus .005": fused(F(method="rrf", keyword_weight=1.5, vector_weight=1, top_bonus=0.005, name_weight=0)),
        "rrf 3:1 bonus .005": fused(F(method="rrf", keyword_weight=3, vector_weight=1, top_bonus=0.005, name_weight=0)),
        "rrf k=10 1:1": fused(F(method="rrf", k=10, keyword_weight=1, vector_weight=1, name_weight=0)),
        "convex minmax 0.5": convex(0.5, 0, "minmax"),
        "convex z 0.5": convex(0.5, 0, "z"),
    }
    for a in (0.5, 0.6, 0.65, 0.7):
        variants[f"convex tm {a}"] = fused(F(method="convex", keyword_weight=a, vector_weight=1 - a, name_weight=0))
    def mix(a, kw_rrf, bonus, share):
        def ranker(q):
            lsts = {n: q["lists"][n] for n in ("keyword", "vector")}
            c = {e.unit: e.score for e in pms.fuse(lsts, F(method="convex"), {"keyword": a, "vector": 1 - a})}
            r = {e.unit: e.score for e in pms.fuse(lsts, F(method="rrf", top_bonus=bonus), {"keyword": kw_rrf, "vector": 1})}
            cm, rm = max(c.values(), default=1) or 1, max(r.values(), default=1) or 1
            return sorted(c, key=lambda u: -(share * c[u] / cm + (1 - share) * r[u] / rm))
        return ranker
    for a, kw, bonus, share in ((0.5, 2, 0.005, 0.5), (0.5, 1, 0, 0.5), (0.6, 2, 0.005, 0.5), (0.5, 2, 0.005, 0.3)):
        variants[f"mix convex {a} + rrf {kw}:1 b{bonus} share {share}"] = mix(a, kw, bonus, share)
    for qb in (0.25, 0.5):
        variants[f"adaptive rrf 2:1 q{qb}"] = fused(F(method="rrf", keyword_weight=2, vector_weight=1, top_bonus=0.005, name_weight=0),
                                                   weights_of=adaptive(qb, 0, 0))
    for pg in (0.5, 1):
        variants[f"adaptive rrf 2:1 p{pg}"] = fused(F(method="rrf", keyword_weight=2, vector_weight=1, top_bonus=0.005, name_weight=0),
                                                   weights_of=adaptive(0, 0, pg))
    variants["rrf 2:1 b.005 + names 1"] = fused(F(method="rrf", keyword_weight=2.0, vector_weight=1.0, top_bonus=0.005, name_weight=1))
    for share, kw_share in ((0.005, 0.6), (0.01, 0.5), (0.01, 0.6), (0.01, 0.7), (0.02, 0.6)):
        variants[f"rrf 2:1 b.005 + score share {share} ({kw_share}:{1 - kw_share:g})"] = fused(
            F(method="rrf", keyword_weight=2.0, vector_weight=1.0, top_bonus=0.005, name_weight=0, score_share=share, score_keyword_share=kw_share))
    variants["as shipped: + score share .01 (0.6:0.4) + names 1"] = fused(pms.FusionSettings())
    print(f"{'variant':<40}" + "".join(f"{s:>10}" for s in sets) + f"{'mean':>8}{'worst':>8}")
    for label, ranker in variants.items():
        row = [score(data[s], ranker) for s in sets]
        print(f"{label:<40}" + "".join(f"{v:10.3f}" for v in row) + f"{sum(row) / len(row):8.3f}{min(row):8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
