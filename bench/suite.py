#!/usr/bin/env python3
"""The dev suite: every judged set at once, keyword / vector / hybrid, one table.

    PMS_MODEL_DIR=.cache/minilm .venv/bin/python bench/suite.py               # all sets, all modes
    .venv/bin/python bench/suite.py --modes keyword                            # no embeddings needed
    .venv/bin/python bench/suite.py --sets scifact nfcorpus --json

Sets (the data lives in ../shared/data, never in the repository):

* ``scifact``  BEIR SciFact test: 300 claims, 5,183 abstracts, binary judgments.
* ``nfcorpus`` BEIR NFCorpus test: 323 topics/questions, 3,633 documents, graded
  (2 = relevant, full credit; 1 = partially relevant, half credit).
* ``rustbook`` The Rust book: 50 questions of bench/rustbook_queries.json (graded).
* ``rustnames`` The same whole book (with its redirect stubs, old editions and print copy):
  40 chapter names as a reader types them (bench/rustbook_chapters.json; the chapter, not
  its stubs). Shares the rustbook index.
* ``sample``   The shipped sample notes (37): 60 graded queries of bench/sample_notes_queries.json,
  each tagged with its kind (name, howto, concept, syntax, non-english; see
  ``--by-kind`` for nDCG@10 per kind).
* ``tldr``     An Obsidian-like vault of 1,500 English tldr pages (pages/common), each a
  short note named after its command. Known-item queries that nobody here wrote:
  for 300 pages picked at random, the page's own one-line description (``Archiving
  utility``: a concept query) and one of its example captions (``Create a gzipped
  archive``: a how-to query), each judged by the page it comes from. The notes
  leave out their description lines and the caption they are queried by (else
  every query would be a verbatim line of its answer), keeping title and examples.
* ``mlcross``  Cross-lingual: an English-only vault. For 50 commands per language (ru, zh, ja,
  ko, de, es, ar, hi, and en) that have a real page (no alias page) in that language and in
  English, one example caption of the page in that language (``Создать архив``) is the query,
  judged by the English page; the vault is those English pages plus 500 others. English
  captions are hidden from their page.
* ``mlmixed``  A mixed-language vault (``LANG/command.md``): 100 commands per language, each
  page in that language and in English. For 50 of them per language, one example caption,
  hidden from that language's page, judged by the command's page in that language and in
  English. Both ml sets are reported per language (``mlmixed:ru``).
* ``mlsplit``  A personal vault kept in several languages: each command's page in one
  language only (300 English, 100 each Russian, German, Spanish), as a bilingual writer keeps
  notes in whichever language they wrote them in and searches in either. 30 known-item
  queries per group: an example caption in the note's language (``ru>ru``), or the same
  example's caption in English for a note in another language (``en>ru``) and the reverse
  (``ru>en``); the caption and its counterpart are hidden from the note. Reported per group.
* ``dendron``  Dendron's documentation vault (1,012 short, densely linked notes with
  hierarchical dot names: the shape most personal vaults have). Known-item queries that
  nobody here wrote: each note's own ``desc`` (unique in the vault, 3+ words, not its
  title), judged by that note, with ``desc`` and ``excerpt`` removed from its frontmatter.
* ``dendronnames`` The same vault: 200 notes' titles (unique in the vault, the note not
  empty) as the query, judged by the note. Shares the dendron index.

Every default in ranking is chosen on the whole suite: the mean over sets and
the worst set, never one set. Indexes are cached in ``--workdir`` (default
.cache/bench, git-ignored), one file per (set, passage size, model), so only the
first run embeds; a rerun after a ranking change takes seconds plus the queries.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, SHARED_DATA, beir, extract_book, open_index, pms  # noqa: E402
import compare  # noqa: E402

SETS = ("scifact", "nfcorpus", "rustbook", "rustnames", "sample", "tldr", "mlcross", "mlmixed", "mlsplit", "dendron",
        "dendronnames")
ML_LANGUAGES = ("en", "ru", "zh", "ja", "ko", "de", "es", "ar", "hi")
ML_QUERIES_PER_LANGUAGE, ML_MIXED_PER_LANGUAGE, ML_CROSS_DISTRACTORS = 50, 100, 500
# set -> each judgment's group, in order: its language (mlcross, mlmixed), query > note language (mlsplit)
QUERY_GROUPS: dict[str, list[str]] = {}
TABLE_METRICS = ("ndcg@10", "ndcg@5", "mrr", "hit@1", "recall@10")


def rustbook(workdir: Path) -> tuple[Path, list[pms.Judgment]]:
    return extract_book(workdir), pms.load_fixture(REPO / "bench" / "rustbook_queries.json")


def rustnames(workdir: Path) -> tuple[Path, list[pms.Judgment]]:
    return extract_book(workdir), pms.load_fixture(REPO / "bench" / "rustbook_chapters.json")


def sample(workdir: Path) -> tuple[Path, list[pms.Judgment]]:
    return REPO / "sample-notes", pms.load_fixture(REPO / "bench" / "sample_notes_queries.json")


TLDR_NOTES, TLDR_QUERIED = 1500, 300


def _caption(line: str) -> str:
    """``- [c]reate a g[z]ipped archive:`` -> ``Create a gzipped archive`` (tldr's mnemonic brackets dropped)."""
    text = re.sub(r"[\[\]]", "", line.lstrip("- ").rstrip(":").strip())
    return text[:1].upper() + text[1:]


def tldr(workdir: Path) -> tuple[Path, list[pms.Judgment]]:
    archive = SHARED_DATA / "corpora" / "tldr.tar.gz"
    if not archive.exists():
        raise FileNotFoundError(f"{archive} not found (the evaluation data lives in ../shared/data; see its README)")
    folder = workdir / "notes"
    pages: dict[str, str] = {}
    with tarfile.open(archive) as tar:
        for member in tar:
            if member.isfile() and re.fullmatch(r"[^/]+/pages/common/[^/]+\.md", member.name):
                pages[member.name.rsplit("/", 1)[1]] = tar.extractfile(member).read().decode("utf-8")
    rng = random.Random(9)
    names = sorted(rng.sample(sorted(pages), TLDR_NOTES))
    judgments, hidden = [], {}
    for name in rng.sample(names, TLDR_QUERIED):
        lines = pages[name].splitlines()
        description = next((ln[1:].strip() for ln in lines if ln.startswith(">")), "")
        captions = [ln for ln in lines if ln.startswith("- ")]
        if description and not description.lower().startswith("this command is an alias"):
            judgments.append(pms.Judgment(description.rstrip("."), {name: 1.0}))
        if captions:
            hidden[name] = rng.choice(captions)
            judgments.append(pms.Judgment(_caption(hidden[name]), {name: 1.0}))
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:  # the note without its description lines, nor the caption it is queried by
        if not (folder / name).exists():
            kept = [ln for ln in pages[name].splitlines() if not ln.startswith(">") and ln != hidden.get(name)]
            (folder / name).write_text("\n".join(kept) + "\n", encoding="utf-8")
    return folder, judgments


def _tldr_pages_by_language() -> dict[str, dict[str, str]]:
    """language -> ``platform/command`` -> page text, for ML_LANGUAGES."""
    archive = SHARED_DATA / "corpora" / "tldr.tar.gz"
    if not archive.exists():
        raise FileNotFoundError(f"{archive} not found (the evaluation data lives in ../shared/data; see its README)")
    pages: dict[str, dict[str, str]] = {lang: {} for lang in ML_LANGUAGES}
    with tarfile.open(archive) as tar:
        for member in tar:
            m = re.fullmatch(r"[^/]+/pages(?:\.([a-z]{2}))?/([^/]+/[^/]+)\.md", member.name)
            if m and member.isfile() and (m.group(1) or "en") in pages:
                pages[m.group(1) or "en"][m.group(2)] = tar.extractfile(member).read().decode("utf-8")
    # Alias pages (one "view the original command" caption) are no notes to find.
    usable = {c for c, text in pages["en"].items() if "alias of" not in text and len(_captions(text)) >= 2}
    for lang in ML_LANGUAGES:
        pages[lang] = {c: text for c, text in pages[lang].items() if c in usable}
    return pages


def _captions(page: str) -> list[str]:
    return [ln for ln in page.splitlines() if ln.startswith("- ")]


def _ml_queries(pages, commands_of, rng) -> list[tuple[str, str, str]]:
    """(language, command, caption line) for ML_QUERIES_PER_LANGUAGE commands per language,
    taken from ``commands_of[language]``."""
    out = []
    for lang in ML_LANGUAGES:
        for command in rng.sample(commands_of[lang], ML_QUERIES_PER_LANGUAGE):
            out.append((lang, command, rng.choice(_captions(pages[lang][command]))))
    return out


def _translated(pages) -> dict[str, list[str]]:
    """language -> commands with a real page in it and in English (few pages are in all nine:
    the most translated are alias pages)."""
    return {lang: sorted(c for c, text in pages[lang].items() if c in pages["en"] and len(_captions(text)) >= 2)
            for lang in ML_LANGUAGES}


def _write_note(path: Path, text: str) -> None:
    if not path.exists():  # rewritten only when missing, so the cached index stays valid
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _note_file(command: str) -> str:
    return command.replace("/", "-") + ".md"


def mlcross(workdir: Path) -> tuple[Path, list[pms.Judgment]]:
    pages = _tldr_pages_by_language()
    rng = random.Random(20)
    queries = _ml_queries(pages, _translated(pages), rng)
    queried = sorted({command for _, command, _ in queries})
    others = rng.sample(sorted(set(pages["en"]) - set(queried)), ML_CROSS_DISTRACTORS)
    hidden = {(command, line) for lang, command, line in queries if lang == "en"}
    folder = workdir / "notes"
    for command in queried + others:
        kept = [ln for ln in pages["en"][command].splitlines() if (command, ln) not in hidden]
        _write_note(folder / _note_file(command), "\n".join(kept) + "\n")
    QUERY_GROUPS["mlcross"] = [lang for lang, _, _ in queries]
    return folder, [pms.Judgment(_caption(line), {_note_file(command): 1.0}) for _lang, command, line in queries]


def mlmixed(workdir: Path) -> tuple[Path, list[pms.Judgment]]:
    pages = _tldr_pages_by_language()
    rng = random.Random(21)
    chosen = {lang: sorted(rng.sample(commands, ML_MIXED_PER_LANGUAGE))
              for lang, commands in _translated(pages).items() if lang != "en"}
    chosen["en"] = sorted({c for commands in chosen.values() for c in commands})  # every chosen command's English page
    queries = _ml_queries(pages, chosen, rng)
    hidden = {(lang, command, line) for lang, command, line in queries}
    folder = workdir / "notes"
    for lang, commands in chosen.items():
        for command in commands:
            kept = [ln for ln in pages[lang][command].splitlines() if (lang, command, ln) not in hidden]
            _write_note(folder / lang / _note_file(command), "\n".join(kept) + "\n")
    QUERY_GROUPS["mlmixed"] = [lang for lang, _, _ in queries]
    return folder, [pms.Judgment(_caption(line), {f"{lang}/{_note_file(command)}": 1.0, f"en/{_note_file(command)}": 1.0})
                    for lang, command, line in queries]


ML_SPLIT_LANGUAGES = ("ru", "de", "es")
ML_SPLIT_NOTES, ML_SPLIT_ENGLISH_NOTES, ML_SPLIT_QUERIES = 100, 300, 30


def _aligned_captions(pages, lang: str, command: str) -> list[tuple[str, str]] | None:
    """(caption in ``lang``, the same example's English caption), when the two pages hold the
    same examples in the same order (the same count and the same command lines), else None."""
    def examples(page: str) -> list[tuple[str, str]]:
        lines = [ln for ln in page.splitlines() if ln.strip()]
        return [(ln, nxt) for ln, nxt in zip(lines, lines[1:]) if ln.startswith("- ")]

    theirs, english = examples(pages[lang][command]), examples(pages["en"][command])
    if len(theirs) != len(english) or len(theirs) < 3:
        return None
    if any(re.sub(r"\{\{.*?\}\}", "", a) != re.sub(r"\{\{.*?\}\}", "", b) for (_, a), (_, b) in zip(theirs, english)):
        return None  # placeholders are translated ({{путь/к/файлу}}): compare the commands without them
    return [(c, e) for (c, _), (e, _) in zip(theirs, english)]


def mlsplit(workdir: Path) -> tuple[Path, list[pms.Judgment]]:
    pages = _tldr_pages_by_language()
    rng = random.Random(22)
    aligned = {lang: {c: pairs for c in sorted(pages[lang]) if c in pages["en"] and (pairs := _aligned_captions(pages, lang, c))}
               for lang in ML_SPLIT_LANGUAGES}
    taken: set[str] = set()
    note_language: dict[str, str] = {}
    queries: list[tuple[str, str, str, str]] = []  # (group, command, query caption line, the note's line hidden)
    for lang in ML_SPLIT_LANGUAGES:
        mine = rng.sample(sorted(set(aligned[lang]) - taken), ML_SPLIT_NOTES)
        taken.update(mine)
        note_language.update(dict.fromkeys(mine, lang))
        for group, commands in ((f"{lang}>{lang}", mine[:ML_SPLIT_QUERIES]), (f"en>{lang}", mine[ML_SPLIT_QUERIES : 2 * ML_SPLIT_QUERIES])):
            for command in commands:
                theirs, english = rng.choice(aligned[lang][command])
                queries.append((group, command, theirs if group.startswith(lang) else english, theirs))
        english_notes = rng.sample(sorted(set(aligned[lang]) - taken), ML_SPLIT_QUERIES)  # English notes asked in lang
        taken.update(english_notes)
        note_language.update(dict.fromkeys(english_notes, "en"))
        for command in english_notes:
            theirs, english = rng.choice(aligned[lang][command])
            queries.append((f"{lang}>en", command, theirs, english))
    usable_english = sorted(c for c in pages["en"] if c not in taken)
    english_only = rng.sample(usable_english, ML_SPLIT_ENGLISH_NOTES - len(ML_SPLIT_LANGUAGES) * ML_SPLIT_QUERIES)
    note_language.update(dict.fromkeys(english_only, "en"))
    for command in english_only[:ML_SPLIT_QUERIES]:
        caption = rng.choice(_captions(pages["en"][command]))
        queries.append(("en>en", command, caption, caption))
    hidden = {(command, line) for _, command, _, line in queries}
    folder = workdir / "notes"
    for command, lang in note_language.items():
        kept = [ln for ln in pages[lang][command].splitlines() if (command, ln) not in hidden]
        _write_note(folder / _note_file(command), "\n".join(kept) + "\n")
    QUERY_GROUPS["mlsplit"] = [group for group, _, _, _ in queries]
    return folder, [pms.Judgment(_caption(line), {_note_file(command): 1.0}) for _, command, line, _ in queries]


DENDRON = SHARED_DATA / "corpora" / "dendron-vault.tar.gz"
DENDRON_NAMES = 200
_WORD = re.compile(r"\w+")


def _dendron_vault() -> dict[str, tuple[dict, str, str]]:
    """File name -> (frontmatter, its YAML lines, body) of every note of Dendron's vault."""
    if not DENDRON.exists():
        raise FileNotFoundError(f"{DENDRON} not found (the evaluation data lives in ../shared/data; see its README)")
    notes = {}
    with tarfile.open(DENDRON) as tar:
        for member in tar:
            if member.isfile() and member.name.endswith(".md") and member.name.count("/") == 1:
                text = tar.extractfile(member).read().decode("utf-8")
                block, body, _ = pms.split_frontmatter(text)
                notes[member.name.split("/", 1)[1]] = (pms.parse_frontmatter(block) if block else {}, block or "", body)
    return notes


def _without_fields(block: str, fields: tuple[str, ...]) -> str:
    """A YAML frontmatter block without the top-level ``fields`` (their folded continuation lines too)."""
    kept, dropping = [], False
    for line in block.splitlines():
        if not line.startswith((" ", "\t")):
            dropping = line.split(":", 1)[0].strip() in fields
        if not dropping:
            kept.append(line)
    return "\n".join(kept)


def _dendron_notes(workdir: Path, queried: set[str], notes) -> Path:
    """The vault under ``workdir``, ``desc`` and ``excerpt`` removed from the queried notes' frontmatter."""
    folder = workdir / "notes"
    for name, (_meta, block, body) in notes.items():
        block = _without_fields(block, ("desc", "excerpt")) if name in queried else block
        _write_note(folder / name, (f"---\n{block.rstrip()}\n---\n" if block.strip() else "") + body)
    return folder


def _desc_queries(notes) -> dict[str, str]:
    """File name -> its ``desc``, for the notes whose desc is unique in the vault, holds 3 words
    or more and is not the note's title."""
    descs = {name: " ".join(str(meta.get("desc") or "").split()) for name, (meta, _, _) in notes.items()}
    count: dict[str, int] = {}
    for text in descs.values():
        count[text] = count.get(text, 0) + 1
    return {name: text for name, text in sorted(descs.items())
            if text and count[text] == 1 and len(_WORD.findall(text)) >= 3
            and _WORD.findall(text.lower()) != _WORD.findall(str(notes[name][0].get("title") or "").lower())}


def dendron(workdir: Path) -> tuple[Path, list[pms.Judgment]]:
    notes = _dendron_vault()
    queries = _desc_queries(notes)
    return _dendron_notes(workdir, set(queries), notes), [pms.Judgment(text, {name: 1.0}) for name, text in queries.items()]


def dendronnames(workdir: Path) -> tuple[Path, list[pms.Judgment]]:
    notes = _dendron_vault()
    titles = {name: str(meta.get("title") or "").strip() for name, (meta, _, _) in notes.items()}
    count: dict[str, int] = {}
    for title in titles.values():
        count[title.lower()] = count.get(title.lower(), 0) + 1
    named = sorted(name for name, title in titles.items()
                   if count[title.lower()] == 1 and re.search(r"[^\W\d_]", title) and len(_WORD.findall(notes[name][2])) >= 3)
    chosen = sorted(random.Random(23).sample(named, DENDRON_NAMES))
    folder = _dendron_notes(workdir, set(_desc_queries(notes)), notes)  # the dendron set's notes: one index for both
    return folder, [pms.Judgment(titles[name], {name: 1.0}) for name in chosen]


def by_group(name: str, result: dict) -> dict[str, dict[str, dict]]:
    """group -> mode -> metric means, from the per-query rows of a set with QUERY_GROUPS."""
    groups = QUERY_GROUPS.get(name)
    if not groups:
        return {}
    out: dict[str, dict[str, dict]] = {}
    for mode, m in result["modes"].items():
        if not m.get("available"):
            continue
        for group in dict.fromkeys(groups):
            rows = [q for q, g in zip(m["per_query"], groups) if g == group]
            out.setdefault(group, {})[mode] = {x: sum(q[x] for q in rows) / len(rows) for x in TABLE_METRICS} | {"queries": len(rows)}
    return out


PREPARE = {"scifact": lambda w: beir("scifact", w), "nfcorpus": lambda w: beir("nfcorpus", w),
           "rustbook": rustbook, "rustnames": rustnames, "sample": sample, "tldr": tldr, "mlcross": mlcross, "mlmixed": mlmixed,
           "mlsplit": mlsplit, "dendron": dendron, "dendronnames": dendronnames}

INDEX_OF = {"rustnames": "rustbook", "dendronnames": "dendron"}  # sets that search another set's notes share its index


def load_set(name: str, workdir: Path, passage_chars: int, embed: bool, embedding: dict | None = None,
             ranking: dict | None = None) -> tuple[pms.KnowledgeBase, list[pms.Judgment]]:
    index = INDEX_OF.get(name, name)
    folder, judgments = PREPARE[name](workdir / index)
    kb = open_index(workdir / index, folder, index, passage_chars, embed, embedding, ranking)
    return kb, judgments


def summarize(results: dict[str, dict], modes) -> dict:
    """Mean over sets per mode and metric, the worst set, and hybrid's margin over its better half."""
    out: dict = {"mean": {}, "worst": {}}
    ok = {s: r for s, r in results.items() if all(r["modes"].get(m, {}).get("available") for m in modes)}
    for mode in modes:
        rows = [r["modes"][mode] for r in ok.values()]
        if rows:
            out["mean"][mode] = {m: sum(x[m] for x in rows) / len(rows) for m in TABLE_METRICS}
            worst = min(ok, key=lambda s: ok[s]["modes"][mode]["ndcg@10"])
            out["worst"][mode] = {"set": worst, "ndcg@10": ok[worst]["modes"][mode]["ndcg@10"]}
    if {"keyword", "vector", "hybrid"} <= set(modes) and ok:
        margins = {s: r["modes"]["hybrid"]["ndcg@10"] - max(r["modes"]["keyword"]["ndcg@10"], r["modes"]["vector"]["ndcg@10"])
                   for s, r in ok.items()}
        out["hybrid_margin"] = margins
        out["worst_margin"] = {"set": min(margins, key=lambda s: margins[s]), "margin": min(margins.values())}
    return out


def format_suite(results: dict[str, dict], summary: dict) -> str:
    head = f"{'set':<14} {'mode':<8} {'queries':>7} " + " ".join(f"{m:>9}" for m in TABLE_METRICS) + f" {'p50 ms':>7} {'p95 ms':>7}"
    lines = [head]
    for name, r in results.items():
        for mode, m in r["modes"].items():
            if not m.get("available"):
                lines.append(f"{name:<14} {mode:<8} unavailable: {m['reason']}")
                continue
            lines.append(f"{name:<14} {mode:<8} {r['queries']:>7} " + " ".join(f"{m[x]:9.3f}" for x in TABLE_METRICS)
                         + f" {m['latency_ms_median']:7.1f} {m['latency_ms_p95']:7.1f}")
        for group, modes in r.get("groups", {}).items():
            for mode, m in modes.items():
                lines.append(f"{name + ':' + group:<14} {mode:<8} {m['queries']:>7} " + " ".join(f"{m[x]:9.3f}" for x in TABLE_METRICS))
    for mode, m in summary["mean"].items():
        worst = summary["worst"][mode]
        lines.append(f"{'MEAN':<14} {mode:<8} {'':>7} " + " ".join(f"{m[x]:9.3f}" for x in TABLE_METRICS)
                     + f"   worst set: {worst['set']} {worst['ndcg@10']:.3f}")
    if "hybrid_margin" in summary:
        lines.append("hybrid nDCG@10 minus the better of keyword and vector: "
                     + ", ".join(f"{s} {v:+.3f}" for s, v in summary["hybrid_margin"].items()))
    return "\n".join(lines)


def format_by_kind(result: dict, fixture: Path) -> str:
    """nDCG@10 per kind of query (the ``kind`` field of the fixture's queries, e.g. the
    sample set's name, howto, concept, syntax, non-english), one row per mode."""
    queries = json.loads(fixture.read_text(encoding="utf-8"))["queries"]
    kind_of = {q["query"]: q.get("kind", "other") for q in queries}
    kinds = list(dict.fromkeys(kind_of.values()))
    lines = [f"{'nDCG@10':<9}" + "".join(f"{k:>12}" for k in kinds)]
    for mode, m in result["modes"].items():
        if m.get("available"):
            scores: dict[str, list[float]] = {k: [] for k in kinds}
            for q in m["per_query"]:
                scores[kind_of[q["query"]]].append(q["ndcg@10"])
            lines.append(f"{mode:<9}" + "".join(f"{sum(v) / len(v) if v else float('nan'):12.3f}" for v in scores.values()))
    lines.append(f"{'queries':<9}" + "".join(f"{list(kind_of.values()).count(k):12d}" for k in kinds))
    return "\n".join(lines)


KIND_FIXTURES = {"sample": REPO / "bench" / "sample_notes_queries.json"}


def settings_overrides(pairs: list[str]) -> dict:
    """``NAME=VALUE`` pairs -> RankingSettings fields, each value read as its default's type."""
    defaults = pms.RankingSettings()
    out: dict = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if not hasattr(defaults, name) or not value:
            raise SystemExit(f"--setting {pair!r}: want NAME=VALUE with NAME a field of RankingSettings")
        kind = type(getattr(defaults, name))
        out[name] = value.lower() in ("1", "true", "yes", "on") if kind is bool else kind(value)
    return out


def run_suite(args, embedding: dict | None) -> dict:
    """Every set of ``args.sets`` in each of ``args.modes``: {"sets", "summary"}."""
    embed = args.modes != ["keyword"]
    overrides = settings_overrides(args.setting)
    results: dict[str, dict] = {}
    for name in args.sets:
        try:
            kb, judgments = load_set(name, args.workdir, args.passage_chars, embed, embedding, overrides)
        except FileNotFoundError as exc:
            print(f"{name}: skipped: {exc}", file=sys.stderr)
            continue
        t0 = time.monotonic()
        with kb:
            results[name] = pms.run_benchmark(kb, judgments, modes=args.modes, collections=[INDEX_OF.get(name, name)])
            results[name]["groups"] = by_group(name, results[name])
        results[name]["seconds"] = round(time.monotonic() - t0, 1)
    return {"sets": results, "summary": summarize(results, args.modes)}


def _side(argv: list[str], engine: Path | None) -> dict:
    """This suite run in a fresh process over ``engine``'s pms.py (None: this checkout's), as JSON."""
    env = dict(os.environ)
    env.pop("PMS_BENCH_ENGINE", None)
    if engine is not None:
        env["PMS_BENCH_ENGINE"] = str(engine)
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv, "--json"], stdout=subprocess.PIPE, env=env,
                          text=True)
    if done.returncode:
        raise SystemExit(f"the suite over {engine or 'this checkout'} failed (exit {done.returncode})")
    return json.loads(done.stdout)


