"""Static (Model2Vec) embedding models as a first-class choice (issue 27): a local
folder and a fastembed-cached potion model, in the CLI, the Python API, MCP and the
app, with the test model scripts/make_static_model.py distils from MiniLM."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_cli

import pms

np = pytest.importorskip("numpy")

MEANING_QUERY = "replicate documents onto my cellphone"  # sync.md, sharing almost no word with it


def vector_of(blob: bytes):
    return np.frombuffer(blob, dtype=np.int8).astype(np.float32)


@pytest.fixture
def static_index(static_model_dir, notes, tmp_path) -> Path:
    """An index synced by the CLI with PMS_MODEL_DIR set to the static test model."""
    db = tmp_path / "static.sqlite"
    r = run_cli("collection", "add", notes, "--name", "notes", db=db, env={"PMS_MODEL_DIR": str(static_model_dir)})
    assert r.returncode == 0 and "keyword-only" not in r.stderr, r.stderr
    return db


def test_the_test_model_is_in_the_format_fastembed_loads_and_pools_alike(static_model_dir):
    """fastembed's own static model class reads the folder (as a potion model) and gives
    the vectors PMS computes, for text with unknown word pieces and for empty text."""
    from fastembed import TextEmbedding

    theirs = TextEmbedding("minishlab/potion-base-8M", specific_model_path=str(static_model_dir), local_files_only=True)
    texts = ["Syncing notes between laptop and phone", "Übergrößenträger 日本語 🙂", ""]
    ours = pms.Embedder(model_dir=static_model_dir)
    assert ours.model_name == "pms-test/minilm-static-256" and ours.load() is not None and ours.dim == 256
    # The index keeps unit vectors as int8 (x 127, rounded): fastembed's, stored the same way, are PMS's.
    assert [vector_of(v).tolist() for v in ours.embed_stream(texts)] == \
        [np.clip(np.round(v / (np.linalg.norm(v) or 1) * 127), -127, 127).tolist() for v in theirs.embed(texts)]
    assert not vector_of(next(ours.embed_stream([""]))).any()  # nothing to pool: a zero vector, not NaN


def test_the_cli_embeds_with_a_static_folder_and_a_new_shell_searches_by_meaning(static_index, static_model_dir):
    info = json.loads(run_cli("status", "--json", db=static_index).stdout)  # no PMS_MODEL* now
    assert info["search_mode"] == "hybrid" and info["model"] == "pms-test/minilm-static-256"
    assert info["embedded"] == info["passages"] > 0
    r = run_cli("search", MEANING_QUERY, "--mode", "vector", "--json", db=static_index)
    assert r.returncode == 0 and r.stderr == ""
    assert json.loads(r.stdout)[0]["path"] == "sync.md"


def test_a_static_query_runs_no_neural_network(static_index):
    """A search with a static model embeds its query by lookup and mean: neither
    fastembed nor ONNX Runtime is imported by the process."""
    code = ("import sys, pms\n"
            f"code = pms.main(['--db', {str(static_index)!r}, 'search', {MEANING_QUERY!r}, '--mode', 'vector', '-n', '1'])\n"
            "print(code, 'onnxruntime' in sys.modules, 'fastembed' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert r.stdout.strip().splitlines()[-1] == "0 False False", r.stdout + r.stderr
    assert "sync.md" in r.stdout


def test_the_python_api_remembers_a_static_model_and_switches_to_and_from_it(notes, tmp_path, static_model_dir,
                                                                              embedding_model_dir):
    db = tmp_path / "api.sqlite"
    with pms.KnowledgeBase(db, model_dir=embedding_model_dir) as kb:
        kb.collections.create(notes, name="notes")
        assert kb.sync().embedded
    with pms.KnowledgeBase(db, model_dir=static_model_dir) as kb:  # another model: re-embed, 384 -> 256 dimensions
        assert kb.search_mode().code == "reembed-needed"
        report = kb.sync(reembed=True)
        assert report.embedded and not report.embed_error
    with pms.KnowledgeBase(db) as kb:  # nothing chosen: the index's model
        assert kb.status(pending=False)["embedding_provider"] == {
            "kind": "fastembed", "model": "pms-test/minilm-static-256", "dir": str(static_model_dir.resolve())}
        hits = kb.search(MEANING_QUERY, mode="vector", k=1)
        assert hits[0].path == "sync.md"
        assert kb.load_embedder()
        # internal contract: the static model's query vector is the same each time (no public call returns one)
        assert kb.embedder.embed_query("cellphone") == kb.embedder.embed_query("cellphone")
    with pms.KnowledgeBase(db, model_dir=embedding_model_dir) as kb:  # and back to the transformer
        assert kb.sync(reembed=True).embedded
        assert kb.status(pending=False)["model"] == (embedding_model_dir / "pms-model.txt").read_text().strip()


def fastembed_cache(home: Path, repo: str, files: Path) -> None:
    """Put ``files`` where fastembed keeps a downloaded Hugging Face model (PMS_HOME/models),
    as a download would have (no download is possible here)."""
    folder = home / "models" / f"models--{repo.replace('/', '--')}"
    commit = "0" * 40
    snapshot = folder / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        shutil.copyfile(files / name, snapshot / name)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(commit)


def test_a_potion_model_by_name_goes_through_fastembed(notes, tmp_path, static_model_dir, isolated_pms_env, monkeypatch):
    """PMS_MODEL=minishlab/potion-base-8M: fastembed finds the files (cached, as after its
    one download) and PMS embeds and searches with them, remembered like any model."""
    fastembed_cache(isolated_pms_env, "minishlab/potion-base-8M", static_model_dir)
    db = tmp_path / "potion.sqlite"
    r = run_cli("collection", "add", notes, "--name", "notes", db=db, env={"PMS_MODEL": "minishlab/potion-base-8M"})
    assert r.returncode == 0 and "keyword-only" not in r.stderr, r.stderr
    info = json.loads(run_cli("status", "--json", db=db).stdout)
    assert info["model"] == "minishlab/potion-base-8M" and info["embedded"] == info["passages"]
    r = run_cli("search", MEANING_QUERY, "--mode", "vector", "--json", db=db)
    assert r.returncode == 0 and json.loads(r.stdout)[0]["path"] == "sync.md", r.stderr


def test_a_folder_with_a_transformers_safetensors_is_not_taken_for_a_static_model(tmp_path):
    """A transformer's model.safetensors has no ``embeddings`` table: not a static model."""
    tensor = np.zeros((4, 3), dtype=np.float32)
    header = json.dumps({"embeddings.word_embeddings.weight": {"dtype": "F32", "shape": [4, 3],
                                                               "data_offsets": [0, tensor.nbytes]}}).encode()
    (tmp_path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + tensor.tobytes())
    assert pms.embedding.static_model_file(tmp_path) is None
    (tmp_path / "model.safetensors").write_bytes(b"\xff" * 64)  # not a safetensors file at all
    assert pms.embedding.static_model_file(tmp_path) is None


