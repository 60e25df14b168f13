"""The app's first start offline (issue 36, items 7 and 11): with no model at hand, the window
leads somewhere (keyword search, a model folder, an embedding server), says nothing of a model
before there are notes, and its status messages about the view end with the view."""
from __future__ import annotations

import pytest
from conftest import WAIT_MS, FakeServer, write

import pms

pytest.importorskip("PySide6", reason="the desktop app needs PySide6 (pip install -r requirements-dev.txt)")

CHOICES = ["Retry the model", "Choose a model folder…", "Set up an embedding server…", "Use keyword search"]


@pytest.fixture
def offline_kb(db_path):
    """The app's index on a machine where the default model was never downloaded (and cannot be)."""
    with pms.KnowledgeBase(db_path, allow_download=False) as kb:
        yield kb


def menu_texts(window) -> list[str]:
    menu = window.fix_button.menu()
    return [a.text() for a in menu.actions() if not a.isSeparator()] if menu else []


def first_start(qtbot, open_window, kb, notes):
    window = open_window(kb, background=False)
    window.start_background_work()
    qtbot.waitUntil(lambda: window.sync.model_state == "unavailable", timeout=WAIT_MS)
    assert not window.fix_button.isVisible() and "unavailable" not in window.status_line.stats  # nothing to fix yet
    with qtbot.waitSignal(window.sync_done, timeout=WAIT_MS):
        window.sync.add_folder(notes)
    return window


def test_the_first_start_offline_offers_every_way_forward(offline_kb, notes, open_window, qtbot, embedding_model_dir):
    window = first_start(qtbot, open_window, offline_kb, notes)
    assert window.badge.text().startswith("Keyword only")
    assert window.fix_button.isVisible() and window.fix_button.text() == "Search by meaning…"
    assert menu_texts(window) == CHOICES
    with qtbot.waitSignal(window.sync_done, timeout=WAIT_MS):  # the folder is checked by the engine, then notes embedded
        window.sync.use_model_folder(embedding_model_dir)
    qtbot.waitUntil(lambda: window.badge.text() == "Hybrid", timeout=WAIT_MS)
    assert not window.fix_button.isVisible()
    with pms.KnowledgeBase(offline_kb.index_path) as next_start:  # the next start uses it, with nothing chosen
        assert next_start.status(pending=False)["embedding_provider"]["dir"] == str(embedding_model_dir.resolve())


def test_a_folder_that_holds_no_model_is_refused_with_the_reason(offline_kb, notes, open_window, qtbot, tmp_path):
    window = first_start(qtbot, open_window, offline_kb, notes)
    empty = write(tmp_path / "not-a-model" / "readme.txt", "nothing here").parent
    window.sync.use_model_folder(empty)
    qtbot.waitUntil(lambda: "holds no ONNX model" in window.layout_controller.message(), timeout=WAIT_MS)
    assert window.badge.text().startswith("Keyword only") and menu_texts(window) == CHOICES


def test_an_embedding_server_can_be_chosen_from_the_window(offline_kb, notes, open_window, qtbot):
    server = FakeServer()
    try:
        window = first_start(qtbot, open_window, offline_kb, notes)
        with qtbot.waitSignal(window.sync_done, timeout=WAIT_MS):
            window.sync.use_embedding_server(server.url, "hashed-words")
        qtbot.waitUntil(lambda: window.badge.text() == "Hybrid", timeout=WAIT_MS)
        with pms.KnowledgeBase(offline_kb.index_path) as next_start:  # the next start asks it, with nothing chosen
            assert next_start.status(pending=False)["embedding_provider"]["url"] == server.url + "/v1/embeddings"
    finally:
        server.stop()


def test_keyword_search_chosen_is_kept_and_meaning_stays_one_click_away(offline_kb, notes, open_window, qtbot, db_path):
    window = first_start(qtbot, open_window, offline_kb, notes)
    window.sync.use_keyword_search()
    assert window.badge.text().startswith("Keyword only") and window.fix_button.text() == "Search by meaning…"
    assert menu_texts(window) == CHOICES[1:3]
    assert "unavailable" not in window.status_line.stats
    window.close()
    with pms.KnowledgeBase(db_path, allow_download=False) as again:  # the next start: no model tried, the same offer
        reopened = open_window(again, background=True)
        assert reopened.sync.model_state == "keyword" and menu_texts(reopened) == CHOICES[1:3]


def test_a_status_message_about_the_shown_note_ends_with_the_next_search(vault, open_window, qtbot):
    """"Already clipped: … shown here" stayed in the status line after the next search."""
    from conftest import type_query

    window = open_window(vault)
    window.flash("Already clipped: this page is the note “sync.md”, shown here", view=True)
    type_query(qtbot, window, "rust")
    assert window.layout_controller.message() == ""
    window.flash("Synced: +1 new")  # a message about the index stays
    type_query(qtbot, window, "backup")
    assert window.layout_controller.message() == "Synced: +1 new"


def test_a_failed_clip_names_its_page_once(vault, open_window, qtbot, server):
    window = open_window(vault)
    url = f"{server}/status/404"
    with qtbot.waitSignal(window.clip_done, timeout=WAIT_MS):
        window.clipper.clip(url)
    assert window.layout_controller.message().count(url) == 1, window.layout_controller.message()