def _rows(run: dict) -> dict[tuple[str, str], dict[str, float]]:
    """(set or set:group, mode) -> metrics, from a run's JSON."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for name, r in run["sets"].items():
        for mode, m in r["modes"].items():
            if m.get("available"):
                out[(name, mode)] = m
        for group, modes in r.get("groups", {}).items():
            for mode, m in modes.items():
                out[(f"{name}:{group}", mode)] = m
    return out


def format_compare(before: dict, after: dict, rev: str, metric: str = "ndcg@10", here: str = "this checkout") -> str:
    """Per set (and group) and mode: ``metric`` at REV, here and the difference; then each
    mode's mean and worst set, and the sets that lost more than 0.005."""
    old, new = _rows(before), _rows(after)
    modes = list(dict.fromkeys(mode for _, mode in new))
    names = list(dict.fromkeys(name for name, _ in new))
    lines = [f"{metric}: {rev} -> {here}", f"{'set':<14} " + " ".join(f"{m:>23}" for m in modes)]
    for name in names:
        cells = []
        for mode in modes:
            a, b = old.get((name, mode), {}).get(metric), new.get((name, mode), {}).get(metric)
            cells.append(f"{a:.3f} -> {b:.3f} {b - a:+.3f}" if a is not None and b is not None else f"{'-':>23}")
        lines.append(f"{name:<14} " + " ".join(f"{c:>23}" for c in cells))
    for label, key in (("MEAN", "mean"), ("worst set", "worst")):
        cells = []
        for mode in modes:
            a, b = before["summary"][key].get(mode), after["summary"][key].get(mode)
            if a and b:
                va, vb = (a[metric], b[metric]) if key == "mean" else (a["ndcg@10"], b["ndcg@10"])
                cells.append(f"{va:.3f} -> {vb:.3f} {vb - va:+.3f}")
            else:
                cells.append("-")
        lines.append(f"{label:<14} " + " ".join(f"{c:>23}" for c in cells))
    losses = [f"{name} {mode} {new[(name, mode)][metric] - old[(name, mode)][metric]:+.3f}" for name in names for mode in modes
              if ":" not in name and (name, mode) in old and (name, mode) in new
              and new[(name, mode)][metric] - old[(name, mode)][metric] < -0.005]
    lines.append("sets down by more than 0.005: " + (", ".join(losses) if losses else "none"))
    return "\n".join(lines)


