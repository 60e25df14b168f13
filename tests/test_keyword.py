"""Keyword search: any string is safe, phrases, exclusions, prefixes, ranking, snippets."""
import json
import math
import re
import pytest

import pms
from conftest import ranked, stamp, write

NASTY = ['"', '""', "'", "AND", "OR", "NOT", "NEAR", "NEAR(a b)", "a AND", "OR b", "title:x", "headings:sync", "*", "**",
         "sync*", "-", "--", "-sync", '"unbalanced', 'un"balanced', "C++", "don't", "(", ")", "{}", "[x]", "^", "a:b:c",
         "😀", "🔥 sync", "", "   ", "the", "the of and", "\x00", "\\", "'; DROP TABLE documents; --", "col:*", "x" * 5000,
         "sync " * 200, "ü", "東京", "NEAR/3", "+sync", "a-b-c", "e-mail", "~", "@#$%", "1.2.3", "\"sync\"*"]


@pytest.mark.parametrize("query", NASTY)
def test_any_query_string_is_safe(vault, query):
    hits = vault.search(query, k=5)
    assert len(hits) <= 5
    for h in hits:  # only the three indexed notes, never the hidden or dependency folders
        assert h.collection == "notes" and h.path in {"sync.md", "backup.md", "dev/rust.md"}


def test_words_match_with_stemming(vault):
    assert vault.search("syncing")[0].path == "sync.md"
    assert vault.search("backup")[0].path == "backup.md"


def test_exact_phrase(vault, notes):
    write(notes / "other.md", "# Other\n\nthe copy of a conflict is elsewhere\n")
    vault.sync()
    assert [h.path for h in vault.search('"conflict copy"')] == ["sync.md"]
    assert {h.path for h in vault.search("conflict copy")} >= {"sync.md", "other.md"}


def test_excluded_word(vault):
    assert {h.path for h in vault.search("restic OR syncthing")} >= {"backup.md", "sync.md"}
    assert [h.path for h in vault.search("syncthing -conflict")] == []
    assert [h.path for h in vault.search("laptop -restic")] == ["sync.md"]


def test_a_command_line_option_is_a_word_not_an_exclusion(kb, tmp_path):
    write(tmp_path / "n" / "git.md", "# Git\n\nPush safely with git push --force-with-lease after a rebase.\n")
    write(tmp_path / "n" / "other.md", "# Other\n\nforce is a word here too, with lease.\n")
    kb.collections.create(path=tmp_path / "n", name="n")
    kb.sync()
    parsed = pms.parse_query("git push --force-with-lease")
    assert parsed.excluded == []
    assert [h.path for h in kb.search("git push --force-with-lease", mode="keyword")][0] == "git.md"


def test_prefix(vault):
    assert vault.search("sync")[0].path == "sync.md"
    assert vault.search("restic") and not vault.search("rest")
    assert vault.search("resti*")[0].path == "backup.md"
    assert vault.search("resti", prefix_last=True)[0].path == "backup.md"


@pytest.mark.parametrize("typed, prefix", [
    ("git com", True), ("git co", False), ("git c", False),  # two letters or one: a word (c* would be every c-word)
    ("git com ", False), ("git com\t", False), ('git "com"', False),  # a space or a quote after it: the word is done
    ("commit", True), ("git com -rebase", True),  # the last word searched, before an exclusion
])
def test_search_as_you_type_takes_the_last_word_as_a_prefix_while_it_is_typed(typed, prefix):
    last = pms.parse_query(typed, prefix_last=True).terms[-1]
    assert last.prefix is prefix and pms.is_partial_word(typed) is (typed.split()[-1].strip('"*-') in ("co", "c"))


