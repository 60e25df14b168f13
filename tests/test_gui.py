"""The desktop app, driven like a user would: real Qt (offscreen), real index
files, a real local web server for clipping. No mocks."""
from __future__ import annotations

import functools
import gc
import http.server
import os
import sqlite3
import threading
import weakref

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6", reason="the desktop app needs PySide6 (pip install PySide6-Essentials)")
pytest.importorskip("pytestqt", reason="GUI tests need pytest-qt (pip install pytest-qt)")

from PySide6.QtCore import QMimeData, Qt, QUrl  # noqa: E402
from PySide6.QtGui import QTextDocument  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

import pms  # noqa: E402
from conftest import REPO, WAIT_MS, drop, preview_of_a_note, type_query, wait_for_preview, write  # noqa: E402
from gui.preview import wikilinks_to_markdown  # noqa: E402
from gui.window import MainWindow  # noqa: E402



def result_paths(window: MainWindow) -> list[str]:
    return [hit.path for hit in window.results_model.hits]


def test_welcome_panel_with_no_collections_then_add_folder(kb, notes, open_window, qtbot):
    window = open_window(kb)
    assert window.pages.currentWidget() is window.welcome
    assert window.welcome.button.text().startswith("Add a folder")
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(notes))])
    with qtbot.waitSignal(window.sync_done, timeout=WAIT_MS):
        assert drop(window, mime)  # dropping a folder onto the window adds it
    assert [c.name for c in kb.collections.list()] == ["notes"]
    assert window.pages.currentWidget() is window.splitter
    assert "3 notes" in window.status_line.stats


def test_typing_shows_results_as_you_type(vault, open_window, qtbot):
    window = open_window(vault)
    qtbot.keyClicks(window.search_box, "syncth")  # a partial word: prefix match while typing
    qtbot.waitUntil(lambda: bool(result_paths(window)) and window.results_model.query == "syncth", timeout=WAIT_MS)
    assert result_paths(window)[0] == "sync.md"
    wait_for_preview(qtbot, window)
    assert window.preview.abspath.name == "sync.md"
    assert "Syncthing" in window.preview.toPlainText()
    qtbot.keyClick(window.search_box, Qt.Key_Escape)
    assert window.search_box.text() == "" and window.results_model.query == ""


def test_arrow_keys_move_through_results_and_update_preview(vault, open_window, qtbot):
    window = open_window(vault)
    type_query(qtbot, window, "cop")  # "copy" in sync.md, "copies" in backup.md
    assert len(result_paths(window)) >= 2
    wait_for_preview(qtbot, window)
    first = window.preview.abspath
    qtbot.keyClick(window.search_box, Qt.Key_Down)  # from the search bar...
    assert window.results_view.currentIndex().row() == 1
    qtbot.waitUntil(lambda: window.preview.abspath not in (None, first), timeout=WAIT_MS)
    assert window.preview.abspath.name == result_paths(window)[1].split("/")[-1]
    window.results_view.setFocus()
    qtbot.keyClick(window.results_view, Qt.Key_Up)  # ...and in the list itself
    qtbot.waitUntil(lambda: window.preview.abspath == first, timeout=WAIT_MS)


def test_preview_renders_markdown_and_scrolls_to_the_passage(kb, tmp_path, open_window, qtbot):
    sections = "\n\n".join(f"## Section {i}\n\n" + "Plain filler text about nothing in particular. " * 12 for i in range(40))
    window = preview_of_a_note(qtbot, kb, open_window, tmp_path / "long",
                               "---\ntitle: A long note\ntags: [demo, long]\nsource: https://example.org/long\n---\n"
                               f"# A long note\n\n{sections}\n\n## Zebra crossings\n\nThe zebra passage sits at the very end.\n\n"
                               "| a | b |\n|---|---|\n| 1 | 2 |\n", "zebra", (900, 500))
    preview = window.preview
    assert preview.abspath.name == "long.md"
    assert preview.passage_block > 0
    bar = preview.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() > bar.maximum() // 2
    block = preview.document().findBlockByNumber(preview.passage_block)
    assert "zebra" in block.text().lower()
    marks = [s for s in preview.extraSelections() if "zebra" in s.cursor.selectedText().lower()]
    assert len(marks) >= 2  # the heading and the passage
    text = preview.toPlainText()
    assert "#demo" in text and "example.org/long" in text  # the frontmatter as a small header
    assert "title:" not in text  # ...not as raw YAML
    assert preview.document().toMarkdown().count("|") >= 6  # the table survived as a table