def _common(before: dict, after: dict) -> tuple[dict, dict]:
    """Two saved runs cut to the sets and modes both measured, each summary taken anew over
    those (a --compare --json run counts as its after side)."""
    before, after = before.get("after", before), after.get("after", after)
    sets = [name for name in after["sets"] if name in before["sets"]]
    modes = [mode for mode in after["sets"][sets[0]]["modes"] if mode in before["sets"][sets[0]]["modes"]] if sets else []

    def cut(run: dict) -> dict:
        results = {name: {**run["sets"][name], "modes": {m: run["sets"][name]["modes"][m] for m in modes}} for name in sets}
        return {"sets": results, "summary": summarize(results, modes)}
    return cut(before), cut(after)


def sign_flip_p(differences: list[float], flips: int = 5_000, seed: int = 0) -> float:
    """Two-sided p of a paired sign-flip (randomization) test: the share of random sign
    assignments to the queries' differences whose sum is at least as far from 0 as the
    measured one. 1.0 when no query moved."""
    moved = [d for d in differences if abs(d) > 1e-12]
    if not moved:
        return 1.0
    observed = abs(sum(moved)) - 1e-12
    rng = random.Random(seed)
    return sum(abs(sum(d if rng.random() < 0.5 else -d for d in moved)) >= observed for _ in range(flips)) / flips


