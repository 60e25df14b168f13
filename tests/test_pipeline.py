"""The search pipeline: a SearchRequest parsed once -> candidate stages -> a pure ranking
stage (RankingSettings) -> a SearchResult; exclusions in every list; snippets as text
plus marked spans with a renderer per front end; error hints worded per front end.

The stages are reached through ``kb.retrieval``: each is a contract of the pipeline (a
function of the frozen request), tested on its own; front ends only call kb.search."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import pms
from conftest import write


@pytest.fixture
def rust_vault(kb, tmp_path):
    root = tmp_path / "rust"
    write(root / "rust.md", "# Rust\n\nA systems programming language: fast, with no garbage collector. Cargo builds rust crates.\n")
    write(root / "borrowing.md", "# Rust borrowing\n\nIn rust, borrowing lends a value through references; the borrow checker "
          "enforces that rust borrowing rules hold.\n")
    write(root / "lifetimes.md", "# Lifetimes\n\nRust lifetimes say how long borrowing lasts; rust rust rust borrowing.\n")
    write(root / "cooking.md", "# Pasta\n\nBoil the water, salt it, cook the pasta.\n")
    kb.collections.create(root, name="rust")
    kb.sync()
    return kb


def test_a_search_cleans_and_parses_its_query_once_and_says_how_it_ran(rust_vault, monkeypatch):
    calls = {"parse": 0, "clean": 0}
    parse, clean = pms.parse_query, pms.config.clean_query
    for module in (pms.query, pms.retrieval, pms.api):  # internal contract: each module that calls them, counted
        monkeypatch.setattr(module, "parse_query", lambda *a, **kw: calls.__setitem__("parse", calls["parse"] + 1) or parse(*a, **kw),
                            raising=False)
        monkeypatch.setattr(module, "clean_query", lambda *a, **kw: calls.__setitem__("clean", calls["clean"] + 1) or clean(*a, **kw),
                            raising=False)
    result = rust_vault.search("rust -borrowing", k=3)
    assert calls == {"parse": 1, "clean": 1}
    assert isinstance(result, pms.SearchResult) and result.mode == "keyword" and result.reason
    assert set(result.timings) == {"candidates", "ranking", "snippets", "relevance"} and all(ms >= 0 for ms in result.timings.values())
    assert len(result) == len(result.hits) and result[0] is result.hits[0] and list(result) == result.hits and result
    assert "name x3" in result.explain  # keyword mode fuses BM25 with the names list


def test_the_request_is_complete_before_the_search_and_frozen(rust_vault):
    # internal contract: the SearchRequest the stages read (made by Retrieval.request; kb.search makes it too)
    req = rust_vault.retrieval.request(' Rust  "borrow checker" -lifetimes car', k=5000, collections=["rust"],
                                       prefix_last=True, mode="auto", intent=" what\x00 ")
    assert req.query == ' Rust  "borrow checker" -lifetimes car' and req.k == 1000 and req.collections == ("rust",)
    assert [t.tokens for t in req.parsed.terms] == [("rust",), ("borrow", "checker"), ("car",)]
    assert req.parsed.terms[-1].prefix and req.parsed.terms[1].phrase
    assert [t.tokens for t in req.parsed.excluded] == [("lifetimes",)]
    assert req.parsed.text == 'Rust "borrow checker" car'  # what names, the exact-title rule and the query vector read
    # The mode that runs, and why not hybrid, are resolved before the search (no embeddings here).
    assert (req.mode, req.used, req.reason) == ("auto", "keyword", "embeddings disabled") and req.collection_ids
    assert req.intent == "what" and req.meaning == 'what: Rust "borrow checker" car'
    with pytest.raises(AttributeError, match="frozen"):
        req.used = "hybrid"  # never written after it is made: a change is a new request
    assert req.replace(used="hybrid").used == "hybrid" and req.used == "keyword"
    with pytest.raises(pms.PMSError, match="nope"):
        rust_vault.retrieval.request("x", collections=["nope"])  # an unknown collection fails before any work
    with pytest.raises(pms.PMSError, match="unknown search mode"):
        rust_vault.retrieval.request("x", mode="fast")
    with pytest.raises(pms.EmbeddingUnavailable, match="hybrid search is unavailable"):
        rust_vault.retrieval.request("x", mode="hybrid")
    listing = rust_vault.retrieval.request("", mode="hybrid", note_filter=pms.NoteFilter.build(path="*"))
    assert listing.lists_notes and listing.used == "keyword"  # a filter without words lists notes: no vectors needed


def test_each_candidate_stage_is_a_function_of_the_request(rust_vault):
    r = rust_vault.retrieval  # internal contract: the candidate stages, and the Store rows that name their notes
    req = r.request("rust")
    keyword = r.keyword_stage(req, 10)
    assert keyword and all(isinstance(cid, int) and value > 0 for cid, value in keyword)
    names = r.names_stage(req, 10)
    titles = {row.title for row in rust_vault.store.passage_info(list(rust_vault.store.first_passages(d for d, _ in names)
                                                                     .values())).values()}
    assert names[0][1] == 1.0 and "Rust" in titles  # the note called "Rust" is named exactly
    with pytest.raises(pms.EmbeddingUnavailable):
        rust_vault.search("rust", mode="vector")


def test_ranking_is_pure_every_knob_in_one_record():
    settings = pms.RankingSettings()
    lists = {"keyword": [("a", 4.0), ("b", 3.0)], "name": [("c", 0.9)]}
    best, explained = pms.rank(lists, settings, k=5)
    assert [e.unit for e in best] == ["c", "a", "b"]  # named almost exactly (>= name_first_min): first
    assert explained.startswith("rrf k=60: keyword x2 + name x1")
    best, _ = pms.rank(lists, settings.replace(name_first_min=0.95), k=5)
    assert [e.unit for e in best][0] == "a"
    # The complete step reads only what the evidence gives it: one vector per note here.
    vectors = {1: bytes([100, 0]), 2: bytes([0, 100]), 3: bytes([90, 10])}
    evidence = pms.ranking.Evidence(owner={1: "a", 2: "b", 3: "c"}, vectors=vectors, query_vector=bytes([0, 100]), bm25={"c": 1.0})
    lists = {"keyword": [("a", 4.0), ("b", 3.0)], "vector": [("b", 0.9), ("a", 0.1)]}
    best, explained = pms.rank(lists, settings.replace(feedback_weight=0.0), k=5, evidence=lambda units: evidence)
    assert [e.unit for e in best] == ["b", "a"] and "re-scored" in explained
    assert best[0].score == pytest.approx(0.5 * 3 / 4 + 0.5 * 1.0)
    for name in ("field_weights", "and_first_max_terms", "focus_weight", "keyword_name_weight", "name_match_min", "name_first_min"):
        assert hasattr(settings, name)


def test_exclusions_apply_to_names_and_the_exact_title_rule(rust_vault):
    hits = rust_vault.search("rust -borrowing", mode="keyword")
    assert hits[0].title == "Rust"
    assert all("borrow" not in h.text.lower() for h in hits)
    req = rust_vault.retrieval.request("rust borrowing -borrowing")  # internal contract: the names stage itself
    assert [d for d, _ in rust_vault.retrieval.names_stage(req, 10)] == []  # every note so named holds the word
    # "-rust" alone is no search; "rust -rust" finds nothing rather than the note called Rust.
    assert list(rust_vault.search("rust -rust", mode="keyword")) == []


def test_exclusions_apply_to_the_vector_list(hybrid_kb, tmp_path):
    root = tmp_path / "rust"
    write(root / "rust.md", "# Rust\n\nA systems programming language: fast, with no garbage collector.\n")
    write(root / "borrowing.md", "# Ownership\n\nBorrowing lends a value through references; the borrow checker enforces it.\n")
    write(root / "refs.md", "# References\n\nA reference is borrowing: rust lends values, borrowing them for a while.\n")
    hybrid_kb.collections.create(root, name="rust")
    assert hybrid_kb.sync().embed_error is None
    for mode in ("hybrid", "vector"):
        result = hybrid_kb.search("rust -borrowing", mode=mode)
        assert result.mode == mode and result[0].title == "Rust", mode
        assert all("borrowing" not in h.text.lower() for h in result), mode
    # internal contract: the vector stage itself excludes (not a filter after it, which would leave fewer than k)
    req = hybrid_kb.retrieval.request("rust -borrowing", mode="hybrid")
    owner = hybrid_kb.store.passage_notes(cid for cid, _ in hybrid_kb.retrieval.vector_stage(req, 10))
    assert len(set(owner.values())) == 1


def test_snippets_are_text_with_marked_spans(kb, tmp_path):
    write(tmp_path / "n" / "q.md", "# Q\n\nSee **quokka** facts in [the quokka page](https://example.org/q) and <kbd>Ctrl</kbd> "
          "a & b < c, then \x1b[31mred\x1b[0m.\n")
    kb.collections.create(tmp_path / "n", name="n")
    kb.sync()
    hit = kb.search("quokka")[0]
    assert "**" not in hit.snippet and "](" not in hit.snippet and "<kbd>" not in hit.snippet  # readable text
    assert [hit.snippet[s:e].lower() for s, e in hit.marks] == ["quokka", "quokka"]
    assert hit.to_dict()["marks"] == hit.marks


def test_each_front_end_renders_a_snippet_its_way():
    text, marks = "a <b> & \x1b[31m quokka", [(14, 20)]
    assert pms.render_snippet(text, marks) == text  # plain: MCP, JSON
    assert pms.render_snippet(text, marks, "html") == "a &lt;b&gt; &amp; \x1b[31m <mark>quokka</mark>"
    assert pms.render_snippet(text, marks, "html", ("<span>", "</span>")).endswith("<span>quokka</span>")
    ansi = pms.render_snippet(text, marks, "ansi")
    assert ansi == "a <b> & \\x1b[31m \x1b[1;33mquokka\x1b[0m"  # a note's escape sequence is shown, never run
    assert pms.render_snippet("ab", [(0, 1), (0, 2)], "html") == "<mark>a</mark>b"  # overlapping spans: the first


def test_an_error_hint_is_worded_per_front_end():
    error = pms.PMSError("the index's vectors were stored by an older PMS", pms.Hint(command="sync --reembed"))
    assert error.message == "the index's vectors were stored by an older PMS"
    assert str(error) == f"{error.message} (run: {pms.pms_command('sync --reembed')})"  # the command line's wording
    assert pms.hint_text(error.hint, "mcp") == "run `pms sync --reembed` where PMS is installed"
    assert pms.hint_text(pms.Hint(command="sync"), "mcp") == "call the sync tool"
    assert pms.hint_text(pms.Hint(setting="PMS_MODEL_DIR")) == "set PMS_MODEL_DIR"
    assert pms.hint_text(pms.Hint(option="mode"), "mcp") == "pass the mode argument"
    assert pms.hint_text(pms.Hint(option="allow_sync")) == "pass --allow-sync"
    assert pms.reason_text("no embeddings yet", pms.Hint(command="sync"), "mcp") == "no embeddings yet; call the sync tool"
    assert str(pms.PMSError("plain")) == "plain" and pms.PMSError("plain").hint is None


def test_keyword_only_reasons_carry_a_hint_not_a_command_line(vault):
    used, info = vault.search_mode(), vault.status(pending=False)
    assert used.mode == info["search_mode"] == "keyword" and used.reason == info["search_mode_reason"] and "run:" not in used.reason
    assert info["search_mode_hint"] == (used.hint.as_dict() if used.hint else None)
    if used.code in ("not-installed", "not-embedded"):
        assert used.hint is not None and used.hint.command in ("setup", "sync")


def test_a_hit_is_flagged_changed_on_disk_only_in_its_own_collection(kb, tmp_path):
    """Two collections with the same file name: editing one marks only its hit (the lookup is per collection)."""
    for name in ("one", "two"):
        write(tmp_path / name / "a.md", f"# A\n\nwombat notes of {name}\n")
        kb.collections.create(tmp_path / name, name=name)
    kb.sync()
    assert kb.changed_on_disk(kb.search("wombat", mode="keyword").hits) == []
    (tmp_path / "two" / "a.md").write_text("# A\n\nwombat notes of two, edited at length\n", encoding="utf-8")
    stale = kb.changed_on_disk(kb.search("wombat", mode="keyword").hits)
    assert [(h.collection, h.path) for h in stale] == [("two", "a.md")]
    (tmp_path / "one" / "a.md").unlink()
    stale = kb.changed_on_disk(kb.search("wombat", mode="keyword").hits)
    assert sorted(h.collection for h in stale) == ["one", "two"]


def test_a_pmsignore_line_that_holds_a_replacement_character_is_a_pattern(kb, tmp_path):
    """U+FFFD written as valid UTF-8 is a character like any other, not an undecodable line."""
    root = tmp_path / "vault"
    for name in ("keep.md", "\ufffddraft.md"):
        write(root / name, "# note\n\nplatypus\n")
    (root / ".pmsignore").write_text("\ufffddraft.md\n", encoding="utf-8")
    kb.collections.create(root, name="v")
    report = kb.sync()
    assert report.warnings == [] and kb.collections.get("v").files == ["keep.md"]


def test_a_path_filter_naming_a_folder_that_matches_nothing_says_how_to_match_names(tmp_path):
    from conftest import run_cli

    write(tmp_path / "v" / "src" / "ch04-01-ownership.md", "# Ownership\n\nRules of ownership.\n")
    db = tmp_path / "i.sqlite"
    assert run_cli("collection", "add", tmp_path / "v", "--name", "v", "--no-embed", db=db).returncode == 0
    done = run_cli("search", "ownership", "--path", "src/ch04", "--mode", "keyword", db=db)
    assert done.returncode == 0 and "No results." in done.stdout
    assert "--path src/ch04 is a folder; --path 'src/ch04*' matches names that start with it" in done.stderr
    found = run_cli("search", "ownership", "--path", "src/ch04*", "--mode", "keyword", db=db)
    assert "src/ch04-01-ownership.md" in found.stdout and "is a folder" not in found.stderr
    assert pms.path_prefix_glob("src/ch04*") is None and pms.path_prefix_glob(None) is None


# SQL statements a search runs (docs/design.md, "SQL per search"), on every connection (hybrid reads
# its keyword and name lists in worker threads): a number that does not grow with the hits shown.
# Keyword: the vocabulary (with the index's version), BM25 (passages with every word; those with
# some, when too few have every one), the names (trigram check, ranked names), the hits' rows, their
# snippets and which words each holds. Hybrid adds the KNN, the notes of its passages, which notes
# lack vectors, and the complete step's passages and vectors; the hits' own vectors when the complete
# step did not read them (k above complete_depth).
KEYWORD_STATEMENTS = 6
HYBRID_STATEMENTS = 11


def statements_of(kb, query: str, mode: str, k: int) -> list[str]:
    """The SQL statements a search sends to the index (SQLite's nested ones, '-- ...', left out)."""
    kb.search(query, k=k, mode=mode)  # the first search of a process also reads settings once
    sent: list[str] = []
    kb.store.trace_statements(sent.append)  # internal contract: the SQL statement budget (docs/design.md)
    try:
        kb.search(query, k=k, mode=mode)
    finally:
        kb.store.trace_statements(None)
    # FTS5 reads a table's settings once per connection ("SELECT k, v FROM 'main'.'x_config'"): a worker
    # thread that had not read that table yet does so here, which is no cost of this search.
    return [s for s in sent if not s.lstrip().startswith("--") and not re.match(r"SELECT k, v FROM '\w+'\.'\w+_config'$", s)]


def forty_notes(folder: Path) -> Path:
    for i in range(40):
        write(folder / f"trip{i:02d}.md", f"# Trip {i}\n\nPacking list for a hiking trip number {i}: boots, tent and a map.\n\n"
              f"## Food\n\nOats and coffee for the trip, day {i}.\n")
    return folder


def test_a_keyword_search_reads_the_index_in_a_fixed_number_of_statements(kb, tmp_path):
    kb.collections.create(forty_notes(tmp_path / "trips"), name="trips")
    kb.sync()
    one, thirty = (statements_of(kb, "hiking trip", "keyword", k) for k in (1, 30))
    assert len(kb.search("hiking trip", k=30, mode="keyword")) == 30
    assert len(thirty) == len(one) <= KEYWORD_STATEMENTS, "\n".join(thirty)


def test_word_counts_kept_across_searches_follow_a_sync_by_another_process(kb, tmp_path):
    """A search's word counts (typos, rarity) are kept until the index changes: typing the same
    words again reads no vocabulary, and a sync by another connection (the CLI while the app is
    open) is seen at the next search."""
    from conftest import run_cli

    write(tmp_path / "v" / "a.md", "# Seals\n\nA seal rests on the ice.\n")
    kb.collections.create(tmp_path / "v", name="v")
    kb.sync()
    terms = kb.store.index_terms(["seal", "walrus"])  # internal contract: Store.vocabulary's counts (docs/design.md)
    seal, walrus = terms  # as stemmed
    assert kb.store.vocabulary(terms)[0] == {seal: 1}
    sent: list[str] = []
    kb.store.trace_statements(sent.append)
    try:
        assert kb.store.vocabulary(terms)[0] == {seal: 1}
    finally:
        kb.store.trace_statements(None)
    assert [s for s in sent if "pms_vocabulary" in s and "seal" in s] == [], "\n".join(sent)
    write(tmp_path / "v" / "b.md", "# Walruses\n\nA walrus and a seal on the same floe.\n")
    assert run_cli("sync", db=kb.store.path).returncode == 0
    assert kb.store.vocabulary(terms)[0] == {seal: 2, walrus: 1}
    hits = kb.search("walrus", mode="keyword")
    assert [h.path for h in hits] == ["b.md"]


@pytest.mark.slow
def test_a_hybrid_search_reads_the_index_in_a_fixed_number_of_statements(hybrid_kb, tmp_path):
    hybrid_kb.collections.create(forty_notes(tmp_path / "trips"), name="trips")
    hybrid_kb.sync()
    one, thirty = (statements_of(hybrid_kb, "what to pack for a hike", "hybrid", k) for k in (1, 30))
    assert len(one) <= len(thirty) <= len(one) + 1 and len(thirty) <= HYBRID_STATEMENTS, "\n".join(thirty)