def test_preview_links_wikilinks_images_and_no_network(kb, tmp_path, open_window, qtbot):
    folder = tmp_path / "vault"
    write(folder / "a.md", "# A\n\nSee [[b|the other note]], [c](sub/c.md) and [web](https://example.org).\n\n![pic](pic.png)\n\n"
          "```\n[[not a link in code]]\n```\n")
    write(folder / "sub" / "b.md", "# B\n\nNote b.\n")
    write(folder / "sub" / "c.md", "# C\n\nNote c.\n")
    from PySide6.QtGui import QImage
    image = QImage(4, 4, QImage.Format_RGB32)
    image.fill(Qt.red)
    image.save(str(folder / "pic.png"))
    kb.collections.create(folder, name="vault")
    kb.sync()
    window = open_window(kb)
    preview = window.preview
    preview.show_note(folder / "a.md")
    assert "[[not a link in code]]" in preview.toPlainText()
    assert not preview.loadResource(QTextDocument.ImageResource, QUrl("https://example.org/tracker.png"))
    assert preview.loadResource(QTextDocument.ImageResource, QUrl.fromLocalFile(str(folder / "pic.png")))
    preview.anchorClicked.emit(QUrl("pms-wiki:b"))  # [[b]] is found by name anywhere in the vault
    assert preview.abspath == folder / "sub" / "b.md"
    preview.show_note(folder / "a.md")
    preview.anchorClicked.emit(QUrl("sub/c.md"))  # a relative link to another note
    assert preview.abspath == folder / "sub" / "c.md"
    assert wikilinks_to_markdown("[[Note#Part|label]]") == "[label](pms-wiki:Note#Part)"
    assert wikilinks_to_markdown("![[note#part,1:#*]]") == "[note › part](pms-wiki:note#part%2C1%3A%23%2A)"


def test_a_clicked_wikilink_opens_the_note_pms_links_reports(kb, tmp_path, open_window, qtbot):
    """The app used to look in the note's own folder first (sub/Topic.md); the engine
    takes the exact path from the vault's root (Topic.md), and knows aliases."""
    import re
    folder = tmp_path / "vault"
    write(folder / "Topic.md", "# Root topic\n")
    write(folder / "sub" / "Topic.md", "# Sub topic\n")
    write(folder / "other.md", "---\naliases: [Nickname]\n---\n# Other\n")
    write(folder / "sub" / "current.md", "# Current\n\nSee [[Topic]] and [[Nickname|him]].\n\n`[[Topic]] in code`\n")
    kb.collections.create(folder, name="vault")
    kb.sync()
    reported = [ref.path for ref in kb.links("vault/sub/current.md")]
    assert reported == ["Topic.md", "other.md"]
    preview = open_window(kb).preview
    for expected in reported:
        preview.show_note(folder / "sub" / "current.md")
        hrefs = re.findall(r'href="(pms-wiki:[^"]+)"', preview.document().toHtml())
        assert len(hrefs) == 2  # not the one in inline code
        preview.anchorClicked.emit(QUrl(hrefs[reported.index(expected)]))
        assert preview.abspath == folder / expected


def test_a_dendron_note_shows_its_links_labels_and_they_open_the_notes_the_engine_resolves(kb, tmp_path, open_window, qtbot):
    """Dendron writes the label first ([[label|note.name]], [[label|dendron://vault/note.name#heading]]):
    the preview shows the labels, never the vault's address, and each opens the note ``pms links`` reports."""
    import re
    folder = tmp_path / "vault"
    write(folder / "dendron.topic.tasks.md", "---\nid: a1\ntitle: Tasks\ncreated: 1635451738215\nupdated: 1662093951844\n---\n"
          "## taskCompleteStatus\n\nThe statuses that complete a task.\n")
    write(folder / "dendron.ref.commands.md", "---\nid: a2\ntitle: Commands\ncreated: 1635451738215\nupdated: 1662093951844\n---\n"
          "## Set Task Status\n\nSets a task's status.\n")
    write(folder / "complete-task.md", "---\nid: a3\ntitle: Complete Task\ncreated: 1657122304417\nupdated: 1657122358101\n---\n"
          "Works as [[Set Task Status|dendron://site/dendron.ref.commands#set-task-status]], with the first status of "
          "[[taskCompleteStatus|dendron.topic.tasks#taskcompletestatus]].\n")
    kb.collections.create(folder, name="vault")
    kb.sync()
    reported = [ref.path for ref in kb.links("vault/complete-task.md")]
    assert reported == ["dendron.ref.commands.md", "dendron.topic.tasks.md"]
    preview = open_window(kb).preview
    preview.show_note(folder / "complete-task.md")
    text = preview.toPlainText()
    assert "Set Task Status" in text and "taskCompleteStatus" in text and "dendron://" not in text and "dendron.topic" not in text
    hrefs = re.findall(r'href="(pms-wiki:[^"]+)"', preview.document().toHtml())
    assert len(hrefs) == 2
    for href, expected in zip(hrefs, reported):
        preview.show_note(folder / "complete-task.md")
        preview.anchorClicked.emit(QUrl(href))
        assert preview.abspath == folder / expected