def test_notes_with_all_terms_rank_above_notes_with_some(kb, tmp_path):
    root = tmp_path / "n"
    # Many notes that repeat one term a lot, one that has both terms once.
    for i in range(5):
        write(root / f"kafka{i}.md", f"# Kafka {i}\n\n" + "kafka consumer lag. " * 20)
    write(root / "both.md", "# Mixed\n\nWe moved from kafka to postgres for the queue.\n")
    kb.collections.create(root, name="n")
    kb.sync()
    assert kb.search("kafka postgres")[0].path == "both.md"
    # ...and when no note has every term, notes with some still come back (no implicit-AND trap).
    assert len(kb.search("kafka zeppelin")) == 6


def test_when_passages_with_every_term_fill_the_list_the_any_term_query_is_not_run(kb, tmp_path):
    """The any-term list only fills places after the all-terms one: when that is full,
    running it (BM25 over every passage with a common word) cannot change the result."""
    root = tmp_path / "n"
    for i in range(60):
        write(root / f"both{i}.md", f"# Note {i}\n\nkafka and postgres, part {i}.\n")
    write(root / "one.md", "# Only kafka\n\nkafka kafka kafka.\n")
    kb.collections.create(root, name="n")
    kb.sync()
    statements: list[str] = []
    with ranked(kb, steady_k=5) as shallow:  # lists as deep as k asks
        # Internal contract: how many SQL statements a search runs (its cost), seen only by tracing its connections.
        shallow.store.trace_statements(statements.append)
        full = shallow.search("kafka postgres", k=5, mode="keyword")  # asks for 50 passages: 60 have both words
        assert sum("bm25(chunks_fts" in s for s in statements) == 1
        statements.clear()
        some = shallow.search("kafka postgres", k=20, mode="keyword")  # 160: the any-term list fills the rest
        assert sum("bm25(chunks_fts" in s for s in statements) == 2
    assert [h.path for h in some[:5]] == [h.path for h in full] and "one.md" not in [h.path for h in some]


def test_a_word_most_passages_hold_is_left_out_of_the_any_term_query_when_the_others_fill_it(kb, tmp_path, monkeypatch):
    """FTS5's BM25 gives a word that half the passages hold no weight, so a passage holding only it
    comes after every passage holding a rarer word: when those fill the list, the any-term query
    leaves the word out (ranking it costs every passage that holds it) and the results are the same."""
    root = tmp_path / "n"
    for i in range(40):
        write(root / f"day{i:02d}.md", f"# Day {i}\n\nJournal entry number {i}.\n")
    for i in range(10):
        write(root / f"trip{i}.md", f"# Trip {i}\n\nKayak on the lake, trip {i}.\n")
    kb.collections.create(root, name="n")
    kb.sync()
    def search(ubiquitous: int) -> tuple[list[str], list[str]]:
        # Internal contract: which passages the index is asked to rank, seen only by tracing its connections;
        # UBIQUITOUS_PASSAGES, the count past which a word is left out, has no setting.
        monkeypatch.setattr(pms.retrieval.Retrieval, "UBIQUITOUS_PASSAGES", ubiquitous)
        with ranked(kb, steady_k=1, single_depth_per_k=1, single_min_depth=10) as short:  # a list of 10: the kayak notes fill it
            statements: list[str] = []
            short.store.trace_statements(statements.append)
            hits = short.search("journal kayak", k=10, mode="keyword")
        return [h.path for h in hits], [s for s in statements if "bm25(chunks_fts" in s and "journal" in s and " OR " in s]

    left_out, every_word = search(20), search(1000)  # 40 of the 50 passages hold "journal"
    assert left_out[0] == every_word[0] and sorted(left_out[0]) == [f"trip{i}.md" for i in range(10)]
    assert every_word[1] and not left_out[1]
    monkeypatch.setattr(pms.retrieval.Retrieval, "UBIQUITOUS_PASSAGES", 20)
    assert len(kb.search("journal kayak", k=30, mode="keyword")) == 30  # 10 kayak notes fill no list of 240: every word