def format_moved(before: dict, after: dict, metric: str = "ndcg@10") -> str:
    """Per set and mode: how many queries ``metric`` moved up and down between the runs, and
    the sign-flip p of their mean difference (small: more than the noise of a few queries)."""
    modes = list(dict.fromkeys(mode for r in after["sets"].values() for mode, m in r["modes"].items() if m.get("per_query")))
    lines = [f"queries up / down in {metric}, and the paired sign-flip p of the difference (p < 0.05: not noise)",
             f"{'set':<14} " + " ".join(f"{m:>23}" for m in modes)]
    for name, run in after["sets"].items():
        cells = []
        for mode in modes:
            old = before["sets"].get(name, {}).get("modes", {}).get(mode, {}).get("per_query")
            new = run["modes"].get(mode, {}).get("per_query")
            if not old or not new or [q["query"] for q in old] != [q["query"] for q in new]:
                cells.append(f"{'-':>23}")
                continue
            diffs = [b[metric] - a[metric] for a, b in zip(old, new)]
            up, down = sum(d > 1e-12 for d in diffs), sum(d < -1e-12 for d in diffs)
            cells.append(f"{up:>4} / {down:<4} p {sign_flip_p(diffs):.2f}")
        lines.append(f"{name:<14} " + " ".join(f"{c:>23}" for c in cells))
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS)
    ap.add_argument("--modes", nargs="+", default=list(pms.BENCH_MODES), choices=pms.BENCH_MODES)
    ap.add_argument("--workdir", type=Path, default=REPO / ".cache" / "bench", help="corpus notes and cached indexes (git-ignored)")
    ap.add_argument("--passage-chars", "--chunk-chars", type=int, default=pms.DEFAULT_PASSAGE_CHARS)
    ap.add_argument("--json", action="store_true", help="full results, per query")
    ap.add_argument("--by-kind", action="store_true", help="also nDCG@10 per kind of query (the sample set's kinds)")
    ap.add_argument("--embed-url", help="embed with this server (OpenAI-compatible or Ollama) instead of PMS_MODEL*")
    ap.add_argument("--embed-model", help="the server's model name (with --embed-url)")
    ap.add_argument("--embed-api", choices=("openai", "ollama"))
    ap.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                    help="a RankingSettings field for this run (repeatable): --setting focus_weight=0 measures ranking without it")
    ap.add_argument("--compare", metavar="REV", help="run the suite over REV's engine too (a git worktree, on the same cached "
                    "indexes) and print each set's difference")
    ap.add_argument("--worktrees", type=Path, default=REPO / ".cache" / "compare", help="where --compare checks REV out")
    ap.add_argument("--diff", nargs=2, type=Path, metavar=("BEFORE", "AFTER"),
                    help="compare two saved --json runs (e.g. an old checkout's, on indexes of its own) and exit")
    args = ap.parse_args(argv)
    if args.diff:
        before, after = _common(*(json.loads(path.read_text(encoding="utf-8")) for path in args.diff))
        print(format_compare(before, after, str(args.diff[0]), here=str(args.diff[1])))
        print(format_compare(before, after, str(args.diff[0]), "ndcg@5", here=str(args.diff[1])))
        print(format_moved(before, after))
        return 0
    embedding = {"url": args.embed_url, "model": args.embed_model or "", "kind": args.embed_api} if args.embed_url else None
    if args.embed_url:  # a query's vector on a busy machine: never keyword results in place of the figures asked for
        os.environ.setdefault("PMS_EMBED_QUERY_TIMEOUT", "120")
    embed = args.modes != ["keyword"]
    model = (embedding["model"] if embedding else pms.model_settings()[0]) if embed else None

    if args.compare:
        passed = ["--sets", *args.sets, "--modes", *args.modes, "--workdir", str(args.workdir), "--chunk-chars", str(args.passage_chars)]  # the name every revision takes
        passed += [x for pair in args.setting for x in ("--setting", pair)]
        passed += [x for flag, value in (("--embed-url", args.embed_url), ("--embed-model", args.embed_model),
                                         ("--embed-api", args.embed_api)) if value for x in (flag, value)]
        engine = compare.checkout(args.compare, args.worktrees)  # the speed bench's worktrees, one per commit
        before = _side(passed, engine)
        after = _side(passed, None)
        if args.json:
            print(json.dumps({"rev": args.compare, "before": before, "after": after}, indent=2, ensure_ascii=False))
        else:
            print(f"model {model or '(keyword only)'}, passages of {args.passage_chars} chars; {args.compare} is {engine}")
            print(format_compare(before, after, args.compare))
            print(format_compare(before, after, args.compare, "ndcg@5"))
            print(format_moved(before, after))
        return 0

    run = run_suite(args, embedding)
    if args.json:
        print(json.dumps(run | {"model": model, "chunk_chars": args.passage_chars, "settings": settings_overrides(args.setting)},
                         indent=2, ensure_ascii=False))
    else:
        print(f"model {model or '(keyword only)'}, passages of {args.passage_chars} chars"
              + "".join(f"; {pair}" for pair in args.setting))
        print(format_suite(run["sets"], run["summary"]))
        for name in (n for n in run["sets"] if args.by_kind and n in KIND_FIXTURES):
            print(f"\n{name}, by kind of query:\n" + format_by_kind(run["sets"][name], KIND_FIXTURES[name]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
