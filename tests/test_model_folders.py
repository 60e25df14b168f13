"""Model folders (issue 36, items 4, 5 and 11): any folder with an ONNX model and its tokenizer
is recognised by what it holds or refused with the exact fix; the index keeps the folder its
vectors came from, never rewritten by a front end that has the same model elsewhere, and a
front end that cannot find it says so in status and in the mode line; a mismatch names the
setting that chose the model."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import run_cli, write

import pms

np = pytest.importorskip("numpy")

MEANING_QUERY = "replicate documents onto my cellphone"  # sync.md, sharing almost no word with it
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "config.json")


def hugging_face_folder(source: Path, target: Path, pooling: str | None = "mean", onnx: str = "onnx/model.onnx") -> Path:
    """The MiniLM test model laid out as a Hugging Face repository is: the tokenizer files, the ONNX
    model in ``onnx/``, sentence-transformers' modules.json and 1_Pooling/config.json; no pms-model.txt."""
    target.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copy2(source / name, target / name)
    (target / onnx).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source / "model.onnx", target / onnx)
    if pooling:
        write(target / "modules.json", json.dumps([
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
        write(target / "1_Pooling" / "config.json", json.dumps({
            "word_embedding_dimension": 384, "pooling_mode_cls_token": pooling == "cls",
            "pooling_mode_mean_tokens": pooling == "mean", "pooling_mode_max_tokens": False}))
    return target


def vector(blob: bytes):
    return np.frombuffer(blob, dtype=np.int8).astype(np.float32)


# -- 4: a model folder is recognised by what it holds ----------------------------------------------
def test_a_hugging_face_model_folder_without_a_name_file_embeds_like_the_named_one(embedding_model_dir, notes, tmp_path):
    folder = hugging_face_folder(embedding_model_dir, tmp_path / "all-MiniLM-L6-v2")
    db = tmp_path / "i.sqlite"
    added = run_cli("collection", "add", notes, "--name", "notes", db=db, env={"PMS_MODEL_DIR": str(folder)})
    assert added.returncode == 0 and "keyword-only" not in added.stderr, added.stderr
    info = json.loads(run_cli("status", "--json", db=db).stdout)  # a new shell: no setting
    assert info["search_mode"] == "hybrid" and info["model"] == "all-MiniLM-L6-v2" and info["embedded"] == info["passages"]
    found = run_cli("search", MEANING_QUERY, "--mode", "vector", "--json", db=db)
    assert found.returncode == 0 and json.loads(found.stdout)[0]["path"] == "sync.md", found.stderr
    named, unnamed = pms.Embedder(model_dir=embedding_model_dir), pms.Embedder(model_dir=folder)
    for text in (MEANING_QUERY, "Rust ownership and borrowing"):
        a, b = vector(named.embed_passages([text])[0]), vector(unnamed.embed_passages([text])[0])
        assert a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) > 0.999
        assert unnamed.embed_query(text) == named.embed_query(text)


def test_a_model_folder_in_the_hugging_face_cache_is_named_after_its_repository(embedding_model_dir, tmp_path):
    snapshot = tmp_path / "hub" / "models--sentence-transformers--all-MiniLM-L6-v2" / "snapshots" / "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"
    hugging_face_folder(embedding_model_dir, snapshot, onnx="model.onnx")
    embedder = pms.Embedder(model_dir=snapshot)
    assert embedder.model_name == "sentence-transformers/all-MiniLM-L6-v2"
    assert embedder.load() is not None and embedder.dim == 384


def test_a_model_folder_that_cannot_be_used_is_refused_with_the_exact_fix(embedding_model_dir, notes, tmp_path):
    unpooled = hugging_face_folder(embedding_model_dir, tmp_path / "my-model", pooling=None, onnx="model.onnx")
    db = tmp_path / "i.sqlite"
    added = run_cli("collection", "add", notes, "--name", "notes", db=db, env={"PMS_MODEL_DIR": str(unpooled)})
    assert added.returncode == 0  # keyword search works meanwhile
    assert "model_optimized.onnx" not in added.stderr
    assert "1_Pooling/config.json" in added.stderr and "pms-model.txt" in added.stderr, added.stderr
    info = json.loads(run_cli("status", "--json", db=db, env={"PMS_MODEL_DIR": str(unpooled)}).stdout)
    assert info["search_mode"] == "keyword" and "1_Pooling/config.json" in info["search_mode_reason"]
    assert info["search_mode_hint"] != {"command": "", "setting": "PMS_MODEL_DIR", "option": ""}  # that cannot fix it
    empty = tmp_path / "no-onnx"
    for name in TOKENIZER_FILES:
        write(empty / name, (embedding_model_dir / name).read_bytes())
    with pytest.raises(pms.EmbeddingUnavailable, match=r"no-onnx holds no ONNX model \(model\.onnx"):
        pms.Embedder(model_dir=empty).load()
    (unpooled / "pms-model.txt").write_text("sentence-transformers/all-MiniLM-L6-v2\n")  # the fix the message gives
    assert pms.Embedder(model_dir=unpooled).load() is not None


# -- 5: the index keeps where its model came from ------------------------------------------------
def test_another_copy_of_the_model_never_rewrites_the_index_and_a_missing_folder_is_said(embedding_model_dir, notes, tmp_path):
    first, second = tmp_path / "models" / "first", tmp_path / "app" / "model"
    shutil.copytree(embedding_model_dir, first)
    shutil.copytree(embedding_model_dir, second)
    db = tmp_path / "i.sqlite"
    assert run_cli("collection", "add", notes, "--name", "notes", db=db, env={"PMS_MODEL_DIR": str(first)}).returncode == 0
    write(notes / "later.md", "# Later\n\nA note written after the first sync, embedded by the other copy.\n")
    synced = run_cli("sync", db=db, env={"PMS_MODEL_DIR": str(second)})  # as the packaged app, with its own copy, does
    assert synced.returncode == 0 and "1 passages embedded" in synced.stdout, synced.stdout + synced.stderr
    with pms.KnowledgeBase(db) as kb:  # nothing chosen: the folder the index remembers
        assert kb.status(pending=False)["embedding_provider"]["dir"] == str(first.resolve())
    shutil.rmtree(second)  # the app moved or updated
    info = json.loads(run_cli("status", "--json", db=db).stdout)
    assert info["search_mode"] == "hybrid", info["search_mode_reason"]
    shutil.rmtree(first)  # now the index's own folder is gone: status and the mode line say so, and how to fix it
    info = json.loads(run_cli("status", "--json", db=db).stdout)
    assert info["search_mode"] == "keyword" and str(first.resolve()) in info["search_mode_reason"]
    assert info["search_mode_hint"]["setting"] == "PMS_MODEL_DIR"
    found = run_cli("search", MEANING_QUERY, db=db)
    assert found.returncode == 0 and str(first.resolve()) in found.stderr
    moved = tmp_path / "moved"
    shutil.copytree(embedding_model_dir, moved)  # the fix: the folder where it is now
    assert json.loads(run_cli("status", "--json", db=db, env={"PMS_MODEL_DIR": str(moved)}).stdout)["search_mode"] == "hybrid"
    assert run_cli("sync", db=db, env={"PMS_MODEL_DIR": str(moved)}).returncode == 0
    assert json.loads(run_cli("status", "--json", db=db).stdout)["search_mode"] == "hybrid"  # remembered from now on


# -- 11: the mismatch names what chose the other model ----------------------------------------------
def test_a_model_mismatch_names_the_setting_that_chose_the_other_model(embedding_model_dir, notes, tmp_path):
    db = tmp_path / "i.sqlite"
    assert run_cli("collection", "add", notes, "--name", "notes", db=db, env={"PMS_MODEL_DIR": str(embedding_model_dir)}).returncode == 0
    by_flags = run_cli("--embed-url", "http://127.0.0.1:9", "--embed-model", "nomic-embed-text", "status", db=db)
    assert "--embed-model" in by_flags.stdout and "PMS_MODEL" not in by_flags.stdout, by_flags.stdout
    by_env = run_cli("status", db=db, env={"PMS_MODEL": "BAAI/bge-small-en-v1.5"})
    assert "unset PMS_MODEL" in by_env.stdout and "PMS_MODEL_DIR" not in by_env.stdout, by_env.stdout
    with pms.KnowledgeBase(db, model="BAAI/bge-small-en-v1.5") as kb:
        assert "the model argument" in kb.search_mode().reason
