"""Embeddings, vectors and fusion with the real ONNX model (all-MiniLM-L6-v2 from PyPI)."""
import json
import re
import threading

import pytest

import pms
from conftest import index_rows, index_write, ranked, write


@pytest.fixture
def hybrid_vault(hybrid_kb, notes):
    hybrid_kb.collections.create(notes, name="notes")
    report = hybrid_kb.sync()
    assert report.embed_error is None and report.embedded == hybrid_kb.status(pending=False)["passages"]
    return hybrid_kb


def vector_rows(kb):
    # Internal contract: no vector outlives its passage. The vectors' table is sqlite-vec's (a
    # virtual table), readable only through a connection that loaded it: the KnowledgeBase's.
    return kb.store.db.execute("SELECT count(*) FROM chunk_vectors").fetchone()[0]


def test_hybrid_is_the_default_and_finds_by_meaning(hybrid_vault):
    assert hybrid_vault.search_mode() == ("hybrid", "", "", None)
    # No word of this query is in the note, so only the vectors can find it.
    query = "replicate documents onto my cellphone"
    assert hybrid_vault.search(query, mode="keyword") == []
    hits = hybrid_vault.search(query, k=3)
    assert hits[0].path == "sync.md" and hits[0].vector_rank == 1 and hits[0].bm25_rank is None
    assert hybrid_vault.search("restic", mode="keyword")[0].path == "backup.md"
    assert hybrid_vault.search("programming language memory rules", mode="vector")[0].path == "dev/rust.md"


def test_hybrid_and_candidates_api(hybrid_vault):
    hits = hybrid_vault.search("restic backups offsite", k=3, mode="hybrid")
    top = hits[0]
    assert top.path == "backup.md" and top.bm25_rank == 1 and top.vector_rank == 1
    assert top.score == pytest.approx(1.0)  # re-scored: the best BM25 and the best cosine, 0.5 x 1 + 0.5 x 1
    with ranked(hybrid_vault, complete_depth=0) as rrf:
        top = rrf.search("restic backups offsite", k=3, mode="hybrid")[0]
    f = pms.RankingSettings().replace(complete_depth=0)
    assert top.score == pytest.approx((f.keyword_weight + f.vector_weight) / (f.k + 1) + 2 * f.top_bonus + f.score_share)  # #1 in both: each list's best
    r = hybrid_vault.retrieval  # internal contract: the candidate stages, each a function of the request (test_pipeline.py)
    req = r.request("restic backups offsite", k=5, mode="hybrid")
    lists = {"keyword": [cid for cid, _ in r.keyword_stage(req, 5)], "vector": [cid for cid, _ in r.vector_stage(req, 5)]}
    assert lists["keyword"] and len(lists["vector"]) == 3
    assert all(isinstance(cid, int) for cid in lists["keyword"] + lists["vector"])


def test_only_new_or_changed_passages_are_embedded(hybrid_kb, tmp_path):
    root = tmp_path / "n"
    sections = "\n\n".join(f"## Part {i}\n\n" + f"Paragraph about topic number {i}. " * 30 for i in range(6))
    write(root / "long.md", f"# Long\n\n{sections}\n")
    hybrid_kb.collections.create(root, name="n")
    first = hybrid_kb.sync()
    assert first.embedded >= 6
    write(root / "long.md", f"# Long\n\n{sections}\n\n## Part new\n\nA short new section.\n")
    second = hybrid_kb.sync()
    assert second.updated == 1 and 1 <= second.embedded <= 2
    assert vector_rows(hybrid_kb) == hybrid_kb.status(pending=False)["passages"]
    assert hybrid_kb.sync().embedded == 0  # nothing to do


def test_deleted_and_edited_notes_lose_their_old_vectors(hybrid_vault, notes):
    (notes / "backup.md").unlink()
    write(notes / "sync.md", "# Sync\n\nNow I use git to sync instead.\n")
    hybrid_vault.sync()
    assert vector_rows(hybrid_vault) == hybrid_vault.status(pending=False)["passages"] == 2
    assert all(h.path != "backup.md" for h in hybrid_vault.search("backup offsite copies", mode="vector"))


def test_vectors_orphaned_by_a_keyword_only_sync_are_cleaned(hybrid_vault, notes, db_path):
    with pms.KnowledgeBase(db_path, embeddings=False) as plain:  # like python3 -S: no sqlite-vec
        (notes / "backup.md").unlink()
        plain.sync()
    assert vector_rows(hybrid_vault) == 3  # the orphan is still there, but never returned
    assert all(h.path != "backup.md" for h in hybrid_vault.search("restic offsite", mode="vector"))
    hybrid_vault.sync()
    assert vector_rows(hybrid_vault) == 2


