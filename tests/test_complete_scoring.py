"""Hybrid search re-scores the fusion's top notes on both signals (RankingSettings.complete_depth):
each note's best BM25 even when the keyword list did not reach it, and its cosine to the
query moved towards the first fusion's top notes (pseudo-relevance feedback). Real model."""
from __future__ import annotations

import pytest

from conftest import ranked, write

QUERY = "how to water houseplants"


@pytest.fixture
def plant_vault(hybrid_kb, tmp_path):
    """Six short water bills that repeat "water" (BM25's favourites) and one long note
    on caring for indoor plants that says "water" once (the nearest by meaning)."""
    root = tmp_path / "vault"
    for i in range(6):
        write(root / f"bill{i}.md", f"# Water bill {i}\n\nThe water bill: water used, water paid, water meter {i}.\n")
    write(root / "plants.md", "# Caring for indoor plants\n\n" + (
        "Potted ferns, a monstera and succulents live on the windowsill. Give them water once a week, less in winter; "
        "let the soil dry between waterings, turn the pots towards the light, feed them in spring and repot when "
        "roots show through the drainage holes. ") * 3 + "\n")
    write(root / "orchids.md", "# Orchids\n\nMy phalaenopsis blooms twice a year on the east window; mist the aerial roots.\n")
    hybrid_kb.collections.create(root, name="vault")
    assert hybrid_kb.sync().embed_error is None
    return hybrid_kb


def test_the_lists_as_the_fixture_intends(plant_vault):
    keyword = [h.path for h in plant_vault.search(QUERY, k=10, mode="keyword")]
    assert keyword[-1] == "plants.md" and len(keyword) == 7  # last by BM25: one "water" in a long passage
    assert plant_vault.search(QUERY, k=1, mode="vector")[0].path == "plants.md"


def test_a_note_the_keyword_list_did_not_reach_still_gets_its_bm25(plant_vault):
    # Lists read 4 passages deep (k=1, ranked as for 1): plants.md, keyword #7, is in the vector list only.
    with ranked(plant_vault, depth=1, steady_k=1, feedback_weight=0.0) as no_feedback:
        hit = no_feedback.search(QUERY, k=1, mode="hybrid")[0]
    assert hit.path == "plants.md" and hit.vector_rank == 1 and hit.bm25_rank is None  # ranks: the lists it came from
    # 0.5 x cosine / best (it is the best: 0.5) + 0.5 x its own BM25 / the best BM25 (> 0: counted though unlisted)
    assert 0.5 < hit.score < 1.0
    assert "then the top 20 notes re-scored from all their passages: 0.5 x BM25 / best + 0.5 x cosine / best" in hit.fusion
    with ranked(plant_vault, depth=1, steady_k=1, feedback_weight=0.0, complete_depth=0) as rrf:
        rrf_only = rrf.search(QUERY, k=1, mode="hybrid")[0]
    assert rrf_only.score < 0.05 and "re-scored" not in rrf_only.fusion  # an RRF score: the vector vote alone


def test_feedback_moves_the_query_towards_the_first_fusions_top_notes(plant_vault):
    with ranked(plant_vault, feedback_weight=0.0) as no_feedback:
        without = no_feedback.search(QUERY, k=8, mode="hybrid")
    assert without[0].path == "plants.md" and "moved towards" not in without[0].fusion
    # RRF's top note is a water bill (keyword x2): the query moves towards it, and so do the cosines.
    moved = plant_vault.search(QUERY, k=8, mode="hybrid")
    assert moved[0].path.startswith("bill") and [h.path for h in moved].index("plants.md") > 0
    assert "moved towards the passages nearest it of the top note (x0.5)" in moved[0].fusion


def test_passages_and_keyword_search_keep_plain_fusion(plant_vault):
    assert all("re-scored" not in h.fusion for h in plant_vault.search(QUERY, k=5, passages=True))
    assert all("re-scored" not in (h.fusion or "") for h in plant_vault.search(QUERY, k=5, mode="keyword"))
