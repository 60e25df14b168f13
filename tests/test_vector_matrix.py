"""The in-memory vector index (VectorMatrix): the same answers as sqlite-vec, never stale;
the query's similarity to any passage; one snippet query per search."""
import random

import pytest

import pms
from conftest import run_cli, write

QUERIES = ["replicate documents onto my cellphone", "memory safety rules", "copies kept offsite", "what to cook tonight",
           "engine oil", "syncthing conflict"]


@pytest.fixture
def two_collections(hybrid_kb, notes, tmp_path):
    """The shared vault plus a second collection with tags and folders, embedded by the real model."""
    other = tmp_path / "other"
    for i in range(12):
        tag = "food" if i % 2 else "car"
        write(other / ("kitchen" if i % 3 else "garage") / f"n{i}.md",
              f"---\ntags: [{tag}]\n---\n# Note {i}\n\nA tomato soup recipe with basil, variant {i}.\n\n"
              f"## Service\n\nChange the engine oil every {i + 5},000 km.\n")
    hybrid_kb.collections.create(notes, name="notes")
    hybrid_kb.collections.create(other, name="other")
    report = hybrid_kb.sync()
    assert report.embed_error is None and report.embedded == hybrid_kb.status(pending=False)["passages"]
    return hybrid_kb


def both_ways(store, fn):
    """fn(vectors) answered from memory (a VectorMemory), then by the Store's SQL alone."""
    memory = pms.vector_memory.VectorMemory(store, after=0)
    in_memory = fn(memory)
    assert memory.matrix is not None  # the matrix really answered
    return in_memory, fn(store)


def searched_both_ways(warm, cold, fn):
    """fn(kb) on ``warm`` (keep_vectors_in_memory: its second search on answers from memory),
    then on ``cold`` (sqlite-vec alone); two KnowledgeBases on the same index."""
    fn(warm)
    in_memory = fn(warm)
    assert warm.status(pending=False)["vectors_in_memory_bytes"] > 0
    assert cold.status(pending=False)["vectors_in_memory_bytes"] == 0
    return in_memory, fn(cold)


def test_knn_in_memory_equals_sqlite_vec_with_every_filter(two_collections):
    kb, store = two_collections, two_collections.store  # internal contract: VectorMemory against the Store's KNN
    other = [store.require_collection("other").id]
    filters = [(None, None), (other, None), (None, pms.NoteFilter.build(tags=["food"])),
               (other, pms.NoteFilter.build(path="garage")), (None, pms.NoteFilter.build(tags=["nothing-has-this"]))]
    for query in QUERIES:
        blob = kb.retrieval.query_vector(query)
        for ids, note_filter in filters:
            for limit in (1, 5, 500):
                memory, sqlite_vec = both_ways(store, lambda v: v.vector_search(blob, limit, ids, note_filter))
                assert memory == sqlite_vec  # same ids, same order, the same float distances
        with pms.KnowledgeBase(kb.index_path) as warm:  # the same model (PMS_MODEL_DIR), the vectors kept in memory
            warm.keep_vectors_in_memory()
            warm.load_embedder()  # its queries embedded as kb's are, by the optimised session (not a one-shot's)
            for mode in ("vector", "hybrid"):
                memory, sqlite_vec = searched_both_ways(warm, kb, lambda on: on.search(query, k=8, mode=mode, tags=["food"]))
                assert [(h.path, h.passage_id, h.score) for h in memory] == [(h.path, h.passage_id, h.score) for h in sqlite_vec]


@pytest.fixture
def synthetic_vectors(db_path, tmp_path):
    """1,300 passages (two of sqlite-vec's blocks of 1,024) with random vectors written
    through the Store into a real vec0 table, some of them equal (ties), some deleted."""
    with pms.KnowledgeBase(db_path) as kb:  # the model is never loaded
        if not kb.store.vec_loaded:  # internal contract: the Store unit-tested below needs sqlite-vec
            pytest.skip(f"sqlite-vec unavailable: {kb.store.vec_error}")
        yield from _synthetic(kb, tmp_path)


