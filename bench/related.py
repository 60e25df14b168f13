#!/usr/bin/env python3
"""Related notes: precision@5 of ``KnowledgeBase.related`` on the sample notes,
against bench/related_notes.json (10 notes, related notes judged by a person).

    PMS_MODEL_DIR=.cache/minilm .venv/bin/python bench/related.py            # by vectors (hybrid index)
    .venv/bin/python bench/related.py --keyword                                # by shared rare terms

precision@5 of a note: the share of its first five related notes (of all its
judged ones, when fewer than five are judged) that are judged related.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, open_index, pms  # noqa: E402

JUDGMENTS = Path(__file__).resolve().parent / "related_notes.json"


def precision_at_5(kb: pms.KnowledgeBase, judged: list[dict]) -> dict:
    rows = []
    for item in judged:
        found = [h.path for h in kb.related(f"sample/{item['note']}", k=5)]
        wanted = set(item["related"])
        hits = sum(1 for path in found[:5] if path in wanted)
        rows.append({"note": item["note"], "precision@5": hits / min(5, len(wanted)), "found": found})
    return {"precision@5": sum(r["precision@5"] for r in rows) / len(rows), "notes": rows}


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keyword", action="store_true", help="no embeddings: related by shared rare terms")
    ap.add_argument("--workdir", type=Path, default=REPO / ".cache" / "bench" / "sample", help="cached index (git-ignored)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    kb = open_index(args.workdir, REPO / "sample-notes", "sample", pms.DEFAULT_PASSAGE_CHARS, embed=not args.keyword)
    with kb:
        result = precision_at_5(kb, json.loads(JUDGMENTS.read_text())["notes"])
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for row in result["notes"]:
            print(f"{row['precision@5']:.2f}  {row['note']}: {', '.join(row['found'])}")
        print(f"precision@5 {result['precision@5']:.3f} ({'keyword' if args.keyword else 'vectors'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
