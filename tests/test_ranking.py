"""Ranking signals: fuse() as a pure function, notes found by name (alias, typo'd title,
file name) through the trigram name table, and meaning-only answers in hybrid search."""
from __future__ import annotations

import pytest

import pms
from conftest import index_rows, ranked, write


# -- fuse(): no SQLite, no model ------------------------------------------------------------
def test_fuse_reciprocal_rank_fusion_by_hand():
    settings = pms.RankingSettings(method="rrf", k=10, top_bonus=0.0, score_share=0.0)
    rankings = {"keyword": [("a", 9.0), ("b", 5.0), ("a", 1.0)], "vector": [("b", 0.9), ("c", 0.8)]}
    fused = pms.fuse(rankings, settings, {"keyword": 2.0, "vector": 1.0})
    assert [f.unit for f in fused] == ["b", "a", "c"]
    b, a, c = fused
    assert b.score == pytest.approx(2 / 12 + 1 / 11) and b.ranks == {"keyword": 2, "vector": 1}
    assert a.score == pytest.approx(2 / 11) and a.ranks == {"keyword": 1} and a.values == {"keyword": 9.0}  # listed twice: first place only
    assert c.score == pytest.approx(1 / 12) and c.values == {"vector": 0.8}


def test_fuse_bonus_weights_and_ties():
    settings = pms.RankingSettings(method="rrf", k=60, top_bonus=0.01, score_share=0.0)
    fused = pms.fuse({"keyword": [("x", 1.0), ("y", 0.5)], "vector": [("y", 0.9), ("x", 0.1)]}, settings,
                     {"keyword": 1.0, "vector": 1.0})
    assert fused[0].score == pytest.approx(fused[1].score)  # symmetric: a tie
    assert [f.unit for f in fused] == ["x", "y"]  # ties go to the earlier list's order
    only_vector = pms.fuse({"keyword": [("x", 1.0)], "vector": [("y", 0.9)]}, settings, {"keyword": 0.0, "vector": 1.0})
    assert [f.unit for f in only_vector] == ["y", "x"]  # a list weighted 0 still lists its units, last
    assert pms.fuse({}, settings) == []


def test_fuse_rrf_near_ties_go_to_the_stronger_scores():
    # Plain RRF ties a and b (each is #1 in one list, #2 in the other) and keeps
    # the keyword list's order, a first. The score share adds
    # 0.01 x (0.6 x value / keyword best + 0.4 x value / vector best):
    # a 0.01 x (0.6 x 10/10 + 0.4 x 0.1/0.5) = 0.0068, b 0.01 x (0.6 x 9/10 + 0.4 x 0.5/0.5) = 0.0094.
    settings = pms.RankingSettings(method="rrf", k=60, top_bonus=0.0)
    assert (settings.score_share, settings.score_keyword_share) == (0.01, 0.6)  # the defaults
    rankings = {"keyword": [("a", 10.0), ("b", 9.0)], "vector": [("b", 0.5), ("a", 0.1)]}
    fused = pms.fuse(rankings, settings, {"keyword": 1.0, "vector": 1.0})
    assert [f.unit for f in fused] == ["b", "a"]
    b, a = fused
    assert b.score == pytest.approx(1 / 61 + 1 / 62 + 0.0094) and a.score == pytest.approx(1 / 61 + 1 / 62 + 0.0068)
    assert b.parts == pytest.approx({"keyword": 1 / 62 + 0.0054, "vector": 1 / 61 + 0.004})
    assert "+0.01 x (score / list's best): keyword x0.6 + vector x0.4" in settings.describe({"keyword": 1.0, "vector": 1.0})
    plain = pms.fuse(rankings, pms.RankingSettings(method="rrf", k=60, top_bonus=0.0, score_share=0.0), {"keyword": 1.0, "vector": 1.0})
    assert [f.unit for f in plain] == ["a", "b"]  # without it: the tie, keyword order
    # A list without a share (names) adds its RRF vote only.
    named = pms.fuse({"name": [("n", 0.9)]}, settings, {"name": 1.0})
    assert named[0].score == pytest.approx(1 / 61)