def test_mcp_searches_by_meaning_with_a_static_model(static_index, tmp_path):
    pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install -r requirements-dev.txt)")
    anyio = pytest.importorskip("anyio")
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=[str(REPO / "pms.py"), "--db", str(static_index), "mcp"],
                                   env={"PMS_HOME": str(tmp_path / "home")})  # no model chosen: the index's

    async def main():
        async with Client(params) as client:
            found = await client.call_tool("search", {"query": MEANING_QUERY, "k": 1, "mode": "vector"})
            status = await client.call_tool("status", {})
            return found, status

    found, status = anyio.run(main)
    assert not found.is_error, found.content
    assert found.structured_content["hits"][0]["path"].endswith("/sync.md")  # MCP paths name the collection
    assert status.structured_content["model"] == "pms-test/minilm-static-256"


def test_hybrid_fuses_a_static_vector_list_with_its_own_weights(static_index, embedded_minilm_index):
    """A static model's weaker list gets RankingSettings' static_* knobs; a transformer's the usual ones."""
    settings = pms.RankingSettings()
    # The fusion line tells a static list from a transformer's only while their knobs differ.
    assert (settings.static_complete_keyword_share, settings.static_vector_weight) != (settings.complete_keyword_share, settings.vector_weight)
    for db, static in ((static_index, True), (embedded_minilm_index, False)):
        with pms.KnowledgeBase(db) as kb:
            hit = kb.search("syncthing conflict copy", mode="hybrid", k=1)[0]
            share = settings.static_complete_keyword_share if static else settings.complete_keyword_share
            vote = settings.static_vector_weight if static else settings.vector_weight
            assert f"{share:g} x BM25" in hit.fusion and f"{1 - share:g} x cosine" in hit.fusion, hit.fusion
            assert f"vector x{vote:g}," in hit.fusion, hit.fusion


@pytest.fixture
def embedded_minilm_index(embedding_model_dir, notes, tmp_path) -> Path:
    db = tmp_path / "minilm.sqlite"
    r = run_cli("collection", "add", notes, "--name", "notes", db=db, env={"PMS_MODEL_DIR": str(embedding_model_dir)})
    assert r.returncode == 0, r.stderr
    return db


def test_a_static_folder_chosen_at_another_path_than_the_index_remembers_still_answers(static_index, static_model_dir, tmp_path):
    copy = shutil.copytree(static_model_dir, tmp_path / "moved-static")
    with pms.KnowledgeBase(static_index, model_dir=copy) as kb:
        # internal contract: known from the folder, before anything loads: hybrid weighs its list as static
        assert kb.embedder.static
        assert kb.search(MEANING_QUERY, mode="vector", k=1)[0].path == "sync.md"


def test_a_broken_static_folder_is_a_one_line_error_that_loses_nothing(static_index, static_model_dir, tmp_path):
    broken = shutil.copytree(static_model_dir, tmp_path / "broken-static")
    (broken / "tokenizer.json").write_text("{not json", encoding="utf-8")
    r = run_cli("search", MEANING_QUERY, "--mode", "vector", db=static_index, env={"PMS_MODEL_DIR": str(broken)})
    assert r.returncode != 0 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "cannot load static model" in r.stderr and "broken-static" in r.stderr
    r = run_cli("search", MEANING_QUERY, "--mode", "vector", "--json", db=static_index)  # the index is untouched
    assert r.returncode == 0 and json.loads(r.stdout)[0]["path"] == "sync.md"