def _synthetic(kb, tmp_path):
    root = tmp_path / "many"
    for i in range(1300):
        write(root / f"p{i:04}.md", f"# Passage {i}\n\nText {i}.\n")
    kb.collections.create(root, name="many")
    kb.sync(embed=False)
    store = kb.store  # internal contract: VectorMemory against the Store's KNN, on vectors written directly
    store.ensure_vector_table("synthetic", 16)
    rng = random.Random(7)
    passages = [cid for (cid,) in store.db.execute("SELECT id FROM chunks ORDER BY id")]
    vectors = {cid: bytes(rng.randrange(256) for _ in range(16)) for cid in passages}
    for cid in passages[::37]:  # equal vectors, stored in both blocks: equal distances
        vectors[cid] = vectors[passages[5]]
    collection = store.require_collection("many").id
    store.write_vectors([(cid, collection, blob) for cid, blob in vectors.items()])
    for cid in passages[10:20] + passages[1100:1105]:  # holes in the blocks' validity bitmaps
        store.db.execute("DELETE FROM chunk_vectors WHERE chunk_id = ?", (cid,))
    store._vectors_changed()
    store.write_vectors([(passages[12], collection, vectors[passages[5]])])  # re-stored: lands in a new slot
    yield store, vectors


def test_ties_blocks_and_deleted_vectors_come_back_as_sqlite_vec_gives_them(synthetic_vectors):
    store, vectors = synthetic_vectors
    some = list(vectors)[:400]
    for query in [vectors[list(vectors)[5]], bytes(range(16)), bytes([200] * 16)]:
        for limit in (3, 40, 100, 5000):  # 5000: more than there are, and over sqlite-vec's cap of 4096
            memory, sqlite_vec = both_ways(store, lambda v: v.vector_search(query, limit, None))
            assert memory == sqlite_vec
        memory, sqlite_vec = both_ways(store, lambda v: v.vector_distances(query, some + [10**9]))
        assert memory == sqlite_vec and 10**9 not in memory and len(memory) == len(some) - 9  # 9 of them were deleted
    matrix = pms.vector_memory.VectorMatrix(store.vectors_version(), *store.read_vectors())
    assert len(matrix) == 1300 - 15 + 1 and matrix.tie_order[0] != 0  # read from vec0's blocks


def test_the_matrix_is_read_once_and_again_only_when_vectors_change(synthetic_vectors):
    store, vectors = synthetic_vectors
    memory = pms.vector_memory.VectorMemory(store)
    query = bytes(range(16))
    memory.vector_search(query, 5, None)
    assert memory.matrix is None  # the first search of a process stays in sqlite-vec
    memory.vector_search(query, 5, None)
    first = memory.matrix
    assert first is not None
    memory.vector_search(query, 5, None)
    assert memory.matrix is first  # warm: not read again
    collection = store.require_collection("many").id
    cid = next(iter(vectors))
    store.write_vectors([(cid, collection, query)])  # any write counts (here: this process, this thread)
    assert memory.vector_search(query, 1, None)[0][0] == cid
    assert memory.matrix is None  # the changed vectors were answered by sqlite-vec


def test_a_one_shot_search_never_reads_every_vector(two_collections, db_path):
    """Without keep_vectors_in_memory (the CLI), however many searches: no vectors in memory."""
    with pms.KnowledgeBase(db_path) as cold:  # the same model: the index's, PMS_MODEL_DIR
        for _ in range(3):
            cold.search("tomato soup", mode="hybrid")
        assert cold.status(pending=False)["vectors_in_memory_bytes"] == 0
        cold.keep_vectors_in_memory()
        for _ in range(2):
            cold.search("tomato soup", mode="hybrid")
        assert cold.status(pending=False)["vectors_in_memory_bytes"] > 0


def test_a_sync_by_another_process_is_seen_by_a_warm_index(two_collections, db_path, notes, monkeypatch):
    kb = two_collections
    kb.keep_vectors_in_memory()

    def in_memory() -> bool:
        return kb.status(pending=False)["vectors_in_memory_bytes"] > 0

    query = "pickled herring with onions"
    for _ in range(3):
        kb.search(query, mode="vector")
    assert in_memory()
    write(notes / "herring.md", "# Pickled herring\n\nHerring with onions in vinegar.\n")
    (notes / "backup.md").unlink()
    sync = run_cli("sync", db=db_path)  # another process; the index names its model folder
    assert sync.returncode == 0 and "1 passages embedded" in sync.stdout, sync.stderr
    for _ in range(3):  # just changed (a sync may still be adding vectors): sqlite-vec answers
        hits = kb.search(query, mode="vector")
        assert not in_memory()
        assert hits[0].path == "herring.md" and all(h.path != "backup.md" for h in hits)
    # internal contract: VectorMemory.SETTLE_S, how long vectors must stay unchanged (no setting): as if they had
    monkeypatch.setattr(pms.vector_memory.VectorMemory, "SETTLE_S", 0)
    hits = kb.search(query, mode="vector")  # read into memory again
    assert in_memory() and hits[0].path == "herring.md"