# -- names: title, aliases, file name -------------------------------------------------------
@pytest.fixture
def named_vault(kb, tmp_path):
    root = tmp_path / "vault"
    write(root / "k8s.md", "---\naliases: [kubectl cheatsheet]\ntags: [dev]\n---\n# Kubernetes troubleshooting\n\n"
          "When a pod restarts in a loop, read its logs and describe it.\n")
    write(root / "obsidian" / "appearance.md", "# CSS snippets in Obsidian\n\nPut a .css file in the snippets folder and enable it.\n")
    write(root / "money" / "taxes-2024.md", "# Paperwork for the accountant\n\nReceipts, forms and deadlines.\n")
    write(root / "pasta.md", "# Pasta\n\nBoil water, add salt.\n")
    kb.collections.create(root, name="vault")
    kb.sync()
    return kb, root


def test_a_note_is_found_by_its_alias(named_vault):
    kb, _ = named_vault
    hit = kb.search("kubectl cheatsheet", mode="keyword")[0]
    assert hit.path == "k8s.md" and hit.name_rank == 1 and hit.bm25_rank is None  # neither word is in its text


@pytest.mark.parametrize("query, path", [
    ("Kubernets trubleshooting", "k8s.md"),  # two typos: BM25 finds nothing
    ("kubernetes troubleshoot", "k8s.md"),
    ("CSS snippet in Obsidian", "obsidian/appearance.md"),  # singular
    ("snippets in obsidian", "obsidian/appearance.md"),  # a word missing
])
def test_a_near_miss_of_a_title_finds_the_note(named_vault, query, path):
    kb, _ = named_vault
    hit = kb.search(query, mode="keyword")[0]
    assert hit.path == path and hit.name_rank == 1


def test_a_note_is_found_by_its_file_name(named_vault):
    kb, _ = named_vault
    hit = kb.search("taxes 2024", mode="keyword")[0]
    assert hit.path == "money/taxes-2024.md" and hit.name_rank == 1
    sentence = kb.search("how long to boil water for pasta with salt", k=50, mode="keyword")
    assert [h.path for h in sentence if h.name_rank] == []  # a sentence is not a name


def test_a_query_that_can_name_no_note_skips_the_ranked_name_search_with_the_same_result(named_vault, monkeypatch):
    """Ranking every note that shares a trigram with the query (bm25) costs milliseconds
    on a large vault; a cheap count of the shared trigrams first proves when no name can
    reach RankingSettings.name_match_min. A near miss of a title still runs the ranked search."""
    kb, _ = named_vault
    statements = []
    # Internal contract: whether the costly ranked name search runs, seen only by tracing the connection.
    kb.store.db.set_trace_callback(statements.append)
    queries = ["paperwork deadlines receipts", "Kubernets trubleshooting", "snippets in obsidian", "taxes 2024", "pasta"]
    checked = {q: kb.retrieval.names_stage(kb.retrieval.request(q), 10) for q in queries}
    ranked_searches = sum("ORDER BY n.rank" in s for s in statements)
    assert checked["paperwork deadlines receipts"] == [] and checked["Kubernets trubleshooting"]
    assert ranked_searches == len(queries) - 1  # all but the one that shares trigrams with a title and names nothing
    monkeypatch.setattr(pms.retrieval.Retrieval, "_may_name_a_note", lambda *args: True)
    assert {q: kb.retrieval.names_stage(kb.retrieval.request(q), 10) for q in queries} == checked


def test_a_trigram_in_more_names_than_name_common_trigram_finds_no_note_by_name(kb, tmp_path):
    """Ranking every name that holds a trigram costs the vault (0.15 s for 100,000 names), so one
    more names hold than RankingSettings.name_common_trigram is not looked up; a name is still
    found by its rarer trigrams."""
    root = tmp_path / "vault"
    for day in range(1, 7):
        write(root / f"meeting-{day}.md", f"# Meeting on May {day}\n\nAgenda and minutes.\n")
    write(root / "zorblax.md", "# Meetings with Zorblax\n\nWhat the client asked for.\n")
    kb.collections.create(root, name="vault")
    kb.sync()

    def named(query: str, **settings) -> list[str]:
        with ranked(kb, **settings) as other:
            return [h.path for h in other.search(query, mode="keyword") if h.name_rank]

    assert len(named("meeting", name_common_trigram=0)) >= 6  # the file names meeting-1 ... meeting-6
    assert named("meeting", name_common_trigram=6) == []  # 7 names hold each of its trigrams
    assert named("zorblax meetngs", name_common_trigram=6)[:1] == named("zorblax meetngs", name_common_trigram=0)[:1] == ["zorblax.md"]


