"""Search quality on judged queries (``pms bench``): nDCG, MRR, Hit@k, latency.

May import: config, filters, embedding, api.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from .config import ADD_COLLECTION_ARGS, Hint, PMSError, Record, pms_command
from .filters import checked_number
from .embedding import EmbeddingUnavailable
from .api import KnowledgeBase


class Judgment(Record):
    """One judged query: the notes that answer it, with their credit (1.0 full, 0.5 partial)."""

    query: str
    relevant: dict[str, float]
    expected_in_top_k: int | None = None


def load_fixture(path: str | os.PathLike) -> list[Judgment]:
    """Read qmd's fixture format (``{"queries": [{"query": ..., "expected_files": [...],
    "expected_in_top_k": 3}]}``) or its graded form: ``relevant_paths``, ``partial_paths`` (half credit)."""
    import json
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise PMSError(f"cannot read fixture {path}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise PMSError(f"fixture {path} is not valid JSON ({exc})") from None
    except RecursionError:
        raise PMSError(f"fixture {path} is not a fixture: its JSON is nested too deep") from None
    items = data.get("queries") if isinstance(data, dict) else data
    if not isinstance(items, list) or not items:
        raise PMSError(f'fixture {path} has no queries (expected {{"queries": [{{"query": ..., "expected_files": [...]}}]}})')
    judgments = []
    for i, item in enumerate(items, 1):
        if not isinstance(item, dict) or not isinstance(item.get("query"), str) or not item["query"].strip():
            raise PMSError(f'fixture {path}: query #{i} has no "query" text')
        relevant: dict[str, float] = {}
        for key, gain in (("partial_paths", 0.5), ("expected_files", 1.0), ("relevant_paths", 1.0)):
            value = item.get(key) or []
            if not isinstance(value, (str, list)):
                raise PMSError(f"fixture {path}: query #{i}: {key} must be a path or a list of paths")
            for target in [value] if isinstance(value, str) else value:
                relevant[str(target)] = gain  # listed as both: full credit wins
        if not relevant:
            raise PMSError(f"fixture {path}: query #{i} ({item['query']!r}) lists no expected_files or relevant_paths")
        top = item.get("expected_in_top_k")
        top = checked_number(top, f"fixture {path}: query #{i}: expected_in_top_k") if top is not None else None
        judgments.append(Judgment(item["query"], relevant, top))
    return judgments


def ndcg(gains: Sequence[float], judged: Sequence[float], k: int) -> float:
    """nDCG@k with linear gains: ``gains`` of the ranked hits, ``judged`` of every relevant note."""
    import math

    def dcg(values):
        return sum(g / math.log2(i + 2) for i, g in enumerate(values[:k]))

    best = dcg(sorted(judged, reverse=True))
    return dcg(list(gains)) / best if best else 0.0


def query_metrics(gains: Sequence[float], judged: Sequence[float]) -> dict[str, float]:
    """Metrics of one ranked list. ``gains[i]`` is the credit of the hit at rank i+1
    (0 when not relevant); partial credit counts half in every metric."""
    gains = list(gains)
    return {
        "hit@1": max(gains[:1], default=0.0),
        "hit@3": max(gains[:3], default=0.0),
        "hit@5": max(gains[:5], default=0.0),
        "mrr": max((g / rank for rank, g in enumerate(gains, 1)), default=0.0),
        "ndcg@5": ndcg(gains, judged, 5),
        "ndcg@10": ndcg(gains, judged, 10),
        "recall@10": sum(gains[:10]) / sum(judged) if sum(judged) else 0.0,
    }


def resolve_targets(targets: Iterable[str], notes: Sequence[tuple[str, str]]) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """Map fixture paths to indexed notes ``(collection, path)``: (found, missing). A target
    matches ``collection/path`` or the collection-relative path, else a path suffix, else the
    file name or its stem; a non-exact one must match one note only (else a PMSError)."""
    exact: dict[str, list] = {}
    by_name: dict[str, list] = {}
    for col, path in notes:
        for key in (f"{col}/{path}", path):
            exact.setdefault(key, []).append((col, path))
        name = path.rsplit("/", 1)[-1]
        by_name.setdefault(name, []).append((col, path))
        stem = name.rsplit(".", 1)[0]
        if stem != name:
            by_name.setdefault(stem, []).append((col, path))
    found, missing = {}, []
    for target in targets:
        key = target.strip().replace("\\", "/").removeprefix("./")
        if "/" in key:
            candidates = exact.get(key) or [n for n in notes if n[1].endswith("/" + key)]
        else:
            candidates = exact.get(key) or by_name.get(key, [])
        unique = sorted(set(candidates))
        if len(unique) > 1:
            shown = ", ".join(f"{c}/{p}" for c, p in unique[:4])
            raise PMSError(f"fixture path {target!r} matches {len(unique)} notes ({shown}); write its collection-relative path")
        if unique:
            found[target] = unique[0]
        else:
            missing.append(target)
    return found, missing


def _percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1)."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    rank = int(-(-len(ordered) * q // 1))  # ceil
    return ordered[min(len(ordered), max(rank, 1)) - 1]


BENCH_MODES = ("keyword", "vector", "hybrid")
BENCH_METRICS = ("hit@1", "hit@3", "hit@5", "mrr", "ndcg@5", "ndcg@10", "recall@10")


def run_benchmark(kb: KnowledgeBase, judgments: Sequence[Judgment], modes: Sequence[str] = BENCH_MODES,
                  collections: Sequence[str] | None = None, k: int = 10) -> dict:
    """Search every judged query in each mode and average the metrics. Refuses (PMSError)
    rather than report zeros when expected notes are not indexed; a mode that cannot run
    is reported as unavailable."""
    names = list(collections or [c.name for c in kb.collections.list()])
    if not names:
        raise PMSError(f"no collections to measure (add one: {pms_command(ADD_COLLECTION_ARGS)})")
    notes = [(c.name, p) for c in (kb.collections.get(n) for n in names) for p in c.files]
    if not notes:
        raise PMSError(f"collection {', '.join(names)} has no indexed notes, so every score would be 0", Hint(command="sync"))
    found, missing = resolve_targets({t for j in judgments for t in j.relevant}, notes)
    if missing:
        shown = ", ".join(sorted(missing)[:8]) + (", ..." if len(missing) > 8 else "")
        raise PMSError(f"{len(missing)} expected file(s) are not indexed in {', '.join(names)}: {shown} "
                       f"(fix the fixture paths, pass -c with the right collection, or run: {pms_command('sync')})")
    wanted = []
    for j in judgments:
        gains: dict[tuple[str, str], float] = {}
        for target, gain in j.relevant.items():
            gains[found[target]] = max(gain, gains.get(found[target], 0.0))
        wanted.append(gains)
    result: dict = {"queries": len(judgments), "notes": len(notes), "collections": names, "modes": {}}
    for mode in modes:
        try:
            kb.search_mode(mode)
            if mode != "keyword":
                kb.search(judgments[0].query, k=1, mode=mode, collections=names)  # model load is not query latency
        except EmbeddingUnavailable as exc:
            result["modes"][mode] = {"available": False, "reason": str(exc)}
            continue
        per_query: list[dict] = []
        latencies, passed = [], 0
        for j, gains in zip(judgments, wanted):
            t0 = time.perf_counter()
            hits = kb.search(j.query, k=max(k, j.expected_in_top_k or 0), mode=mode, collections=names)
            latencies.append((time.perf_counter() - t0) * 1000)
            ranked = [gains.get((h.collection, h.path), 0.0) for h in hits]
            first = next((rank for rank, g in enumerate(ranked, 1) if g), None)
            per_query.append({"query": j.query, "first_relevant_rank": first, **query_metrics(ranked, list(gains.values()))})
            if j.expected_in_top_k and first and first <= j.expected_in_top_k:
                passed += 1
        summary: dict = {m: sum(q[m] for q in per_query) / len(per_query) for m in BENCH_METRICS}
        summary.update(available=True, latency_ms_median=_percentile(latencies, 0.5),
                       latency_ms_p95=_percentile(latencies, 0.95), per_query=per_query)
        if any(j.expected_in_top_k for j in judgments):
            summary["expected_in_top_k_passed"] = passed
            summary["expected_in_top_k_total"] = sum(1 for j in judgments if j.expected_in_top_k)
        result["modes"][mode] = summary
    return result


def format_benchmark(result: dict) -> str:
    """The table ``pms bench`` prints: one row per mode."""
    head = ["mode", "Hit@1", "Hit@3", "Hit@5", "MRR", "nDCG@5", "nDCG@10", "R@10", "p50 ms", "p95 ms"]
    has_pass = any("expected_in_top_k_total" in m for m in result["modes"].values())
    lines = [" ".join(f"{h:>8}" for h in head) + ("  in top k" if has_pass else "")]
    for mode, m in result["modes"].items():
        if not m["available"]:
            lines.append(f"{mode:>8} unavailable: {m['reason']}")
            continue
        cells = [f"{m[x]:8.3f}" for x in BENCH_METRICS] + [f"{m['latency_ms_median']:8.1f}", f"{m['latency_ms_p95']:8.1f}"]
        tail = f"  {m['expected_in_top_k_passed']}/{m['expected_in_top_k_total']}" if has_pass else ""
        lines.append(f"{mode:>8} " + " ".join(cells) + tail)
    return "\n".join(lines)