def test_keyword_only_badge_when_embeddings_are_unavailable(vault, open_window):
    window = open_window(vault)  # the kb fixture has embeddings=False
    assert window.badge.text().startswith("Keyword only")
    assert "disabled" in window.badge.toolTip()
    assert window.badge.text() == f"Keyword only · {pms.VECTOR_UNAVAILABLE['disabled']}"
    assert window.search.search_mode() == "keyword"


def test_badge_turns_hybrid_once_the_model_loads(hybrid_kb, notes, open_window, qtbot):
    hybrid_kb.collections.create(notes, name="notes")
    window = open_window(hybrid_kb)
    assert window.badge.text().startswith("Keyword only")  # the window never waits for the model
    with qtbot.waitSignal(window.sync_done, timeout=60000):
        window.start_background_work()
    qtbot.waitUntil(lambda: window.badge.text() == "Hybrid", timeout=60000)
    type_query(qtbot, window, "keeping two computers in step")  # meaning, few shared words
    assert result_paths(window)[0] == "sync.md"


def test_the_app_searches_by_meaning_with_a_static_model(db_path, notes, static_model_dir, open_window, qtbot):
    """A Model2Vec folder (scripts/make_static_model.py) embeds and answers like any model."""
    with pms.KnowledgeBase(db_path, model_dir=static_model_dir) as kb:
        kb.collections.create(notes, name="notes")
        window = open_window(kb)
        with qtbot.waitSignal(window.sync_done, timeout=60000):
            window.start_background_work()
        qtbot.waitUntil(lambda: window.badge.text() == "Hybrid", timeout=60000)
        type_query(qtbot, window, "replicate documents onto my cellphone")
        assert result_paths(window)[0] == "sync.md"
        assert window.status_line.stats.endswith("model minilm-static-256")  # the app names a model without its owner


def test_a_file_written_into_a_watched_folder_becomes_searchable(vault, notes, open_window, qtbot):
    window = open_window(vault, background=True)
    type_query(qtbot, window, "quokka")
    assert not window.results_model.hits
    with qtbot.waitSignal(window.sync_done, timeout=WAIT_MS):
        write(notes / "dev" / "animals.md", "# Animals\n\nThe quokka is a small marsupial.\n")
    qtbot.waitUntil(lambda: "dev/animals.md" in result_paths(window), timeout=WAIT_MS)
    with qtbot.waitSignal(window.sync_done, timeout=WAIT_MS):
        write(notes / "inbox" / "new.md", "# New folder\n\nAnother quokka sighting.\n")  # a folder that did not exist
    qtbot.waitUntil(lambda: "inbox/new.md" in result_paths(window), timeout=WAIT_MS)