def test_collection_filter_applies_before_the_nearest_neighbour_cut(hybrid_kb, tmp_path):
    big, small = tmp_path / "big", tmp_path / "small"
    for i in range(60):
        write(big / f"cook{i}.md", f"# Recipe {i}\n\nA tomato soup recipe with basil, variant {i}.\n")
    write(small / "car.md", "# Car maintenance\n\nChange the engine oil every 10,000 km.\n")
    hybrid_kb.collections.create(big, name="big")
    hybrid_kb.collections.create(small, name="small")
    hybrid_kb.sync()
    hits = hybrid_kb.search("tomato soup", k=5, mode="vector", collections=["small"])
    assert [h.path for h in hits] == ["car.md"]
    hits = hybrid_kb.search("tomato soup", k=5, collections=["small"])
    assert [h.path for h in hits] == ["car.md"]


def test_a_different_model_is_detected_and_reembed_fixes_it(hybrid_vault, db_path, embedding_model_dir):
    index_write(hybrid_vault, "UPDATE meta SET value = 'someone/else' WHERE key = 'embed_model'")  # embedded by another model
    mode, why, code, hint = hybrid_vault.search_mode()
    assert mode == "keyword" and "someone/else" in why and hint == pms.Hint(command="sync --reembed") and code == "reembed-needed"
    with pytest.raises(pms.EmbeddingUnavailable, match="--reembed"):
        hybrid_vault.search("x", mode="vector")
    report = hybrid_vault.sync()
    assert report.embedded == 0 and "--reembed" in report.embed_error  # never mixes vectors
    report = hybrid_vault.sync(reembed=True)
    assert report.embedded == hybrid_vault.status(pending=False)["passages"]
    assert hybrid_vault.search_mode()[0] == "hybrid"


def test_embedding_resumes_after_an_interruption(hybrid_kb, tmp_path, monkeypatch):
    root = tmp_path / "many"
    for i in range(120):
        write(root / f"n{i:03}.md", f"# Note {i}\n\nSome text about item {i} and its colour.\n")
    hybrid_kb.collections.create(root, name="many")
    cancel = threading.Event()
    report = hybrid_kb.sync(progress=lambda p: cancel.set() if p.phase == "embed" and p.done >= 64 else None, cancel=cancel)
    assert report.cancelled and 0 < report.embedded < 120
    done = report.embedded
    again = hybrid_kb.sync()
    assert again.added == 0 and again.embedded == 120 - done
    assert vector_rows(hybrid_kb) == 120


def test_missing_model_folder_falls_back_to_keyword(db_path, notes, tmp_path):
    with pms.KnowledgeBase(db_path, model="sentence-transformers/all-MiniLM-L6-v2", model_dir=tmp_path / "no-model") as kb:
        kb.collections.create(notes, name="notes")
        report = kb.sync()
        assert "does not exist" in report.embed_error
        assert kb.search("restic")[0].path == "backup.md"
        used = kb.search_mode()
        assert (used.mode, used.code) == ("keyword", "model-unavailable")


def test_query_instructions():
    assert pms.Embedder("BAAI/bge-small-en-v1.5").query_prefix.startswith("Represent this sentence")
    assert pms.Embedder("sentence-transformers/all-MiniLM-L6-v2").query_prefix == ""


@pytest.mark.stdlib
def test_cli_explain_and_modes(hybrid_vault, db_path, cli, pms_main):
    r = pms_main("search", "restic offsite", "--json", "--explain", db=db_path)  # hybrid_kb set PMS_MODEL_DIR
    assert r.returncode == 0, r.stderr
    hit = json.loads(r.stdout)[0]
    assert hit["path"] == "backup.md" and hit["bm25_rank"] == 1 and hit["vector_rank"] == 1
    assert hit["vector_distance"] is not None and hit["bm25_score"] > 0 and hit["passage_id"] == hit["chunk_id"] is not None
    r = cli("search", "restic", "--mode", "vector", db=db_path, python_flags=["-S"])
    assert r.returncode == 1 and r.stderr.startswith("pms: error: vector search is unavailable") and r.stderr.count("\n") == 1


