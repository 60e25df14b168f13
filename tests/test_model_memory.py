"""The index remembers the embedding model it was made with (issue 13, item 1).

What the index remembers is read as any process sees it (status, the CLI). Several tests read
``kb.embedder``: what they check is an internal contract no public call shows, that a search
embeds its query without loading the whole model (the query encoder)."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pms
from conftest import REPO, index_write, run_cli

np = pytest.importorskip("numpy")


def synced_with(model_dir, notes, db):
    """``db``, the notes synced into it with PMS_MODEL_DIR set, as a user offline would do."""
    r = run_cli("collection", "add", notes, "--name", "notes", db=db, env={"PMS_MODEL_DIR": str(model_dir)})
    assert r.returncode == 0 and "keyword-only" not in r.stderr, r.stderr
    return db


@pytest.fixture
def embedded_index(embedding_model_dir, notes, tmp_path):
    """An index embedded by the offline MiniLM (it quantizes as it runs, as fastembed's int8 models do)."""
    return synced_with(embedding_model_dir, notes, tmp_path / "i.sqlite")


def test_a_new_shell_searches_with_the_model_the_index_was_embedded_with(embedded_index, embedding_model_dir):
    r = run_cli("status", "--json", db=embedded_index)  # no PMS_MODEL* now
    info = json.loads(r.stdout)
    assert info["search_mode"] == "hybrid", info["search_mode_reason"]
    r = run_cli("search", "replicate documents onto my cellphone", "--json", db=embedded_index)
    assert r.returncode == 0 and r.stderr == ""
    hits = json.loads(r.stdout)
    assert hits[0]["path"] == "sync.md" and hits[0]["vector_rank"] == 1
    with pms.KnowledgeBase(embedded_index) as kb:  # nothing chosen in this process either: the index's model and folder
        assert kb.status(pending=False)["embedding_provider"] == {
            "kind": "fastembed", "model": (embedding_model_dir / "pms-model.txt").read_text().strip(),
            "dir": str(embedding_model_dir.resolve())}


def test_a_remembered_folder_that_is_gone_is_named(embedded_index, tmp_path, embedding_model_dir):
    with pms.KnowledgeBase(embedded_index) as kb:  # the index names a folder that is no longer there
        index_write(kb, "UPDATE meta SET value = '%s' WHERE key = 'embed_model_dir'" % (tmp_path / "moved-away"))
    r = run_cli("search", "cellphone", db=embedded_index)
    assert r.returncode == 0
    assert "moved-away" in r.stderr and "no longer exists" in r.stderr and r.stderr.count("\n") == 1


def test_an_explicit_other_model_gives_advice_that_does_not_loop(embedded_index, tmp_path):
    other = {"PMS_MODEL": "BAAI/bge-small-en-v1.5"}  # not downloaded, and there is no network here
    r = run_cli("status", db=embedded_index, env=other)
    assert "unset PMS_MODEL" in r.stdout and "--reembed" in r.stdout
    # Following the advice to switch, without the model at hand, fails and says why ...
    r = run_cli("sync", "--reembed", db=embedded_index, env={"PMS_MODEL_DIR": str(tmp_path / "no-such-model")})
    assert r.returncode == 1 and "cannot re-embed" in r.stderr and "no-such-model" in r.stderr
    # ... and leaves the index as it was: still hybrid with the remembered model.
    assert json.loads(run_cli("status", "--json", db=embedded_index).stdout)["search_mode"] == "hybrid"


def test_a_model_that_cannot_be_downloaded_is_told_with_its_fix_once(notes, tmp_path):
    env = {"PMS_MODEL": "BAAI/bge-small-en-v1.5", "PMS_MODEL_DIR": ""}  # not downloaded, and there is no network here
    db = tmp_path / "offline.sqlite"
    assert run_cli("collection", "add", notes, "--name", "notes", db=db, env=env).returncode == 0
    mode_line = next(line for line in run_cli("status", db=db, env=env).stdout.splitlines() if line.startswith("Search mode:"))
    assert "keyword" in mode_line and "not downloaded" in mode_line
    # The fix, once: the message's own command, not "(set PMS_MODEL_DIR)" again after it; it names the
    # script by its absolute path, so it works from any folder, and says which model it brings.
    assert "export PMS_MODEL_DIR=" in mode_line and mode_line.count("PMS_MODEL_DIR") == 1, mode_line
    script = Path(re.search(r"\$\(python3 ([^)\s]+)\)", mode_line).group(1))
    assert script.is_absolute() and script.is_file() and script.name == "fetch_test_model.py"
    assert "offline English model all-MiniLM-L6-v2" in mode_line


@pytest.mark.stdlib
def test_reembed_without_embedding_packages_fails(notes, tmp_path):
    db = tmp_path / "plain.sqlite"
    assert run_cli("collection", "add", notes, "--name", "notes", db=db, python_flags=["-S"]).returncode == 0
    r = run_cli("sync", "--reembed", db=db, python_flags=["-S"])
    assert r.returncode == 1 and "cannot re-embed" in r.stderr and "setup" in r.stderr


def test_a_search_embeds_its_query_without_fastembed_and_gets_the_same_vector(embedded_index):
    """The one-shot path (QueryEncoder: ONNX Runtime and tokenizers directly) matches fastembed."""
    code = ("import sys, json, pms\n"
            f"kb = pms.KnowledgeBase({str(embedded_index)!r})\n"
            "hits = kb.search('replicate documents onto my cellphone', k=1)\n"
            "print(json.dumps([hits[0].path, hits[0].vector_rank, 'fastembed' in sys.modules]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert json.loads(r.stdout) == ["sync.md", 1, False], r.stderr
    with pms.KnowledgeBase(embedded_index) as kb:  # internal contract: the query encoder's vector against fastembed's
        queries = ["replicate documents onto my cellphone", "rust", "Wie sichere ich meinen Laptop? 3-2-1 " * 40]
        light = [np.frombuffer(kb.embedder.embed_query(q), dtype=np.int8).astype(float) for q in queries]
        assert not kb.embedder.loaded
        model = kb.embedder.load()
        full = [np.frombuffer(pms.embedding._int8_bytes(next(iter(model.embed([q], batch_size=1)))), dtype=np.int8).astype(float)
                for q in queries]
    for a, b in zip(light, full):  # int8 vectors: the offline MiniLM's first query, unfused, rounds a little otherwise
        assert a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) > 0.998  # (0.9990 here)


def test_load_embedder_readies_only_the_query_encoder_and_fastembed_later_does_not_take_queries_over(embedded_index):
    """Warming up (the desktop app, the MCP server) makes the query encoder alone,
    optimised and run once, when the index remembers its model's files: fastembed
    (about 260 MB) waits for a sync with passages to embed. A process that then
    loads fastembed still embeds queries with the one-thread QueryEncoder and gets
    the int8 vector fastembed would give."""
    ort = pytest.importorskip("onnxruntime")
    with pms.KnowledgeBase(embedded_index) as kb:  # internal contract: which encoder is made, and what it embeds
        assert kb.load_embedder() and not kb.embedder.loaded
        assert kb.embedder.query_encoder_made, "load_embedder makes the query encoder, so the first search does not"
        encoder = kb.embedder.query_encoder()
        assert encoder.session.get_session_options().graph_optimization_level != ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        assert encoder.queries == 1  # its warm-up run
        session = encoder.session
        model = kb.embedder.load()  # as a sync does
        for query in ("replicate documents onto my cellphone", "rust"):
            by_fastembed = pms.embedding._int8_bytes(next(iter(model.embed([kb.embedder.query_prefix + query], batch_size=1))))
            assert kb.embedder.embed_query(query) == by_fastembed
        assert encoder.queries == 3 and encoder.session is session  # both went through it, and it was never rebuilt
        kb.embedder.embed_query("caf\udce9 \ud800")  # undecodable input is cleaned first, not a reason to give the encoder up
        assert kb.embedder.query_spec and encoder.queries == 4


@pytest.mark.parametrize("model", ["quantizing", "float"])
def test_the_query_encoder_reads_only_the_query_and_is_optimised_once_warm(model, request, notes, tmp_path):
    """The offline MiniLM's tokenizer.json pads to 128 word pieces: a query must not be padded
    (10x the work); from the second query on the session has ONNX's optimisations (for one short
    query they cost more than they save: 50 ms of a one-shot search), also for a model that
    quantizes as it runs, whose unfused ops round a little otherwise than its passages' fused ones
    (their int8 vectors agree to a cosine of 0.999, as test_a_search_embeds_its_query… checks)."""
    ort = pytest.importorskip("onnxruntime")
    folder = request.getfixturevalue("embedding_model_dir" if model == "quantizing" else "float_model_dir")
    db = synced_with(folder, notes, tmp_path / "i.sqlite")
    unoptimised = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    with pms.KnowledgeBase(db) as kb:  # internal contract: the query encoder's tokenizer and ONNX session
        kb.embedder.embed_query("rust")
        assert kb.embedder.query_encoder_made and not kb.embedder.loaded
        encoder = kb.embedder.query_encoder()
        assert len(encoder.tokenizer.encode("rust").ids) == 3  # [CLS] rust [SEP]
        first = encoder.session
        assert first.get_session_options().graph_optimization_level == unoptimised
        kb.embedder.embed_query("cargo")
        assert encoder.session is not first
        assert encoder.session.get_session_options().graph_optimization_level != unoptimised


def test_a_text_gets_one_vector_whatever_it_is_embedded_with(embedding_model_dir, float_model_dir):
    """The offline MiniLM quantizes its activations as it runs, one scale a call, padding included (as
    fastembed's int8 models, bge-small's among them, do): a text embedded beside a longer one would get
    another vector (cosine 0.99), so such a model embeds one text a call; a float model batches."""
    short = "restic check verifies the repository"
    long = "Ownership is a set of rules that govern how a Rust program manages memory. " * 12
    for folder, batch_size in ((embedding_model_dir, 1), (float_model_dir, pms.EMBED_BATCH_SIZE)):
        embedder = pms.Embedder(model_dir=folder)
        together = embedder.embed_passages([short, long, short])
        assert embedder.batch_size == batch_size
        alone = [embedder.embed_passages([text])[0] for text in (short, long)]
        if batch_size == 1:
            assert together == [alone[0], alone[1], alone[0]]
            # internal contract: embedded side by side on one-thread sessions, the vectors fastembed gives
            by_fastembed = [next(iter(embedder.load().embed([text], batch_size=1))) for text in (short, long)]
            assert alone == [pms.embedding._int8_bytes(vector) for vector in by_fastembed]
        else:  # float: the same vectors but for rounding
            for a, b in zip(together, alone + alone[:1]):
                x, y = np.frombuffer(a, dtype=np.int8).astype(float), np.frombuffer(b, dtype=np.int8).astype(float)
                assert x @ y / (np.linalg.norm(x) * np.linalg.norm(y)) > 0.999
    chosen = pms.Embedder(model_dir=embedding_model_dir, batch_size=8)  # a batch size asked for is kept
    chosen.load()
    assert chosen.batch_size == 8


def test_load_embedder_falls_back_to_fastembed_when_the_remembered_files_are_gone(embedded_index, tmp_path):
    """A query encoder that cannot be made (the model folder the index remembers has
    moved) is no reason to report the model unavailable: fastembed loads, and the
    encoder is then made from the files fastembed found."""
    with pms.KnowledgeBase(embedded_index) as kb:  # internal contract: the query encoder's spec, made from fastembed's files
        assert kb.embedder.query_spec, "the index remembers its model's files"
        kb.embedder.query_spec = {**kb.embedder.query_spec, "dir": str(tmp_path / "moved-away")}
        assert kb.load_embedder() and kb.embedder.loaded
        assert kb.embedder.query_encoder_made and kb.embedder.query_spec["dir"] != str(tmp_path / "moved-away")
        assert kb.search("replicate documents onto my cellphone", k=1, mode="vector")[0].path == "sync.md"


def test_a_model_is_known_to_quantize_as_it_runs_by_its_operators(embedding_model_dir, float_model_dir, tmp_path):
    """internal contract: the look at the ONNX file that chooses one text a call. ONNX Runtime saves an
    optimised graph's quantizing matmuls as DynamicQuantizeMatMul (fastembed's "model_optimized.onnx")."""
    assert pms.embedding.quantizes_per_call(embedding_model_dir / "model.onnx")
    assert not pms.embedding.quantizes_per_call(float_model_dir / "model.onnx")
    fused = tmp_path / "model_optimized.onnx"
    fused.write_bytes(b"\x08\x07" + b"\x22\x15DynamicQuantizeMatMul" * 3)  # node op_type fields, no DynamicQuantizeLinear
    assert pms.embedding.quantizes_per_call(fused)
    (tmp_path / "empty.onnx").touch()
    assert not pms.embedding.quantizes_per_call(tmp_path / "empty.onnx")
    assert not pms.embedding.quantizes_per_call(tmp_path / "missing.onnx")

