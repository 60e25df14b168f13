"""What an AI assistant relies on (issue 23): note ids that never collide, bounded
calls and answers, fuzzy note lookup, exclusions, containment, HTTP hygiene.

MCP behaviour is driven through the official SDK's clients (stdio and Streamable
HTTP) against a real `pms.py mcp` subprocess; raw HTTP through urllib.
"""
from __future__ import annotations

import hashlib
import sqlite3

import pytest

import pms
from conftest import write

# Two file names whose ids in collection 1 share their first 6 hex digits, and two that share 8.
SAME_6 = ("n31.md", "n4718.md")
SAME_8 = ("n16463.md", "n156658.md")


def sha(path: str) -> str:
    return hashlib.sha1(f"1:{path}".encode()).hexdigest()


def test_the_pairs_collide_as_the_tests_assume():
    assert sha(SAME_6[0])[:6] == sha(SAME_6[1])[:6] and sha(SAME_6[0])[:7] != sha(SAME_6[1])[:7]
    assert sha(SAME_8[0])[:8] == sha(SAME_8[1])[:8]


@pytest.fixture
def colliding(kb, tmp_path):
    root = tmp_path / "dup"
    for name in (*SAME_6, *SAME_8, "solo.md"):
        write(root / name, f"# Note {name}\n\nbananas from {name}\n")
    kb.collections.create(root, name="dup")
    assert not kb.sync().errors
    return kb


def test_ids_are_unique_extended_on_collision_and_case_insensitive(colliding):
    kb = colliding
    ids = {name: kb.get(f"dup/{name}").docid for name in (*SAME_6, *SAME_8)}
    assert len(set(ids.values())) == 4
    assert all(len(d) >= 8 for d in ids.values())
    assert sorted(len(ids[n]) for n in SAME_8) == [8, 9]  # the second one was extended
    for name, docid in ids.items():
        assert kb.get(f"#{docid}").path == name
        assert kb.get(f"#{docid.upper()}").path == name
    for hit in kb.search("bananas", k=10):
        assert kb.get(f"#{hit.docid}").path == hit.path


def test_an_old_six_digit_id_works_when_unambiguous_and_names_candidates_when_not(colliding):
    kb = colliding
    unique = kb.get("dup/solo.md").docid[:6]
    assert kb.get(f"#{unique}").path == "solo.md"
    with pytest.raises(pms.PMSError, match=r"ambiguous.*dup/n31\.md.*dup/n4718\.md"):
        kb.get("#" + sha(SAME_6[0])[:6])
    with pytest.raises(pms.PMSError, match="no indexed note has the id #ffffff"):
        kb.get("#ffffff")


def test_the_migration_makes_old_colliding_ids_unique(colliding, db_path):
    kb = colliding
    kb.close()
    db = sqlite3.connect(db_path)  # the index as schema 5 left it: 6-digit ids, two alike
    db.execute("DROP INDEX documents_docid")
    db.execute("UPDATE documents SET docid = substr(docid, 1, 6)")
    db.execute("CREATE INDEX documents_docid ON documents(docid)")
    db.execute("PRAGMA user_version = 5")
    db.commit()
    db.close()
    with pms.KnowledgeBase(db_path, embeddings=False) as again:
        ids = [again.get(f"dup/{name}").docid for name in (*SAME_6, *SAME_8)]
        assert len(set(ids)) == 4 and all(len(d) >= 8 for d in ids)
        assert again.get(f"#{ids[1]}").path == SAME_6[1]


def test_a_note_found_by_its_file_name_alone_any_case_without_md(vault):
    assert vault.get("rust").path == "dev/rust.md"
    assert vault.get("RUST.md").path == "dev/rust.md"
    assert vault.get("notes/dev/Rust").path == "dev/rust.md"
    with pytest.raises(pms.PMSError, match=r"did you mean notes/dev/rust\.md\?"):
        vault.get("rusty.md")