@pytest.mark.slow
def test_index_size_per_passage(hybrid_kb, tmp_path):
    root = tmp_path / "n"
    for i in range(120):
        write(root / f"n{i}.md", f"# Note {i}\n\n" + f"Sentence {i} about a subject worth noting. " * 12)
    hybrid_kb.collections.create(root, name="n")
    hybrid_kb.sync()
    hybrid_kb.close()  # its connections closed: SQLite folds the WAL into the file, so the file's size is the index's
    with pms.KnowledgeBase(hybrid_kb.index_path) as kb:
        totals = kb.status(pending=False)
        text = index_rows(kb, "SELECT sum(length(body) + length(title) + length(headings)) FROM chunks")[0][0]
        overhead = (totals["index_bytes"] - text) / totals["passages"]
        # vec0 allocates 1,024 int8 vectors at a time, so a small index pays for the whole first block;
        # the note_names trigram table's five tables take a page each whatever the size.
        assert overhead < 2.5 * 1024 + (1024 * 384 + 5 * 4096) / totals["passages"]
        assert index_rows(kb, "SELECT value FROM meta WHERE key = 'embed_format'") == [("int8",)]


def test_a_worker_threads_connection_never_changes_whether_vectors_are_available(hybrid_vault, monkeypatch):
    """The first connection decides: a later one (a search worker, the GUI's threads) must not flip it."""
    store = hybrid_vault.store  # internal contract: the Store's connections per thread agree on sqlite-vec
    assert store.vec_loaded
    monkeypatch.setattr(pms.store, "sqlite_vec_path", lambda: "/nonexistent/vec0")  # this thread's load will fail
    worker = threading.Thread(target=lambda: store.db.execute("SELECT 1"))
    worker.start()
    worker.join()
    assert store.vec_loaded and store.vec_error is None
    assert hybrid_vault.search_mode() == ("hybrid", "", "", None)


def test_a_hybrid_search_looks_up_each_lists_notes_once_and_checks_vectors_once(hybrid_kb, tmp_path, monkeypatch):
    """Fusion per note starts with every passage already mapped to its note: the
    keyword list's in its own statement (for a note's focus), the vector list's by
    the search's thread while the keyword list runs; nothing is looked up again.
    And KnowledgeBase.search asks vector_status once, not again inside hybrid."""
    notes = {"orchard.md": "# Apple orchard\n\nPicking apples at harvest time in the orchard.\n",
             "pears.md": "# Pear trees\n\nPruning pear trees and cherry trees in the garden in spring.\n",
             "berries.md": "# Berries\n\nGrowing strawberries and raspberries in raised garden beds.\n",
             "plums.md": "# Plum jam\n\nCooking plum jam from the fruit of the garden trees.\n",
             "vines.md": "# Grapevines\n\nTending grapevines and picking grapes for wine.\n",
             "cider.md": "# Cider\n\nPressing cider from orchard fruit in autumn.\n",
             "picking.md": "# Fruit picking\n\nPicking ripe fruit from the orchard trees in autumn.\n",
             "database.md": "# Database migrations\n\nThe schema migration tool runs before every deploy, checks foreign keys, rebuilds "
                            "indexes and logs each table it touched. Releases are named after moons: this one the harvest moon.\n"}
    for name, text in notes.items():
        write(tmp_path / "n" / name, text)
    hybrid_kb.collections.create(tmp_path / "n", name="n")
    assert hybrid_kb.sync().embed_error is None
    # internal contract: which passages' notes are looked up, and how often vector_status runs (no public call counts them)
    retrieval = hybrid_kb.retrieval
    fusion = retrieval.settings.replace(depth=4, steady_k=1)  # shallow lists (4 passages for k=1), so each has passages the other lacks
    monkeypatch.setattr(retrieval, "settings", fusion)
    query = "apple harvest"
    keyword = {cid for cid, _ in retrieval.keyword_stage(retrieval.request(query), 4)}
    vector = {cid for cid, _ in retrieval.vector_stage(retrieval.request(query), 4)}
    assert keyword - vector and vector - keyword, "the lists must differ for this test to mean anything"
    lookups: list[tuple[str, set[int]]] = []
    original = hybrid_kb.store.passage_notes

    def recording(passage_ids):
        passage_ids = list(passage_ids)
        lookups.append((threading.current_thread().name, set(passage_ids)))
        return original(passage_ids)

    monkeypatch.setattr(hybrid_kb.store, "passage_notes", recording)
    statuses = []
    status = retrieval.vector_status
    monkeypatch.setattr(retrieval, "vector_status", lambda version=None: statuses.append(1) or status(version))
    assert hybrid_kb.search(query, k=1)[0].path == "orchard.md"
    assert len(statuses) == 1
    this_thread = threading.current_thread().name
    # The keyword list's notes come with its passages (Store.fts_search); the vector list's are looked up once.
    assert [ids for name, ids in lookups if name != this_thread] == []
    assert [ids for name, ids in lookups if name == this_thread] == [vector]  # never the keyword list's passages again