def test_in_keyword_mode_a_named_note_beats_the_body_match_bm25_ranks_first(kb, tmp_path):
    root = tmp_path / "vault"
    write(root / "dev" / "regex-cheat-sheet.md", "# Regular expressions cheat sheet\n\nAnchors, classes, groups, lookarounds.\n")
    write(root / "dev" / "shell.md", "# Shell one-liners\n\nKeep a regex cheatsheet open: grep -E 'a|b' file.\n")
    kb.collections.create(root, name="vault")
    kb.sync()
    first = kb.search("regex cheatsheet", mode="keyword")[0]
    assert first.path == "dev/regex-cheat-sheet.md" and first.name_rank == 1 and first.bm25_rank is None
    with ranked(kb, keyword_name_weight=1.0) as as_hybrid:  # the names list as hybrid weighs it: BM25 wins
        assert as_hybrid.search("regex cheatsheet", mode="keyword")[0].path == "dev/shell.md"


def test_names_follow_edits_renames_and_deletions(named_vault):
    kb, root = named_vault
    write(root / "k8s.md", "---\naliases: [cluster notes]\n---\n# Kubernetes troubleshooting\n\nPods.\n")
    (root / "money" / "taxes-2024.md").rename(root / "money" / "receipts.md")
    kb.sync()
    assert kb.search("cluster notes", mode="keyword")[0].path == "k8s.md"
    assert all(h.path != "k8s.md" for h in kb.search("kubectl cheatsheet", mode="keyword"))
    assert [h.path for h in kb.search("taxes 2024", k=50, mode="keyword") if h.name_rank] == []  # no note has that name now
    kb.collections.delete("vault")
    assert index_rows(kb, "SELECT count(*) FROM note_names") == [(0,)]


def test_name_similarity():
    assert pms.name_similarity("rust", "Rust") == 1.0
    assert pms.name_similarity("rust", "Rust") > pms.name_similarity("rust", "Rust ownership") > 0
    assert pms.name_similarity("how do I install rust on linux", "Installation") == 0.0


def test_explain_names_the_lists_fused(named_vault):
    kb, _ = named_vault
    hit = kb.search("kubectl cheatsheet", mode="keyword")[0]
    assert "name" in hit.fusion and hit.to_dict(explain=True)["fusion"] == hit.fusion
    assert "fusion" not in hit.to_dict()


def test_fuse_convex_combination_by_hand():
    settings = pms.RankingSettings(method="convex")
    rankings = {"keyword": [("a", 8.0), ("b", 2.0)], "vector": [("b", 0.8), ("c", 0.4)]}
    fused = pms.fuse(rankings, settings, {"keyword": 0.5, "vector": 0.5})
    assert [(f.unit, round(f.score, 6)) for f in fused] == [("b", 0.625), ("a", 0.5), ("c", 0.25)]
    assert pms.fuse({"keyword": [("a", 0.0)]}, settings)[0].score == 0.0  # no division by a zero best


def test_fuse_convex_keeps_each_lists_order():
    # All-terms-first can put a lower BM25 value above a higher one: the order holds.
    fused = pms.fuse({"keyword": [("all", 2.0), ("some", 4.0)]}, pms.RankingSettings(method="convex"), {"keyword": 1.0})
    assert [(f.unit, f.score) for f in fused] == [("all", 1.0), ("some", 1.0)]
    assert fused[1].values == {"keyword": 4.0}  # the list's own value is reported as it was


# -- hybrid: names and meaning with the real model ------------------------------------------------
@pytest.fixture
def named_hybrid_vault(hybrid_kb, tmp_path):
    root = tmp_path / "vault"
    write(root / "k8s.md", "---\naliases: [kubectl cheatsheet]\n---\n# Kubernetes troubleshooting\n\n"
          "When a pod restarts in a loop, read its logs and describe it.\n")
    write(root / "pasta.md", "# Pasta\n\nBoil water, add salt; spaghetti needs nine minutes.\n")
    write(root / "money.md", "# Paperwork for the accountant\n\nReceipts, invoices and forms to send before April.\n")
    write(root / "kubectl.md", "# Shell aliases\n\nalias k=kubectl. A cheatsheet of git commands is in git.md.\n")
    hybrid_kb.collections.create(root, name="vault")
    assert hybrid_kb.sync().embed_error is None
    return hybrid_kb