def test_relevance_looks_up_only_the_words_of_passages_not_found_holding_them_all(kb, tmp_path):
    """A hit the all-terms query found holds every word: its share is 1 without a lookup per word;
    hits that hold some words are looked up, and their shares are exact."""
    root = tmp_path / "n"
    write(root / "both.md", "# Queues\n\nkafka and postgres.\n")
    write(root / "one.md", "# Only kafka\n\nkafka consumer lag.\n")
    kb.collections.create(root, name="n")
    kb.sync()
    statements: list[str] = []
    kb.store.trace_statements(statements.append)  # internal contract: the statements a search runs (its cost)
    both = kb.search("kafka postgres", k=1, mode="keyword")
    assert [(h.path, h.matched) for h in both] == [("both.md", 1.0)]

    def word_lookups() -> list[str]:  # which of the shown passages hold each word: one statement, a part per word
        return [s for s in statements if s.startswith("SELECT rowid, 0 FROM")]

    assert word_lookups() == []
    statements.clear()
    hits = kb.search("kafka postgres", k=5, mode="keyword")
    # Each word weighs its rarity (RankingSettings.relevance_idf, BM25's idf over the 2 passages):
    # kafka, in both, weighs less than postgres, in one.
    kafka, postgres = math.log(1 + 0.5 / 2.5), math.log(1 + 1.5 / 1.5)
    assert [(h.path, h.matched) for h in hits] == [("both.md", 1.0), ("one.md", round(kafka / (kafka + postgres), 3))]
    # one statement, a part per word, each reading one row of the snippets' table: one.md's passage only
    spans = [re.findall(r"rowid >= (\d+) AND rowid <= (\d+)", s) for s in word_lookups()]
    assert len(spans) == 1 and len(spans[0]) == 2 and all(first == last for first, last in spans[0]), word_lookups()
    kb.store.trace_statements(None)


def test_title_and_headings_weigh_more_than_body(kb, tmp_path):
    root = tmp_path / "n"
    write(root / "a.md", "# Walrus\n\nAn animal.\n")
    write(root / "b.md", "# Animals\n\nThere are many animals; one of them is the walrus, which lives in the arctic.\n")
    kb.collections.create(root, name="n")
    kb.sync()
    assert kb.search("walrus")[0].path == "a.md"


def test_snippet_highlights_terms_and_escapes_html(kb, tmp_path):
    root = tmp_path / "n"
    write(root / "h.md", "# H\n\nUse <script>alert(1)</script> carefully with quokka & co.\n")
    kb.collections.create(root, name="n")
    kb.sync()
    hit = kb.search("quokka")[0]
    assert "<script>alert(1)</script>" in hit.snippet and [hit.snippet[s:e] for s, e in hit.marks] == ["quokka"]
    html = pms.render_snippet(hit.snippet, hit.marks, "html")
    assert "<mark>quokka</mark>" in html and "<script>" not in html and "&lt;script&gt;" in html


def test_results_are_one_per_note_unless_passages(kb, tmp_path):
    root = tmp_path / "n"
    sections = "\n\n".join(f"## Part {i}\n\n" + "zebra stripes pattern. " * 60 for i in range(5))
    write(root / "long.md", f"# Long\n\n{sections}\n")
    kb.collections.create(root, name="n")
    kb.sync()
    assert len(kb.search("zebra")) == 1
    passages = kb.search("zebra", passages=True)
    assert len(passages) > 1 and len({(h.start_line, h.end_line) for h in passages}) == len(passages)


def test_hit_fields(vault):
    hit = vault.search("ownership")[0]
    d = hit.to_dict()
    for key in ("path", "collection", "abspath", "docid", "title", "heading_path", "start_line", "end_line", "score",
                "snippet", "bm25_rank", "vector_rank"):
        assert key in d
    assert d["path"] == "dev/rust.md" and d["abspath"].endswith("rust.md") and d["bm25_rank"] == 1
    assert d["vector_rank"] is None and len(d["docid"]) == 8 and d["title"] == "Rust ownership"