@pytest.mark.slow
def test_a_partly_embedded_index_ranks_by_what_each_note_has(hybrid_kb, tmp_path, pms_main):
    """3 % embedded, as an interrupted or --no-embed sync leaves an index: one sample note synced
    with the model, the 36 others without embedding. In hybrid (auto) search a note without a
    vector is ranked by its keyword and name lists, not below every note that has one: for each
    note's title and each word only one note holds, the first hit is keyword search's first."""
    from conftest import REPO

    source = REPO / "sample-notes"
    files = sorted(source.rglob("*.md"))
    vault = tmp_path / "v"

    def copy(path):
        write(vault / path.relative_to(source), path.read_text(encoding="utf-8"))

    copy(files[0])
    hybrid_kb.collections.create(vault, name="v")
    assert hybrid_kb.sync().embedded
    for path in files[1:]:
        copy(path)
    hybrid_kb.sync(embed=False)
    totals = hybrid_kb.status(pending=False)
    assert 0 < totals["embedded"] <= 0.05 * totals["passages"] and hybrid_kb.search_mode().mode == "hybrid"
    holders: dict[str, set] = {}
    for path in files:
        for word in set(re.findall(r"[a-z]{6,}", path.read_text(encoding="utf-8").lower())):
            holders.setdefault(word, set()).add(path)
    rare = sorted(word for word, paths in holders.items() if len(paths) == 1)[::3]
    queries = [hit.title for hit in hybrid_kb.search("", k=100, path="**")] + rare
    assert len(queries) > 60

    def firsts(kb):
        out = {}
        for query in queries:
            keyword = [h.path for h in kb.search(query, mode="keyword")][:1]
            if keyword:
                out[query] = ([h.path for h in kb.search(query, mode="hybrid")][:1], keyword)
        return out

    # The keyword search compared is hybrid's own keyword list: without the typo fallback, which
    # only a keyword search adds (hybrid's ranking is the shipped one: that knob is keyword mode's).
    with ranked(hybrid_kb, typo_min_letters=0) as shipped_kb:
        shipped = firsts(shipped_kb)
    assert [q for q, (hybrid, keyword) in shipped.items() if hybrid != keyword] == []
    with ranked(hybrid_kb, typo_min_letters=0, unembedded_vote=0.0) as rule_off:
        without = firsts(rule_off)
    assert [q for q, (hybrid, keyword) in without.items() if hybrid != keyword], "the rule is what makes them agree"
    # The mode line says how much is embedded: the result carries the share, the CLI says it.
    assert 0 < hybrid_kb.search(rare[0]).embedded == pytest.approx(totals["embedded"] / totals["passages"], abs=1e-4)
    assert hybrid_kb.search(rare[0], mode="keyword").embedded is None
    out = pms_main("search", rare[0], db=hybrid_kb.index_path)
    assert out.returncode == 0 and "partly embedded index" in out.stderr and "% of passages have vectors" in out.stderr


def test_the_embedded_share_follows_each_sync_of_the_same_knowledge_base(hybrid_kb, tmp_path):
    """The passage counts behind SearchResult.embedded are kept between searches (a search's own
    temp writes do not count as a change) and counted again after this process's sync."""
    vault = tmp_path / "v"
    write(vault / "a.md", "# Tent\n\nA tent for the hiking trip.\n")
    hybrid_kb.collections.create(vault, name="v")
    hybrid_kb.sync()
    assert hybrid_kb.search("hiking tent", mode="hybrid").embedded is None  # wholly embedded
    for i in range(3):
        write(vault / f"n{i}.md", f"# Stove {i}\n\nA stove for the hiking trip, number {i}.\n")
    hybrid_kb.sync(embed=False)
    assert hybrid_kb.search("hiking stove", mode="hybrid").embedded == 0.25
    assert hybrid_kb.search("hiking stove", mode="hybrid").embedded == 0.25  # kept, not stale
    hybrid_kb.sync()
    assert hybrid_kb.search("hiking stove", mode="hybrid").embedded is None