def test_hybrid_question_answered_by_a_note_that_shares_no_word(named_hybrid_vault):
    query = "how long should noodles cook"
    assert named_hybrid_vault.search(query, mode="keyword") == []
    hit = named_hybrid_vault.search(query)[0]
    assert hit.path == "pasta.md" and hit.bm25_rank is None and hit.vector_rank == 1


def test_hybrid_finds_a_note_by_its_alias_before_one_that_mentions_its_words(named_hybrid_vault):
    hit = named_hybrid_vault.search("kubectl cheetsheet")[0]  # typo'd alias; shell aliases mention both words
    assert hit.path == "k8s.md" and hit.name_rank == 1
    assert hit.fusion.startswith("rrf k=60") and "name x1" in hit.fusion and "named almost exactly, so first" in hit.fusion
    other = named_hybrid_vault.search("kubectl cheetsheet")[1]
    assert other.path == "kubectl.md" and "first" not in other.fusion


def test_cli_explain_says_how_the_lists_were_fused(cli, named_vault, db_path):
    named_vault[0].close()
    r = cli("search", "kubectl cheatsheet", "--mode", "keyword", "--explain", db=db_path)
    assert r.returncode == 0, r.stderr
    assert "name #1 (the query names this note" in r.stdout and "fused by rrf k=60: keyword x2 + name x3" in r.stdout


def test_keyword_votes_of_notes_in_another_language_than_the_query_count_less():
    # A Spanish query: the keyword list's #1 matched an English note by "la" alone; the vector list read it.
    lists = {"keyword": [("ls", 9.0), ("fdupes", 1.0)], "vector": [("fdupes", 0.9), ("ls", 0.5)]}
    settings = pms.RankingSettings()
    assert pms.rank(lists, settings, 2)[0][0].unit == "ls"
    best, explained = pms.rank(lists, settings, 2, foreign={"ls", "fdupes"})
    assert best[0].unit == "fdupes" and f"keyword votes x{settings.cross_language_keyword:g} for notes in another language" in explained
    assert best[0].parts["keyword"] == pytest.approx(settings.cross_language_keyword * pms.fuse(lists, settings)[1].parts["keyword"])
    off = settings.replace(cross_language_keyword=1.0)
    assert [e.unit for e in pms.rank(lists, off, 2, foreign={"ls"})[0]] == ["ls", "fdupes"]


def test_the_complete_step_reads_crowded_cosines_from_the_heads_lowest_and_skips_a_head_across_languages():
    # A multilingual model's cosines crowd together: b is nearest the query, yet cosine / best
    # (0.82 to 1.0 here) lets BM25 decide; less the head's lowest, the vector list tells them apart.
    vectors = {1: bytes([60, 80]), 2: bytes([50, 87]), 3: bytes([70, 71])}  # cosines 0.80, 0.87, 0.71
    evidence = pms.ranking.Evidence(owner={1: "a", 2: "b", 3: "c"}, vectors=vectors, query_vector=bytes([0, 100]), bm25={})
    lists = {"keyword": [("a", 4.0), ("c", 3.9), ("b", 3.0)], "vector": [("b", 0.87), ("a", 0.80), ("c", 0.71)]}
    plain = pms.RankingSettings(feedback_weight=0.0, complete_keyword_share=0.4)
    floored = plain.replace(complete_cosine_floor=True)
    best, explained = pms.rank(lists, plain, 3, evidence=lambda units: evidence)
    assert [e.unit for e in best] == ["a", "b", "c"] and "x cosine / best" in explained
    best, explained = pms.rank(lists, floored, 3, evidence=lambda units: evidence)
    assert [e.unit for e in best] == ["b", "a", "c"] and "(cosine - lowest) / (best - lowest)" in explained
    assert best[-1].parts["vector"] == 0.0  # the head's lowest cosine adds nothing
    # A note of the head in another language than the query (across), or a query whose language is
    # not told (None): BM25 cannot read across languages, so the fusion's order stands.
    fused = [e.unit for e in pms.rank(lists, floored, 3)[0]]
    for across in ({"c"}, None):
        best, explained = pms.rank(lists, floored, 3, evidence=lambda units: evidence, across=across)
        assert [e.unit for e in best] == fused and "re-scored" not in explained
    assert "re-scored" in pms.rank(lists, floored, 3, evidence=lambda units: evidence, across={"d"})[1]  # d is not in the head
    assert pms.RankingSettings().for_vectors(static=False, multilingual=True).complete_cosine_floor
    assert not pms.RankingSettings().for_vectors(static=False).complete_cosine_floor