def test_collection_filter(kb, notes, tmp_path):
    other = tmp_path / "other"
    write(other / "o.md", "# Other restic\n\nrestic restic\n")
    kb.collections.create(notes, name="notes")
    kb.collections.create(other, name="other")
    kb.sync()
    assert {h.collection for h in kb.search("restic")} == {"notes", "other"}
    assert {h.collection for h in kb.search("restic", collections=["notes"])} == {"notes"}
    with pytest.raises(pms.PMSError, match="no collection named 'nope'"):
        kb.search("restic", collections=["nope"])


def test_parse_query():
    q = pms.parse_query('"exact phrase" -bad C++ don\'t pre* the')
    assert [t.tokens for t in q.terms] == [("exact", "phrase"), ("c",), ("don", "t"), ("pre",)]
    assert q.terms[-1].prefix and [t.tokens for t in q.excluded] == [("bad",)]
    assert pms.parse_query("the of").words == ["the", "of"]  # only stopwords: still searched
    assert pms.parse_query("-alone").match_any() is None


def test_get_by_path_docid_and_lines(vault):
    hit = vault.search("conflict")[0]
    doc = vault.get(f"notes/{hit.path}")
    assert doc.title == "Syncing notes across devices" and "Syncthing" in doc.text
    assert vault.get("#" + hit.docid).path == hit.path
    part = vault.get(f"notes/{hit.path}:{hit.start_line}:2")
    assert part.text.split("\n")[0] == doc.text.split("\n")[hit.start_line - 1]
    assert len(part.text.split("\n")) == 2
    with pytest.raises(pms.PMSError, match="no indexed note"):
        vault.get("notes/missing.md")


def test_a_short_note_about_the_query_beats_a_long_note_with_one_such_passage(kb, tmp_path):
    """The note's focus: the handbook's one passage on channels is denser than the
    short note's, so passage BM25 alone (no focus) puts the handbook first."""
    root = tmp_path / "n"
    chores = ("water the tomatoes in the morning and mulch the beds before summer comes",
              "a stock simmers for hours; skim it, strain it and freeze it in portions",
              "book the night train early, pack light and carry a paper copy of the tickets",
              "practise scales slowly with a metronome, then raise the tempo a little each week")
    sections = "".join(f"## Part {i}\n\n" + (chore.capitalize() + ". ") * 6 + "\n\n" for i, chore in enumerate(chores * 2))
    about = "Threads send data to each other through channels: a channel has a sender and a receiver."
    write(root / "handbook.md", f"# Handbook\n\n{sections}## Channels\n\n{about} Threads own the ends of channels; "
          "channels are how threads talk.\n")
    write(root / "channels.md", f"# Message passing\n\n{about}\n\nA sender can be cloned, so several producers may feed "
          "one receiver; a receiver iterates until every sender is dropped, and a bounded buffer makes a fast producer wait "
          "for a slow consumer. Messages arrive in the order they were sent, and a value sent is moved: the sending side "
          "can no longer use it, which rules out a whole class of data races at compile time.\n")
    kb.collections.create(root, name="n")
    kb.sync()
    assert [h.path for h in kb.search("threads channels")] == ["channels.md", "handbook.md"]
    with ranked(kb, focus_weight=0.0) as no_focus:
        assert [h.path for h in no_focus.search("threads channels")] == ["handbook.md", "channels.md"]


@pytest.mark.stdlib
def test_k_on_the_command_line_is_the_number_of_results_as_in_the_api(tmp_path):
    """`search ... -k 2` is `-n 2` (the API and MCP call it k): before, '-k' became an excluded word
    and '2' a word of the query, which changed what came first."""
    from conftest import run_cli

    for i in range(5):
        write(tmp_path / "n" / f"trip{i}.md", f"# Trip {i}\n\nA hiking trip with a tent, number {i}.\n")
    db = tmp_path / "i.sqlite"
    assert run_cli("collection", "add", tmp_path / "n", "--name", "n", db=db, python_flags=["-S"]).returncode == 0
    by_k, by_n = (run_cli("search", "hiking tent", flag, "2", "--json", db=db, python_flags=["-S"]) for flag in ("-k", "-n"))
    assert by_k.returncode == 0 and by_k.stdout == by_n.stdout
    assert len(json.loads(by_k.stdout)) == 2


