"""Property tests (Hypothesis): any query, note, frontmatter or file name in, no
exception out, and results that are well formed. Under 60 s in all.

The strategies mix generic Unicode (lone surrogates and control characters
included) with the pieces that broke PMS before: FTS5 syntax, CJK, combining
marks, undecodable bytes, YAML anchors and aliases.
"""
from __future__ import annotations

import math
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="the fuzz suite needs hypothesis (pip install -r requirements-dev.txt)")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

import pms  # noqa: E402

SETTINGS: dict = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

TRICKY = ['"', "*", "-", "-\"", "(", ")", ":", "^", "NEAR", "AND", "OR", "NOT", "title:", "C++", "中文", "検索", "한국어",
          "e\u0301", "\u0301", "\x00", "\x07", "\x1b[31m", "\udcff", "\ud800", "\ufeff", "\u200b", "🚀", "\\", "%", "_",
          "'", "';DROP TABLE chunks;--", "NEAR(a b, 2)", "{a b}", "a*b", "\n", "\t", "x" * 300]
pieces = st.one_of(st.sampled_from(TRICKY), st.text(st.characters(exclude_categories=()), max_size=12),
                   st.sampled_from(["backup", "rust", "sync", "notes", "restic", "borrow"]))
queries = st.lists(pieces, max_size=8).map(" ".join)


def fresh_kb(embeddings: bool = False, **kwargs) -> tuple[pms.KnowledgeBase, Path]:
    folder = Path(tempfile.mkdtemp(prefix="pms-fuzz-"))
    return pms.KnowledgeBase(folder / "index.sqlite", embeddings=embeddings, **kwargs), folder


def check_hits(hits, k: int) -> None:
    assert isinstance(hits, (list, pms.SearchResult)) and len(hits) <= k
    seen = set()
    for hit in hits:
        assert isinstance(hit, pms.Hit)
        assert math.isfinite(hit.score) and hit.start_line <= hit.end_line
        assert isinstance(hit.snippet, str) and isinstance(hit.title, str)
        assert (hit.collection, hit.path) not in seen
        seen.add((hit.collection, hit.path))


@pytest.fixture(scope="module")
def keyword_kb():
    kb, folder = fresh_kb()
    notes = folder / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Backups\n\nrestic backup of notes\n\n## Sync\n\nsync with syncthing\n")
    (notes / "b.md").write_text("# Rust\n\nborrow checker, C++ and NEAR(a b) \"quotes\"\n")
    (notes / "c.md").write_text("# 中文笔记\n\n检索中文内容。日本語の検索も。e\u0301 combining\n")
    kb.collections.create(notes, name="notes")
    kb.sync()
    yield kb
    kb.close()
    shutil.rmtree(folder, ignore_errors=True)


@settings(max_examples=600, **SETTINGS)
@given(query=queries, k=st.integers(1, 20), passages=st.booleans(), prefix_last=st.booleans())
def test_any_keyword_query(keyword_kb, query, k, passages, prefix_last):
    check_hits(keyword_kb.search(query, k=k, mode="keyword", passages=passages, prefix_last=prefix_last), k)


@settings(max_examples=600, **SETTINGS)
@given(query=queries)
def test_any_query_parses_into_safe_fts(keyword_kb, query):
    parsed = pms.parse_query(query)
    assert len(parsed.terms) <= 32 and len(parsed.excluded) <= 16
    for match in (parsed.match_any(), parsed.match_all()):
        if match:  # FTS5 accepts it: a syntax error would raise here
            # internal contract: the parser's expression straight to the Store's FTS5 query (a search adds fallbacks around it)
            keyword_kb.store.fts_search(match, 5, None, pms.RankingSettings().field_weights)


@pytest.fixture(scope="module")
def hybrid(embedding_model_dir):
    old = os.environ.get("PMS_MODEL_DIR")
    os.environ["PMS_MODEL_DIR"] = str(embedding_model_dir)
    kb, folder = fresh_kb(embeddings=True)
    notes = folder / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Backups\n\nrestic backup of notes every night\n")
    (notes / "b.md").write_text("# 中文\n\n检索中文内容\n")
    kb.collections.create(notes, name="notes")
    assert kb.sync().embedded
    yield kb
    kb.close()
    shutil.rmtree(folder, ignore_errors=True)
    if old is None:
        os.environ.pop("PMS_MODEL_DIR", None)
    else:
        os.environ["PMS_MODEL_DIR"] = old


@settings(max_examples=80, **SETTINGS)
@given(query=queries, mode=st.sampled_from(["hybrid", "vector", "auto"]))
def test_any_query_in_the_modes_that_embed_it(hybrid, query, mode):
    check_hits(hybrid.search(query, k=5, mode=mode), 5)


