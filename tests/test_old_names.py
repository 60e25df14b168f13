"""The old names of the public surface keep working: "chunk" is now "passage" and
"document" is now "note" (docs/design.md, Words), but a script, a saved JSON file or
an MCP client written against the old names gets the same answers."""
import json

import pytest

import pms
from conftest import write

LONG = "# Long\n\n" + "\n\n".join(f"## Part {i}\n\n" + "zebra stripes pattern. " * 60 for i in range(5)) + "\n"


@pytest.fixture
def long_note(kb, tmp_path):
    """A keyword-only index of one note long enough for several passages."""
    write(tmp_path / "n" / "long.md", LONG)
    kb.collections.create(tmp_path / "n", name="n")
    kb.sync()
    return kb


def spans(hits) -> list[tuple[str, int, int]]:
    return [(h.path, h.start_line, h.end_line) for h in hits]


@pytest.mark.stdlib
def test_the_old_public_names_are_the_new_objects():
    assert {"Document", "Chunk", "chunk_markdown", "DEFAULT_CHUNK_CHARS"} <= set(pms.__all__)
    assert pms.Document is pms.Note and pms.Chunk is pms.Passage and pms.chunk_markdown is pms.markdown_passages
    assert pms.DEFAULT_CHUNK_CHARS == pms.DEFAULT_PASSAGE_CHARS
    old = pms.chunk_markdown(LONG, title="Long", target_chars=pms.DEFAULT_CHUNK_CHARS)
    assert len(old) > 1 and all(isinstance(p, pms.Chunk) for p in old)
    assert old == pms.markdown_passages(LONG, title="Long")


@pytest.mark.stdlib
def test_get_still_returns_a_document(vault):
    note = vault.get("notes/backup.md")
    assert isinstance(note, pms.Document) and "restic" in note.text


@pytest.mark.stdlib
def test_chunk_chars_still_sizes_the_passages(tmp_path):
    write(tmp_path / "n" / "long.md", "# Long\n\n" + "Zebra stripes make a pattern.\n" * 200)
    counts = {}
    for name, kwargs in {"old": {"chunk_chars": 400}, "new": {"passage_chars": 400}, "default": {}}.items():
        with pms.KnowledgeBase(tmp_path / f"{name}.sqlite", embeddings=False, **kwargs) as kb:
            kb.collections.create(tmp_path / "n", name="n")
            kb.sync()
            counts[name] = kb.status(pending=False)["passages"]
            assert kb.chunk_chars == kb.passage_chars == kwargs.get("passage_chars", kwargs.get("chunk_chars", 1200))
    assert counts["old"] == counts["new"] > counts["default"]


@pytest.mark.stdlib
def test_search_chunks_is_search_passages(long_note):
    by_note = long_note.search("zebra")
    old, new = long_note.search("zebra", chunks=True), long_note.search("zebra", passages=True)
    assert len(by_note) == 1 and len(new) > 1 and spans(old) == spans(new)
    assert all(h.chunk_id == h.passage_id is not None for h in old)


@pytest.mark.stdlib
def test_the_cli_takes_chunks_and_explain_json_keeps_chunk_id(long_note, pms_main):
    db = long_note.index_path
    old = pms_main("search", "zebra", "--chunks", "--json", "--explain", db=db)
    new = pms_main("search", "zebra", "--passages", "--json", "--explain", db=db)
    assert old.returncode == new.returncode == 0, old.stderr + new.stderr
    old_hits, new_hits = json.loads(old.stdout), json.loads(new.stdout)
    assert len(old_hits) > 1 and [h["start_line"] for h in old_hits] == [h["start_line"] for h in new_hits]
    assert all(h["chunk_id"] == h["passage_id"] is not None for h in old_hits)


@pytest.mark.stdlib
def test_status_keeps_its_old_keys(long_note, pms_main):
    info = long_note.status(pending=False)
    assert info["documents"] == info["notes"] == 1 and info["chunks"] == info["passages"] > 1
    (collection,) = info["collections_detail"]
    assert collection["chunks"] == collection["passages"] == info["passages"]
    shown = json.loads(pms_main("status", "--json", db=long_note.index_path).stdout)
    assert shown["documents"] == 1 and shown["chunks"] == info["passages"]