def test_a_snippet_follows_an_edited_note_when_the_same_search_runs_again(kb, tmp_path):
    """Snippets are cut in a scratch table that keeps the passages it was given across searches:
    after an edit the same search shows the new text."""
    note = tmp_path / "n" / "trip.md"
    write(note, "# Trip\n\nPack the compass and the gamma lamp.\n")
    stamp(note, "2024-01-01")
    kb.collections.create(tmp_path / "n", name="n")
    kb.sync()
    assert "gamma" in kb.search("compass", mode="keyword")[0].snippet
    write(note, "# Trip\n\nPack the compass and the delta lamp.\n")
    stamp(note, "2024-01-02")  # the same size: the date tells the sync it changed
    kb.sync()
    snippet = kb.search("compass", mode="keyword")[0].snippet
    assert "delta" in snippet and "gamma" not in snippet, snippet


def test_a_search_of_some_passages_already_shown_snippets_those_alone(kb, tmp_path):
    """Snippets and the words each hit holds are read in a scratch table that keeps earlier searches'
    passages: a search whose two hits were shown before and after eight others gets its own two's, though
    the eight hold one of its words."""
    words = {0: "alpha beta", 9: "alpha gamma"}
    for n in range(10):
        write(tmp_path / "n" / f"note{n}.md", f"# Station {n}\n\nThe {words.get(n, 'alpha')} reading of station {n}.\n")
    kb.collections.create(tmp_path / "n", name="n")
    kb.sync()
    assert [h.path for h in kb.search("beta", mode="keyword")] == ["note0.md"]
    assert len(kb.search("alpha -gamma", k=10, mode="keyword")) == 9  # notes 1-8 shown after note0
    assert [h.path for h in kb.search("gamma", mode="keyword")] == ["note9.md"]
    both = kb.search("alpha beta gamma", k=2, mode="keyword")
    assert sorted(h.path for h in both) == ["note0.md", "note9.md"]
    for hit in both:
        assert [hit.snippet[a:b] for a, b in hit.marks] == ["alpha", words[int(hit.path[4])].split()[1]], hit.snippet
        assert f"station {hit.path[4]}" in hit.snippet
    assert [h.matched for h in both] == [both[0].matched] * 2 and 0.5 < both[0].matched < 1.0  # two of the three words


def test_each_bm25_hit_carries_its_notes_passage_count_after_edits_that_keep_some_passages(kb, tmp_path):
    """The focus reads how many passages a hit's note has from the BM25 pass (its passages'
    numbers, 0..n-1): an edit that drops, adds and moves passages (unchanged ones are kept and
    renumbered) leaves every count equal to the passages the index holds."""
    import sqlite3

    def sections(names):
        return "# Field guide\n\n" + "".join(f"## {n}\n\nThe {n} heron wades in shallow water at dawn. " * 3 + "\n\n" + "x" * 900 + "\n\n"
                                            for n in names)

    note = tmp_path / "n" / "guide.md"
    write(note, sections(["grey", "white", "purple", "night", "striated"]))
    stamp(note, "2024-01-01")
    kb.collections.create(tmp_path / "n", name="n")
    kb.sync()
    write(note, sections(["goliath", "grey", "night"]))  # one new before, two dropped between kept ones
    stamp(note, "2024-01-02")
    kb.sync()
    held = sqlite3.connect(kb.index_path).execute("SELECT count(*) FROM chunks").fetchone()[0]
    # internal contract: Store.fts_search's row for each hit (no public field carries a note's passage count)
    found = kb.store.fts_search('"heron"', 50, None, pms.RankingSettings().field_weights)
    assert held >= 3 and found and {size for _, _, _, size in found} == {held}