def test_a_huge_index_stays_in_sqlite_vec(synthetic_vectors):
    store, _ = synthetic_vectors
    memory = pms.vector_memory.VectorMemory(store, max_mb=0.01, after=0)  # 10 kB: less than 1,286 x 16 bytes
    assert memory.vector_search(bytes(range(16)), 3, None) and memory.matrix is None


def test_approximate_search_agrees_with_exact_search(synthetic_vectors):
    """The HNSW graph (usearch) finds what the exact scan finds on a small set (recall@10 over 12
    queries; HNSW is approximate and its multi-threaded build not deterministic), with exact distances."""
    pytest.importorskip("usearch", reason="usearch (the optional ANN extra) is not installed")
    store, _ = synthetic_vectors
    exact, approximate = pms.vector_memory.VectorMemory(store, after=0), pms.vector_memory.VectorMemory(store, after=0, ann=True)
    rng = random.Random(3)
    from collections import Counter

    shared = 0
    for query in [bytes(rng.randrange(256) for _ in range(16)) for _ in range(12)]:
        found, wanted = approximate.vector_search(query, 10, None), exact.vector_search(query, 10, None)
        # Compared by distance: equal vectors are stored 36 times, so ids of a tie may differ.
        found_d, wanted_d = Counter(round(d, 5) for _, d in found), Counter(round(d, 5) for _, d in wanted)
        shared += sum((found_d & wanted_d).values())
        assert sorted(d for _, d in found) == [d for _, d in found]  # exact distances, nearest first
    assert shared / 120 >= 0.9  # recall@10
    assert approximate.nbytes > exact.nbytes
    other = [store.require_collection("many").id]
    assert approximate.vector_search(bytes(range(16)), 5, other) == exact.vector_search(bytes(range(16)), 5, other)


def test_snippets_of_a_search_come_from_one_query_and_match_fts5s_own(vault):
    store = vault.store  # internal contract: the Store's snippet query against FTS5's own
    bodies = dict(store.db.execute("SELECT id, body FROM chunks"))
    for query in ["sync", "syncthing conflict copy", '"three copies"', "own*", "rust -python", "restic OR phone"]:
        match = pms.parse_query(query).match_any()
        expected = {cid: raw for cid in bodies if (raw := store.fts_snippet(match, cid)) is not None}
        assert expected and store.fts_snippets(match, bodies) == expected
    store._snippet_table(store.db)
    store._local.snippet_columns = ["title", "headings"]  # a copy without the body: the slow way answers alike
    assert store.fts_snippets(match, bodies) == {cid: pms.passage_display_text(raw) for cid, raw in expected.items()}
    store._local.snippet_columns = None
    hit = vault.search("syncthing conflict", mode="keyword")[0]
    match = pms.parse_query("syncthing conflict").match_any()
    # cut from the passage as a reader sees it, without the heading line its row shows above it
    shown = {hit.passage_id: pms.query.without_heading_line(pms.passage_display_text(bodies[hit.passage_id]), hit.heading_path)}
    assert (hit.snippet, hit.marks) == pms.query.snippet_spans(store.fts_snippets(match, shown)[hit.passage_id])
    assert "Syncthing" in [hit.snippet[s:e] for s, e in hit.marks]


def test_memory_use_is_reported_and_can_be_refused(two_collections, db_path):
    kb = two_collections
    kb.keep_vectors_in_memory()
    passages = kb.status(pending=False)["embedded"]
    for _ in range(2):
        warm = kb.search("tomato soup", mode="vector")
    assert kb.status(pending=False)["vectors_in_memory_bytes"] >= passages * 384  # int8, 384 dimensions
    with pms.KnowledgeBase(db_path, vector_memory_mb=0) as cold:  # the same model: the index's, PMS_MODEL_DIR
        for _ in range(3):
            hits = cold.search("tomato soup", mode="vector")
        assert cold.status(pending=False)["vectors_in_memory_bytes"] == 0
        assert [(h.passage_id, h.score) for h in hits] == [(h.passage_id, h.score) for h in warm]
