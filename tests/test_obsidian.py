"""Opening a note in Obsidian: a note of a folder Obsidian opened as a vault (it holds
``.obsidian``) carries an ``obsidian://open?path=…`` address in every front end: the Python
API (hits, get, related), the CLI (``pms open``, ``--json``), MCP (``detail``) and the app."""
from __future__ import annotations

import os
import stat
import sys
import urllib.parse
from pathlib import Path

import pytest
from conftest import WAIT_MS, mcp_env, mcp_stdio, run_cli, type_query, write

import pms


def vaults(root: Path) -> Path:
    """A folder holding an Obsidian vault (with a space and a non-ASCII name inside) and a plain folder."""
    (root / "Work Vault" / ".obsidian").mkdir(parents=True)
    write(root / "Work Vault" / "projects" / "kayak trip ü.md", "# Kayak trip\n\nPaddle, spray deck and a dry bag for the kayak.\n")
    write(root / "Work Vault" / "paper.md", "# Paper\n\nA kayak appears here once.\n")
    write(root / "plain" / "kayak.md", "# Kayak\n\nThe kayak in the garage needs a new seat.\n")
    return root


def path_of(url: str) -> str:
    """The file an obsidian://open?path= address names."""
    parsed = urllib.parse.urlparse(url)
    assert (parsed.scheme, parsed.netloc) == ("obsidian", "open"), url
    return urllib.parse.parse_qs(parsed.query)["path"][0]


def test_hits_notes_and_related_in_a_vault_carry_its_address_others_none(kb, tmp_path):
    root = vaults(tmp_path / "notes")
    kb.collections.create(root, name="all")
    kb.sync()
    hits = {h.path: h for h in kb.search("kayak", mode="keyword")}
    assert set(hits) == {"Work Vault/projects/kayak trip ü.md", "Work Vault/paper.md", "plain/kayak.md"}
    for path in ("Work Vault/projects/kayak trip ü.md", "Work Vault/paper.md"):
        assert path_of(hits[path].obsidian_url) == hits[path].abspath == str(root / path)
        assert " " not in hits[path].obsidian_url and "/" not in hits[path].obsidian_url.split("?", 1)[1]
    assert hits["plain/kayak.md"].obsidian_url == ""
    assert hits["plain/kayak.md"].to_dict()["obsidian_url"] == ""  # --json always has the key

    note = kb.get("all/Work Vault/paper.md")
    assert path_of(note.obsidian_url) == note.abspath
    assert note.as_hit().obsidian_url == note.obsidian_url and note.as_hit().title == "Paper"
    assert kb.get("all/plain/kayak.md").obsidian_url == ""
    related = kb.related("all/plain/kayak.md")
    assert related.hits and all((h.obsidian_url != "") == h.path.startswith("Work Vault/") for h in related.hits)


def test_a_collection_inside_a_vault_is_in_it_and_a_vault_opened_later_is_seen(kb, tmp_path):
    root = vaults(tmp_path / "notes")
    kb.collections.create(root / "Work Vault" / "projects", name="projects")  # a subfolder of the vault
    kb.collections.create(root / "plain", name="plain")
    kb.sync()
    [trip] = kb.search("spray deck", mode="keyword").hits
    assert path_of(trip.obsidian_url) == str(root / "Work Vault" / "projects" / "kayak trip ü.md")
    # Opening a folder in Obsidian makes .obsidian; a later search in a new process sees it.
    (root / "plain" / ".obsidian").mkdir()
    with pms.KnowledgeBase(kb.db_path) as again:
        [seat] = again.search("garage seat", mode="keyword").hits
    assert path_of(seat.obsidian_url) == str(root / "plain" / "kayak.md")


@pytest.fixture
def vault_index(tmp_path) -> tuple[Path, Path, Path]:
    """(PMS_HOME, index file, notes folder) of vaults(), indexed by the CLI."""
    home, db = tmp_path / "home", tmp_path / "index.sqlite"
    home.mkdir()
    root = vaults(tmp_path / "notes")
    done = run_cli("collection", "add", root, "--name", "all", db=db, env=mcp_env(home))
    assert done.returncode == 0, done.stderr
    return home, db, root