def test_a_sync_can_be_cancelled_and_leaves_a_consistent_index(kb, tmp_path, open_window, qtbot):
    folder = tmp_path / "many"
    for i in range(600):
        write(folder / f"n{i:04d}.md", f"# Note {i}\n\n" + "\n\n".join(
            f"## Part {j}\n\n" + f"word{i} alpha beta gamma delta {j} " * 20 for j in range(6)))
    kb.collections.create(folder, name="many")
    window = open_window(kb)

    def cancel_at_first_progress(_progress):
        if window.cancel_button.isEnabled():
            qtbot.mouseClick(window.cancel_button, Qt.LeftButton)

    window.bridge.sync_progress.connect(cancel_at_first_progress)
    with qtbot.waitSignal(window.sync_done, timeout=WAIT_MS) as done:
        window.sync.request_sync(None)
        assert window.cancel_button.isVisible()
    report = done.args[0]
    assert report.cancelled
    notes, _ = kb.collections.get("many").counts()
    assert notes < 600
    with sqlite3.connect(kb.db_path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    window.bridge.sync_progress.disconnect(cancel_at_first_progress)
    with qtbot.waitSignal(window.sync_done, timeout=WAIT_MS) as done:
        window.sync.request_sync(None)
    assert not done.args[0].cancelled and done.args[0].added == 600 - notes
    assert kb.collections.get("many").counts()[0] == 600
    assert not window.cancel_button.isVisible()


def test_engine_notices_reach_the_status_bar(kb, notes, open_window, qtbot):
    """A sync that waits for another one (another window, the CLI) says so in the window."""
    kb.collections.create(notes, name="notes")
    window = open_window(kb)
    other_sync = pms.sync.FileLock(kb.index_path.with_name(kb.index_path.name + ".sync.lock"))
    assert other_sync.acquire(blocking=False)
    with qtbot.waitSignal(window.sync_done, timeout=WAIT_MS):
        window.sync.request_sync(None)
        qtbot.waitUntil(lambda: "another sync" in window.status_line.message, timeout=WAIT_MS)
        other_sync.release()
    assert kb.collections.get("notes").counts()[0] == 3


@pytest.fixture
def html_server(shared_data):
    pages = shared_data / "html"
    if not pages.is_dir():
        pytest.skip(f"saved web pages not found at {pages}")
    handler = functools.partial(QuietHandler, directory=str(pages))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def clipping_available() -> str | None:
    """Why clipping cannot run here, or None."""
    if not pms.module_available("trafilatura"):
        return "trafilatura is not installed (pip install trafilatura)"
    return None


@pytest.mark.parametrize("how", ["url", "saved-file"])
def test_dropping_a_link_or_a_saved_page_clips_it_into_a_note(vault, notes, html_server, shared_data, tmp_path,
                                                              open_window, qtbot, how):
    why = clipping_available()
    if why:
        pytest.skip(why)
    window = open_window(vault)
    mime = QMimeData()
    if how == "url":
        mime.setUrls([QUrl(f"{html_server}/dropbox-blog/source.html")])
    else:
        saved = write(tmp_path / "saved page.html", (shared_data / "html" / "dropbox-blog" / "source.html").read_bytes())
        mime.setUrls([QUrl.fromLocalFile(str(saved))])
    with qtbot.waitSignal(window.clip_done, timeout=60000) as done:
        assert drop(window, mime)
    path, error = done.args
    assert not error, error
    assert path.parent == notes and path.suffix == ".md"
    assert "Dropbox" in window.preview.toPlainText()
    qtbot.waitUntil(lambda: str(path) in [h.abspath for h in window.results_model.hits], timeout=WAIT_MS)
    assert window.current_hit().abspath == str(path)  # selected, so the preview shows it


def test_pasting_a_dead_link_is_a_short_message_not_a_dialog(vault, open_window, qtbot):
    why = clipping_available()
    if why:
        pytest.skip(why)
    window = open_window(vault)
    type_query(qtbot, window, "restic")
    QApplication.clipboard().setText("http://127.0.0.1:9/nothing-listens-here")
    window.results_view.setFocus()
    with qtbot.waitSignal(window.clip_done, timeout=60000) as done:
        qtbot.keyClick(window.results_view, Qt.Key_V, Qt.ControlModifier)  # Ctrl+V outside the search bar clips
    assert done.args[0] is None and done.args[1]
    assert window.search_box.text() == "restic"
    assert "Could not clip" in window.status_line.message


def test_window_state_and_collection_filter_persist(vault, open_window, qtbot):
    window = open_window(vault)
    window.resize(777, 555)
    window.collection_combo.setCurrentIndex(window.collection_combo.findData("notes"))
    window.close()
    again = open_window(vault)
    assert again.collection_combo.currentData() == "notes"
    assert again.width() == 777


def test_the_app_starts_from_its_entry_point(vault, db_path):
    import subprocess
    import sys

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    out = subprocess.run([sys.executable, "-m", "gui", "--db", str(db_path), "--quit-after-show"], cwd=REPO,
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("window-shown")  # how fast: bench/gui_bench.py (docs/benchmarks.md)


@pytest.mark.stdlib
def test_pms_gui_without_pyside6_says_how_to_install_it(cli, tmp_path):
    result = cli("gui", db=tmp_path / "i.sqlite", python_flags=["-S"], env={"PMS_HOME": str(tmp_path / "home")})
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0
    assert "pip install PySide6-Essentials" in result.stderr and "setup --gui" in result.stderr


def test_searching_does_not_leak_references_to_none(vault, open_window, qtbot):
    import sys

    if sys.version_info >= (3, 12):
        pytest.skip("None is immortal from Python 3.12 on: nothing to leak")
    window = open_window(vault)
    type_query(qtbot, window, "notes")
    before = sys.getrefcount(None)
    for query in ["sync", "rust", "backup", "copies"] * 5:
        type_query(qtbot, window, query)
    # PySide6 6.12.0 loses one per void call (hundreds per search) until Python aborts: pin another version.
    assert sys.getrefcount(None) > before - 200, "this PySide6 drops references to None (pip install 'PySide6-Essentials!=6.12.0')"


@pytest.fixture
def many(kb, tmp_path):
    """40 notes that all match "note": more results than the list holds."""
    for i in range(40):
        write(tmp_path / "many" / f"n{i:02d}.md", f"# Note {i}\n\nThis note number {i} is about topic {i % 7}.\n")
    kb.collections.create(tmp_path / "many", name="many")
    kb.sync()
    return kb


def test_clearing_the_query_is_one_model_reset_and_renders_no_preview(many, open_window, qtbot):
    window = open_window(many)
    type_query(qtbot, window, "note")
    assert window.results_model.rowCount() >= 25
    wait_for_preview(qtbot, window)
    resets, removed, renders = [], [], window.preview.renders
    window.results_model.modelReset.connect(lambda: resets.append(1))
    window.results_model.rowsRemoved.connect(lambda *args: removed.append(1))
    qtbot.keyClick(window.search_box, Qt.Key_A, Qt.ControlModifier)
    qtbot.keyClick(window.search_box, Qt.Key_Backspace)  # select all, delete: what users do
    assert window.search_box.text() == ""
    assert resets == [1] and not removed
    assert window.preview.renders == renders and window.preview.abspath is None
    assert len(window.results_model.hits) == 1  # the start page: the note just read


def test_rows_passed_through_with_the_arrow_keys_are_not_rendered(many, open_window, qtbot):
    window = open_window(many)
    type_query(qtbot, window, "note")
    renders = window.preview.renders
    for _ in range(12):  # a held-down arrow key
        qtbot.keyClick(window.search_box, Qt.Key_Down)
    assert window.preview.renders - renders <= 2
    qtbot.waitUntil(lambda: window.preview.abspath is not None
                    and window.preview.abspath.name == window.current_hit().path, timeout=WAIT_MS)
    assert window.results_model.hits.index(window.current_hit()) == 12


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.slow
def test_memory_stays_flat_over_a_thousand_searches(many, open_window, qtbot):
    window = open_window(many)
    queries = [f"topic {i % 7} note" for i in range(1000)]
    shown: list = []  # weak references to every Hit handed to the window

    def search(query: str) -> None:
        # The search thread's path: kb.search, then the results signal into the window.
        hits = many.search(query, k=30, mode="keyword")
        shown.extend(weakref.ref(hit) for hit in hits)
        window.search.search_seq += 1
        window.bridge.results.emit(window.search.search_seq, query, hits, 0.0)
        qtbot.wait(0)

    def live_hits() -> int:
        gc.collect()
        return sum(1 for obj in gc.get_objects() if isinstance(obj, pms.Hit))

    for query in queries[:100]:
        search(query)
    rss = rss_mb() if os.path.exists("/proc/self/statm") else 0.0
    before = live_hits()
    for query in queries[100:]:
        search(query)
    gc.collect()
    alive = sum(1 for ref in shown if ref() is not None)
    assert alive <= 30, f"{alive} hits of old searches are still alive"  # the last search's only
    # Nothing else in the window (the Related pane, the start page) keeps old Hits either.
    grown = live_hits() - before
    assert grown <= 30, f"{grown} more Hits alive after 900 more searches"
    if rss:
        assert rss_mb() - rss < 20, f"RSS grew from {rss:.0f} MB to {rss_mb():.0f} MB over 900 searches"


def test_opening_a_note_with_no_default_app_says_so_and_offers_to_copy_its_path(vault, open_window, qtbot):
    window = open_window(vault)  # the offscreen platform has no app to open anything with
    type_query(qtbot, window, "restic")
    window.results_view.setFocus()
    qtbot.keyClick(window.results_view, Qt.Key_Return)
    assert "No app is set to open .md files" in window.status_line.message
    assert window.message_button.isVisible() and window.message_button.text() == "Copy path"
    QApplication.clipboard().clear()
    qtbot.mouseClick(window.message_button, Qt.LeftButton)
    assert QApplication.clipboard().text() == window.current_hit().abspath
    assert not window.message_button.isVisible()


def test_a_status_message_takes_the_place_of_the_stats_elided_with_a_tooltip_never_drawn_over_them(vault, open_window, qtbot):
    window = open_window(vault)
    window.resize(700, 500)
    stats = window.status_line.text()
    assert stats and window.status_line.isVisible()
    reason = "the reason at the very end of a long message is what the user needs to read"
    message = f"Could not clip https://example.org/a/rather/long/address/of/a/page/that/goes/on/and/on: {reason}"
    window.flash(message)
    line = window.status_line
    assert line.text().endswith("…") and reason not in line.text()  # one text at a time, elided
    assert line.toolTip() == message and line.fontMetrics().horizontalAdvance(line.text()) <= line.width()
    assert window.statusBar().currentMessage() == ""  # Qt's own message (drawn over the widgets) is never used
    line.clear_message()
    assert window.status_line.text() == stats


def test_eta_follows_the_recent_pace_not_the_average_since_the_start():
    from gui.workers import RateMeter

    now = [0.0]
    meter = RateMeter(window=10.0, clock=lambda: now[0])
    done, etas = 0, []
    for second in range(60):  # 1,000 passages in the first 5 s (short ones), then 20/s
        now[0] = float(second)
        done += 200 if second < 5 else 20
        meter.add(done)
        if second >= 20:
            etas.append(meter.eta(3000))
    assert all(later <= earlier for earlier, later in zip(etas, etas[1:])), etas
    assert abs(etas[-1] - (3000 - done) / 20) < 1


def test_the_idle_message_counts_notes_while_the_first_sync_runs(kb, tmp_path, open_window, qtbot):
    folder = tmp_path / "many"
    for i in range(600):
        write(folder / f"n{i:04d}.md", f"# Note {i}\n\nword{i} alpha beta\n")
    kb.collections.create(folder, name="many")
    window = open_window(kb)
    seen = []
    window.bridge.sync_progress.connect(lambda p: seen.append((p.phase, p.done, window.results_message.text())))
    with qtbot.waitSignal(window.sync_done, timeout=WAIT_MS):
        window.sync.request_sync(None)
    during = [text for phase, done, text in seen if phase == "index" and 0 < done < 600]
    assert during and during[0].startswith("Type to search") and "being indexed" in during[0]
    assert window.results_message.text() == "Type to search 600 notes."


def test_a_pmsignore_line_that_cannot_be_read_is_a_status_message_once(kb, tmp_path, open_window, qtbot):
    folder = tmp_path / "v"
    write(folder / "a.md", "# A\n\nalpha\n")
    write(folder / ".pmsignore", "drafts/\n[z-a].md\n")
    kb.collections.create(folder, name="v")
    window = open_window(kb)
    with qtbot.waitSignal(window.sync_done, timeout=WAIT_MS):
        window.sync.request_sync(None)
    message = window.status_line.message
    assert message.startswith("Ignored: ") and f"{folder / '.pmsignore'}:2: bad pattern" in message
    assert not window.message_button.isHidden() and window.message_button.text() == "Details…"
    window.status_line.clear_message()
    write(folder / "b.md", "# B\n\nbeta\n")
    with qtbot.waitSignal(window.sync_done, timeout=WAIT_MS):
        window.sync.request_sync(None)
    assert window.status_line.message.startswith("Synced: +1 new")  # said once, until the lines change


def test_an_embed_only_sync_reports_what_it_did(hybrid_kb, notes, open_window, qtbot):
    hybrid_kb.collections.create(notes, name="notes")
    hybrid_kb.sync(embed=False)
    window = open_window(hybrid_kb)
    with qtbot.waitSignal(window.sync_done, timeout=60000) as done:
        window.sync.request_sync(None)
    assert done.args[0].embedded and not done.args[0].added
    assert "passages embedded" in window.status_line.message


def test_the_badge_says_how_much_is_embedded_and_names_the_status_bar_model(hybrid_kb, notes, tmp_path, open_window, qtbot):
    hybrid_kb.collections.create(notes, name="notes")
    hybrid_kb.sync()
    for i in range(6):
        write(tmp_path / "more" / f"m{i}.md", f"# More {i}\n\n" + "Some passage text. " * 40 + "\n")
    hybrid_kb.collections.create(tmp_path / "more", name="more")
    hybrid_kb.sync(["more"], embed=False)
    info = hybrid_kb.status(pending=False)
    assert 0 < info["embedded"] < info["passages"]
    window = open_window(hybrid_kb)
    window.bridge.model_loaded.emit(hybrid_kb.load_embedder())  # as the loading thread says it
    share = int(100 * info["embedded"] / info["passages"])
    assert window.badge.text() == f"Hybrid · {share} % embedded"
    assert f"{info['embedded']:,} of {info['passages']:,} passages" in window.badge.toolTip()
    model = window.status_line.stats.rsplit("model ", 1)[1].split()[0]
    assert f"({model})" in window.badge.toolTip()


def test_the_badge_shortens_its_reason_at_a_word_and_words_the_hint_as_an_app_action():
    from gui.sync import hint_action, shorten

    why = "the index was embedded with BAAI/bge-small-en-v1.5, not sentence-transformers/all-MiniLM-L6-v2"
    short = shorten(why, 40)
    assert short.endswith("…") and short[:-1] in why and why[len(short) - 1] in " ,"
    assert hint_action(pms.Hint(command="setup")) == "click “Enable meaning search…”"
    assert "Embed notes" in hint_action(pms.Hint(command="sync"))  # the badge's own button
    assert hint_action(None) == ""
    folder = pms.Hint(setting="PMS_MODEL_DIR")
    assert hint_action(folder, "model folder /gone does not exist") == "set PMS_MODEL_DIR"
    assert hint_action(folder, "offline (make a local copy: export PMS_MODEL_DIR=...)") == ""  # said already


def test_clipping_a_page_twice_shows_the_note_without_command_line_advice(vault, html_server, open_window, qtbot):
    why = clipping_available()
    if why:
        pytest.skip(why)
    window = open_window(vault)
    url = f"{html_server}/dropbox-blog/source.html"
    with qtbot.waitSignal(window.clip_done, timeout=60000) as first:
        window.clipper.clip(url)
    assert not first.args[1]
    window.preview.clear_note()
    with qtbot.waitSignal(window.clip_done, timeout=60000) as second:
        window.clipper.clip(url)
    assert second.args[1]  # nothing new written
    message = window.status_line.message
    assert message.startswith("Already clipped") and first.args[0].name in message
    assert "--" not in message and "pms.py" not in message
    # The preview renders in steps (Markdown to HTML in a worker thread): wait for the note to land.
    qtbot.waitUntil(lambda: window.preview.abspath == first.args[0], timeout=WAIT_MS)


def test_launcher_keys_enter_opens_ctrl_enter_reveals_ctrl_k_focuses_esc_hides(vault, open_window, qtbot):
    window = open_window(vault)  # offscreen: no app opens anything, so each attempt says so
    type_query(qtbot, window, "restic")
    qtbot.keyClick(window.search_box, Qt.Key_Return)
    assert "backup.md was not opened" in window.status_line.message
    window.status_line.clear_message()
    qtbot.keyClick(window.search_box, Qt.Key_Return, Qt.ControlModifier)
    assert "folder" in window.status_line.message and "notes was not opened" in window.status_line.message
    window.results_view.setFocus()
    qtbot.keyClick(window.results_view, Qt.Key_K, Qt.ControlModifier)
    assert window.search_box.hasFocus() and window.search_box.selectedText() == "restic"
    qtbot.keyClick(window.search_box, Qt.Key_Escape)  # first Esc clears...
    assert window.search_box.text() == "" and window.isVisible() and not window.isMinimized()
    qtbot.keyClick(window.search_box, Qt.Key_Escape)  # ...the second gets the window out of the way
    qtbot.waitUntil(lambda: window.isMinimized() or not window.isVisible(), timeout=WAIT_MS)
    window.summon()
    assert window.isVisible() and not window.isMinimized()


def test_enter_right_after_typing_searches_first(vault, open_window, qtbot):
    window = open_window(vault)
    window.search_box.setText("restic")  # no search has answered yet
    with qtbot.waitSignal(window.results_shown, timeout=WAIT_MS):
        qtbot.keyClick(window.search_box, Qt.Key_Return)
    assert "was not opened" not in window.status_line.message


def test_results_show_why_not_scores_plain_snippets_and_one_row_per_duplicate(kb, tmp_path, open_window, qtbot):
    from gui.results import hit_html

    page = ("# Smart Pointers\n\nA **smart pointer** like `Box<T>` acts as a pointer; see [the docs](https://doc.rust-lang.org)"
            " and <span class=\"note\">this</span> _remark_.\n")
    for edition in ("first-edition", "second-edition", "2018-edition"):
        write(tmp_path / "book" / edition / "smart-pointers.md", page)
    write(tmp_path / "book" / "other.md", "# Other\n\nNothing about smart pointers here, just a pointer.\n")
    kb.collections.create(tmp_path / "book", name="book")
    kb.sync()
    window = open_window(kb)
    type_query(qtbot, window, "smart pointer")
    model = window.results_model
    titles = [hit.title for hit in model.hits]
    assert titles.count("Smart Pointers") == 1 and "Other" in titles  # three editions, one row
    row = model.hit_row(titles.index("Smart Pointers"))
    assert len(model.copies[row]) == 2
    hit = model.hits[titles.index("Smart Pointers")]
    shown = hit_html(hit, window.palette(), False, len(model.copies[row]))
    assert "+2 similar copies" in shown
    assert f"{hit.score:.3g}" not in shown  # no raw score...
    assert "keyword rank" in model.item(row).toolTip()  # ...the reason instead
    for markup in ("**", "](", "&lt;span", "`", "_remark"):
        assert markup not in shown, markup
    assert "Box&lt;T&gt;" in shown and "the docs" in shown


def test_hybrid_results_divide_notes_with_the_words_from_related_ones(hybrid_kb, notes, open_window, qtbot):
    from gui.results import NO_WORDS, ONLY_MEANING

    hybrid_kb.collections.create(notes, name="notes")
    hybrid_kb.sync()
    window = open_window(hybrid_kb)
    window.bridge.model_loaded.emit(hybrid_kb.load_embedder())  # as the loading thread says it
    type_query(qtbot, window, "laptop")
    rows = window.results_model.rows
    assert ONLY_MEANING in rows
    split = rows.index(ONLY_MEANING)
    assert split > 0 and all(h.bm25_rank is not None for h in rows[:split])
    assert all(h.bm25_rank is None for h in rows[split + 1:])
    type_query(qtbot, window, "automobile")  # in no note
    assert window.results_model.rows[0] == NO_WORDS
    assert window.current_hit() is window.results_model.hits[0]  # the label is not selectable


def test_the_start_page_lists_pinned_and_recent_notes_and_the_keys(vault, open_window, qtbot):
    from gui.idle import PINNED_LABEL, RECENT_LABEL

    window = open_window(vault)
    assert "Type to search 3 notes" in window.preview.toPlainText() and "Ctrl+K" in window.preview.toPlainText()
    type_query(qtbot, window, "restic")  # read backup.md
    type_query(qtbot, window, "syncthing")
    window.results_view.setFocus()
    qtbot.keyClick(window.results_view, Qt.Key_D, Qt.ControlModifier)  # pin sync.md
    window.search.focus_search()
    qtbot.keyClick(window.search_box, Qt.Key_Escape)
    rows = [r if isinstance(r, str) else r.path for r in window.results_model.rows]
    assert rows == [PINNED_LABEL, "sync.md", RECENT_LABEL, "backup.md"]
    assert window.preview.abspath is None and "Ctrl+Return" in window.preview.toPlainText()
    window.close()
    again = open_window(vault)  # remembered across launches
    assert [r if isinstance(r, str) else r.path for r in again.results_model.rows] == rows
    again.results_view.setCurrentIndex(again.results_model.index(1, 0))
    qtbot.waitUntil(lambda: again.preview.abspath is not None and again.preview.abspath.name == "sync.md", timeout=WAIT_MS)


def test_the_setup_button_runs_setup_with_progress_and_can_be_cancelled(vault, open_window, qtbot):
    import sys

    window = open_window(vault)

    assert window.sync.setup_command == [sys.executable, str(REPO / "pms.py"), "setup"]  # what the button runs
    # The real command downloads hundreds of MB: a stand-in child process that talks like pip and takes long.
    window.sync.setup_command = [sys.executable, "-c", "import time; print('Collecting fastembed', flush=True); time.sleep(60)"]
    window.sync.run_setup()
    qtbot.waitUntil(lambda: "Collecting fastembed" in window.progress_label.text(), timeout=WAIT_MS)
    assert window.cancel_button.isVisible() and window.progress_bar.isVisible()
    with qtbot.waitSignal(window.setup_done, timeout=WAIT_MS) as done:
        qtbot.mouseClick(window.cancel_button, Qt.LeftButton)
    assert done.args == [False]
    assert window.status_line.message.startswith("Setup cancelled")
    assert not window.cancel_button.isVisible()
    window.sync.setup_command = [sys.executable, "-c", "print('Done: pms.py now uses these packages')"]
    with qtbot.waitSignal(window.setup_done, timeout=WAIT_MS) as done:
        window.sync.run_setup()
    assert done.args == [True] and "restart PMS" in window.status_line.message


def test_a_sync_asked_for_during_setup_waits_for_it_and_cancel_still_stops_the_setup(vault, open_window, qtbot):
    import sys

    window = open_window(vault)
    window.sync.setup_command = [sys.executable, "-c", "import time; print('Collecting fastembed', flush=True); time.sleep(60)"]
    window.sync.run_setup()
    qtbot.waitUntil(lambda: "Collecting fastembed" in window.progress_label.text(), timeout=WAIT_MS)
    window.sync.request_sync(None)  # a watcher's sync, F5, or an added folder while pip runs
    assert not window.sync.sync_running()  # it waits: the setup is still the job the progress line shows
    window.sync.run_setup()  # a second setup is refused while the first runs
    assert "Wait for the running sync or setup" in window.status_line.message
    with qtbot.waitSignal(window.setup_done, timeout=WAIT_MS) as done:
        qtbot.mouseClick(window.cancel_button, Qt.LeftButton)  # Cancel stops the setup, not a sync
    assert done.args == [False]
    with qtbot.waitSignal(window.sync_done, timeout=WAIT_MS):
        pass  # then the waiting sync runs


def test_a_mostly_foreign_vault_is_offered_a_multilingual_model_once(kb, tmp_path, open_window, qtbot, monkeypatch):
    folder = tmp_path / "mixed"
    for i in range(4):
        write(folder / f"ru{i}.md", f"# Заметка {i}\n\nКак синхронизировать заметки между ноутбуком и телефоном, и что делать.\n")
    write(folder / "en.md", "# Note\n\nHow to keep the notes in sync between the laptop and the phone.\n")
    kb.collections.create(folder, name="mixed")
    window = open_window(kb)
    with qtbot.waitSignal(window.sync_done, timeout=WAIT_MS):
        window.sync.request_sync(None)
    assert "4 of 5 notes are not in English" in window.status_line.message
    assert window.message_button.isVisible() and window.message_button.text() == "Multilingual search…"
    shown = []
    monkeypatch.setattr("gui.window.QMessageBox.information", lambda parent, title, text: shown.append(text))
    qtbot.mouseClick(window.message_button, Qt.LeftButton)
    assert shown and "--embed-url" in shown[0]
    window.statusBar().clearMessage()
    with qtbot.waitSignal(window.sync_done, timeout=WAIT_MS):
        window.sync.request_sync(None)
    assert "not in English" not in window.status_line.message, "said once per index"