# -- notes and frontmatter -------------------------------------------------------------------------
yaml_scalars = st.one_of(st.text(max_size=20), st.integers(), st.booleans(), st.sampled_from(["~", "null", "[a, b]", "&x 1", "*x",
                                                                                               "!!python/object:os.system", "{a: 1}"]))
frontmatter_lines = st.lists(st.tuples(st.sampled_from(["title", "tags", "aliases", "tag", "alias", "date", "x", "- item", "&a", "*a"]),
                                       yaml_scalars).map(lambda kv: f"{kv[0]}: {kv[1]}"), max_size=8).map("\n".join)
markdown_lines = st.one_of(st.sampled_from(["# H1", "## H2", "###### H6", "```", "```python", "~~~", "---", "...", "- item", "> quote",
                                            "| a | b |", "", "    indented", "<!-- x -->", "[[link]]", "#tag"]),
                           st.text(st.characters(exclude_categories=()), max_size=60))
note_texts = st.tuples(st.booleans(), frontmatter_lines, st.lists(markdown_lines, max_size=30).map("\n".join)).map(
    lambda t: (f"---\n{t[1]}\n---\n" if t[0] else "") + t[2])


def osa_by_table(a: str, b: str) -> int:
    """The optimal string alignment distance, the textbook table cell by cell: the oracle."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[-1][-1]


words = st.text(alphabet="abcdé", max_size=12)  # few letters: many words near each other


@settings(max_examples=1000, **SETTINGS)
@given(a=words, b=words, limit=st.integers(0, 4))
def test_edit_distance_is_the_optimal_string_alignment_distance_up_to_its_limit(a, b, limit):
    expected = osa_by_table(a, b)
    assert pms.ranking.edit_distance(a, b, limit) == (expected if expected <= limit else limit + 1)


@settings(max_examples=300, **SETTINGS)
@given(word=words, candidates=st.lists(words, max_size=30), limit=st.integers(1, 2))
def test_a_typos_look_through_the_vaults_words_passes_over_none_within_reach(word, candidates, limit):
    pairs = [(candidate, count) for count, candidate in enumerate(candidates)]
    expected = sorted((osa_by_table(word, c), -n, c) for c, n in pairs if osa_by_table(word, c) <= limit)
    assert pms.ranking.words_within(word, pairs, limit) == expected


@settings(max_examples=300, **SETTINGS)
@given(text=note_texts)
def test_any_note_text_parses(text):
    try:
        note = pms.notes.parse_note(text, "fallback", target_chars=200)
    except pms.FrontmatterError as exc:
        assert "\n" not in str(exc)
        return
    assert isinstance(note.title, str) and note.title.strip()
    assert note.passages and all(c.start_line <= c.end_line for c in note.passages)
    assert all(isinstance(t, str) for t in note.tags + note.aliases)


@settings(max_examples=200, **SETTINGS)
@given(block=st.one_of(frontmatter_lines, st.text(st.characters(exclude_categories=()), max_size=200)))
def test_any_frontmatter_is_a_dict_or_a_one_line_refusal(block):
    try:
        meta = pms.parse_frontmatter(block)
    except pms.FrontmatterError as exc:
        assert "\n" not in str(exc)
        return
    assert isinstance(meta, dict)


@settings(max_examples=200, **SETTINGS)
@given(data=st.one_of(st.binary(max_size=400), note_texts.map(lambda t: t.encode("utf-8", "surrogatepass")),
                      st.tuples(st.sampled_from(["utf-8-sig", "utf-16", "utf-32", "cp1252", "latin-1"]), st.text(max_size=80))
                      .map(lambda t: t[1].encode(t[0], "replace"))))
def test_any_file_bytes_decode_or_are_refused_as_binary(data):
    try:
        text = pms.decode_text(data)
    except pms.BinaryFileError:
        return
    assert isinstance(text, str) and "\r" not in text


# -- file names and whole syncs -----------------------------------------------------------------------
name_chars = st.one_of(st.characters(exclude_categories=["Cs"], exclude_characters="/\x00"),
                       st.sampled_from(["\n", "\t", " ", ".", "-", "#", ":", "*", "?", "\\", "中", "\u0301", "\udcff", "\udce9"]))
file_names = st.text(name_chars, min_size=1, max_size=40).filter(lambda n: n not in (".", "..")).map(lambda n: n + ".md")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file names")
@settings(max_examples=40, **SETTINGS)
@given(names=st.lists(file_names, min_size=1, max_size=6, unique_by=lambda n: os.fsencode(n)[:200]), texts=st.lists(note_texts, min_size=6, max_size=6))
def test_any_files_sync_without_exception(names, texts):
    kb, folder = fresh_kb()
    try:
        root = folder / "notes"
        root.mkdir()
        written = []
        for name, text in zip(names, texts):
            try:
                (root / name).write_bytes(text.encode("utf-8", "surrogatepass"))
                written.append(name)
            except OSError:  # too long for this file system, or similar: not our input
                continue
        kb.collections.create(root, name="fuzz")
        report = kb.sync()
        for _, why in report.skipped + report.errors:
            assert "\n" not in why
        indexed = set(kb.collections.get("fuzz").files)
        shown = {os.path.basename(p) for p, _ in report.skipped}
        for name in written:
            if name.startswith("."):
                continue
            assert name in indexed or pms.config.display_path(name) in shown
        for rel in indexed:
            assert kb.get(f"fuzz/{rel}").path == rel
        assert kb.check_sync_status().pending == 0
    finally:
        kb.close()
        shutil.rmtree(folder, ignore_errors=True)


# -- long runs of spaces and brackets (issue 26): what made the old patterns backtrack ---------------------------------
RUN_PIECES = list(" []()`#!|*-<>\"'\t:=") + ["[[", "]]", "](", "# ", "## ", "x", "a.md", "\n", "link", "¶"]


def runs(longest: int):
    """Text made of runs of one piece (up to ``longest`` repeats) and short plain text."""
    run = st.tuples(st.sampled_from(RUN_PIECES), st.integers(1, longest)).map(lambda t: t[0] * t[1])
    return st.lists(st.one_of(run, st.text(max_size=4)), max_size=10).map("".join)


@settings(max_examples=60, **SETTINGS)
@given(text=runs(20_000))
def test_note_text_with_long_runs_of_spaces_and_brackets_parses(text):
    note = pms.notes.parse_note(text, "fallback", target_chars=200)
    assert note.passages and note.title.strip()
    assert all(isinstance(link.target, str) for link in pms.notes.note_links(text))
    assert isinstance(pms.clip._tidy_markdown(text), str) and isinstance(pms.render_snippet(text, "ansi"), str)


# The patterns the linear code replaced: on short text they are the reference.
OLD_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
OLD_MD_LINK = re.compile(r"\[[^\]]*\]\(\s*(<[^>]+>|[^)\s]+)(?:\s+[\"'][^)]*)?\)")
OLD_WHERE = re.compile(r"^\s*([^=!]+?)\s*(?:(!=|=)\s*(.*?))?\s*$", re.DOTALL)


def old_clean_heading(text: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"\[\[([^\]|]*\|)?([^\]]*)\]\]", r"\2", text)
    return text.replace("`", "").replace("**", "").strip()


@settings(max_examples=400, **SETTINGS)
@given(text=runs(12))
def test_the_linear_rewrites_agree_with_the_patterns_they_replace(text):
    for line in text.split("\n"):
        m = OLD_HEADING.match(line)
        assert pms.markdown.parse_heading(line) == ((len(m.group(1)), m.group(2)) if m else None), line
        assert [m.group(1) for m in OLD_MD_LINK.finditer(line)] == list(pms.notes._markdown_link_targets(line)), line
        assert pms.markdown.clean_heading(line) == old_clean_heading(line), line
        m = OLD_WHERE.match(line)
        expected = (m.group(1), m.group(2), m.group(3) if m.group(2) else None) if m and m.group(1).strip() else None
        assert pms.filters._where_condition(line) == expected, line


glob_names = st.text(st.sampled_from("ab.*?[]!{},-"), max_size=6)
path_names = st.text(st.sampled_from("ab.-"), max_size=4)


@settings(max_examples=400, **SETTINGS)
@given(name_glob=glob_names, names=st.lists(path_names, min_size=1, max_size=4))
def test_a_glob_under_every_folder_matches_by_the_file_name_alone(name_glob, names):
    """"**/X" matches a path exactly when X matches its file name, at any depth (and is an error exactly when X is)."""
    try:
        alone = pms.paths.compile_glob(name_glob)
    except pms.PMSError:
        with pytest.raises(pms.PMSError):
            pms.paths.compile_glob("**/" + name_glob)
        return
    anywhere = pms.paths.compile_glob("**/" + name_glob)
    assert bool(anywhere.match("/".join(names))) == bool(alone.match(names[-1]))


MARKUP_PIECES = ["<", ">", "/", "[", "]", "(", ")", "{", "}", "#", "!", "|", "=", '"', "'", " ", "\n", "-", "*", "a", "B",
                 "small", "Listing", "img", "span", "include", "x.md", "http://e.org", "{{#", "[[", "]]", "](", "][", "</",
                 "<!--", "-->", "\u00e9", "\u4e2d"]


@settings(max_examples=1500, **SETTINGS)
@given(st.lists(st.sampled_from(MARKUP_PIECES), max_size=30).map("".join))
def test_text_the_markup_prefilter_passes_over_has_no_markup_to_render(text):
    # passage_display_text runs its markup rules only on text a cheap prefilter flags; a rule
    # that could match text the prefilter passes over would leave its markup in snippets.
    if not pms.markdown._MAY_HOLD_MARKUP.search(text):
        assert pms.markdown._DISPLAY_RULES.sub(pms.markdown._display_piece, text) == text