def fake_opener(folder: Path, name: str, exit_code: int = 0) -> Path:
    """A stand-in for the system's opener (xdg-open, open) that writes its argument to a file."""
    folder.mkdir(exist_ok=True)
    script = folder / name
    script.write_text(f"#!/bin/sh\nprintf '%s' \"$1\" > '{folder}/opened'\n"
                      f"{'echo cannot open that >&2' if exit_code else ''}\nexit {exit_code}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return folder / "opened"


@pytest.mark.skipif(sys.platform == "win32", reason="the opener is a shell script")
def test_pms_open_gives_obsidian_a_vaults_note_and_the_system_app_the_rest(vault_index, tmp_path):
    home, db, root = vault_index
    env = mcp_env(home)
    printed = run_cli("open", "kayak trip ü.md", "--print", db=db, env=env)
    assert printed.returncode == 0, printed.stderr
    assert path_of(printed.stdout.strip()) == str(root / "Work Vault" / "projects" / "kayak trip ü.md")
    plain = run_cli("open", "all/plain/kayak.md", "--print", db=db, env=env)
    assert plain.stdout.strip() == (root / "plain" / "kayak.md").as_uri()
    forced = run_cli("open", "all/Work Vault/paper.md", "--print", "--no-obsidian", db=db, env=env)
    assert forced.stdout.strip() == (root / "Work Vault" / "paper.md").as_uri()

    opener = "open" if sys.platform == "darwin" else "xdg-open"
    bin_dir = tmp_path / "bin"
    opened = fake_opener(bin_dir, opener)
    path = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = run_cli("open", "all/Work Vault/paper.md", db=db, env=env | path)
    assert done.returncode == 0 and done.stdout == "" and done.stderr == "", done.stderr
    assert path_of(opened.read_text()) == str(root / "Work Vault" / "paper.md")

    fake_opener(bin_dir, opener, exit_code=4)
    failed = run_cli("open", "all/plain/kayak.md", db=db, env=env | path)
    assert failed.returncode == 1
    assert failed.stderr.strip() == (f"pms: error: cannot open all/plain/kayak.md: {opener} failed (cannot open that); "
                                     f"the file is {root / 'plain' / 'kayak.md'}")
    missing = run_cli("open", "nothing-like-it", db=db, env=env | path)
    assert missing.returncode == 1 and len(missing.stderr.strip().splitlines()) == 1
    assert "no indexed note matches 'nothing-like-it'" in missing.stderr


def test_mcp_detailed_hits_in_a_vault_carry_its_address_lean_ones_no_path(vault_index):
    """As the file's absolute path, the address is sent only with detail=true (an answer's size, and
    the user's folder names, are not spent on every search)."""
    import anyio

    home, db, root = vault_index

    async def main():
        async with mcp_stdio(home, db) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert "obsidian_url" in tools["search"].output_schema["properties"]["hits"]["items"]["properties"]
            lean = (await client.call_tool("search", {"query": "kayak", "mode": "keyword"})).structured_content
            assert lean["hits"] and not any("obsidian_url" in h or "abspath" in h for h in lean["hits"])
            found = (await client.call_tool("search", {"query": "kayak", "mode": "keyword", "detail": True})).structured_content
            urls = {h["path"]: h["obsidian_url"] for h in found["hits"]}
            assert path_of(urls["all/Work Vault/paper.md"]) == str(root / "Work Vault" / "paper.md")
            assert urls["all/plain/kayak.md"] == ""
            related = (await client.call_tool("related", {"path": "all/plain/kayak.md", "detail": True})).structured_content
            assert any(h["obsidian_url"] for h in related["hits"])

    anyio.run(main)


def test_shift_enter_in_the_app_opens_a_vaults_note_in_obsidian(kb, tmp_path, open_window, qtbot):
    from PySide6.QtCore import QObject, Qt, QUrl, Slot
    from PySide6.QtGui import QDesktopServices

    class Obsidian(QObject):
        """Stands where Obsidian's URL handler would: what the app asked to open."""

        def __init__(self):
            super().__init__()
            self.opened: list[str] = []

        @Slot(QUrl)
        def open(self, url: QUrl) -> None:
            self.opened.append(bytes(url.toEncoded().data()).decode())

    root = vaults(tmp_path / "notes")
    kb.collections.create(root, name="all")
    kb.sync()
    window = open_window(kb)
    obsidian = Obsidian()
    QDesktopServices.setUrlHandler("obsidian", obsidian, "open")
    try:
        type_query(qtbot, window, "spray deck")
        qtbot.keyClick(window.search_box, Qt.Key_Return, Qt.ShiftModifier)
        qtbot.waitUntil(lambda: bool(obsidian.opened), timeout=WAIT_MS)
        assert path_of(obsidian.opened[0]) == str(root / "Work Vault" / "projects" / "kayak trip ü.md")
        type_query(qtbot, window, "garage seat")  # in no vault: opened as Enter opens it (offscreen: no app does)
        qtbot.keyClick(window.search_box, Qt.Key_Return, Qt.ShiftModifier)
        assert window.status_line.message == "No app is set to open .md files on this system: kayak.md was not opened"
        assert len(obsidian.opened) == 1
    finally:
        QDesktopServices.unsetUrlHandler("obsidian")
