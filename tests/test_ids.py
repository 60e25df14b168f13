"""A note's id names that note only (issue 37): a whole id matches a whole id; only an id shorter
than any (an old 6-digit one) is a prefix, and only when unique."""
from __future__ import annotations

import hashlib

import pytest
from conftest import write

import pms

SAME_8 = ("n16463.md", "n156658.md")  # their ids in collection 1 share 8 hex digits: the second gets 9


def test_the_pair_collides_as_the_test_assumes():
    digests = [hashlib.sha1(f"1:{name}".encode()).hexdigest() for name in SAME_8]
    assert digests[0][:8] == digests[1][:8] and digests[0][8] != digests[1][8]


def test_a_deleted_notes_id_never_finds_the_note_whose_id_it_starts(kb, tmp_path, pms_main):
    root = tmp_path / "dup"
    for name in SAME_8:
        write(root / name, f"# Note {name}\n\nbananas from {name}\n")
    kb.collections.create(root, name="dup")
    kb.sync()
    short, long = sorted((kb.get(f"dup/{name}") for name in SAME_8), key=lambda d: len(d.docid))
    assert long.docid.startswith(short.docid) and len(long.docid) == len(short.docid) + 1
    (root / short.path).unlink()
    kb.sync()
    for ref in (f"#{short.docid}", short.docid, f"#{short.docid.upper()}"):
        with pytest.raises(pms.PMSError, match=f"no indexed note (has the id #{short.docid}|matches)"):
            kb.get(ref)
    assert kb.get(f"#{long.docid}").path == long.path
    assert kb.get(f"#{long.docid[:6]}").path == long.path, "an old 6-digit id still works while it is unique"
    r = pms_main("get", f"#{short.docid}", db=kb.db_path)
    assert r.returncode == 1 and r.stdout == "" and r.stderr.count("\n") == 1 and "no indexed note" in r.stderr
