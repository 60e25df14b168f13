"""The search controller: typing, results, the selected note in the preview and
Related, keys in the search bar, Back/Forward through the notes read."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, QUrl
from PySide6.QtGui import QDesktopServices, QGuiApplication, QKeySequence
from PySide6.QtWidgets import QMenu

import pms
from gui.idle import NoteShelf, hints_html
from gui.preview import pdf_page_markdown

DEBOUNCE_MS = 120          # while typing fast, search at most this often
PREVIEW_DEBOUNCE_MS = 90   # while an arrow key repeats, render the preview at most this often
PREVIEW_SETTLE_MS = 200    # new results: their first note is rendered once typing has paused this long
RESULTS = 30
HISTORY = 50               # notes Back remembers


# PDF viewers that open a file at a page, by the name of their desktop entry
# (Linux: ``xdg-mime query default application/pdf``). Others open at page 1.
PDF_PAGE_VIEWERS = {
    "evince": ["evince", "--page-index={page}", "{path}"],
    "atril": ["atril", "--page-index={page}", "{path}"],
    "xreader": ["xreader", "--page-index={page}", "{path}"],
    "okular": ["okular", "--page", "{page}", "{path}"],
    "zathura": ["zathura", "--page={page}", "{path}"],
    "qpdfview": ["qpdfview", "{path}#{page}"],
    "mupdf": ["mupdf", "{path}", "{page}"],
    "sumatrapdf": ["SumatraPDF", "-page", "{page}", "{path}"],
}


def default_pdf_viewer() -> str:
    """The desktop entry of the system's PDF viewer ("org.gnome.Evince.desktop"); "" when unknown."""
    if sys.platform.startswith("linux") and shutil.which("xdg-mime"):
        try:
            answer = subprocess.run(["xdg-mime", "query", "default", "application/pdf"], capture_output=True,
                                    text=True, timeout=3, check=False)
            return answer.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    return ""


def pdf_viewer_command(viewer: str, path: Path, page: int) -> list[str] | None:
    """The command that opens ``path`` at ``page`` in ``viewer`` (a desktop entry
    name), or None when that viewer takes no page argument."""
    name = viewer.lower()
    for key, command in PDF_PAGE_VIEWERS.items():
        if key in name:
            return [part.format(path=path, page=page) for part in command]
    return None


class SearchController(QObject):
    """``offers``: what takes a pasted URL in the search bar (the ClipController's
    offer_clip_from_clipboard, accept_offer and drop_offer, each True when it acted)."""

    def __init__(self, window, offers):
        super().__init__(window)
        self.w = window
        self.offers = offers
        self.model_ready = False                # searches read meaning once the model is loaded (set_model_ready)
        self.indexing = False                   # a sync runs (set_indexing)
        self.shelf = NoteShelf(window.settings)
        self.search_seq = 0
        self.last_submit = 0.0
        self.last_search_seconds = 0.0
        self.focus_path: str | None = None      # a note to select when the next results come (a fresh clip)
        self.last_preview = 0.0                 # when the preview last rendered a result (monotonic seconds)
        self.back: list = []                    # notes read before the one shown (Hits), newest last
        self.forward: list = []
        self.shown_hit = None                   # the Hit in the preview
        self.debounce = QTimer(self, singleShot=True, interval=DEBOUNCE_MS)
        self.debounce.timeout.connect(self.search_now)
        self.preview_timer = QTimer(self, singleShot=True, interval=PREVIEW_DEBOUNCE_MS)
        self.preview_timer.timeout.connect(self.show_current)

    def connect(self) -> None:
        w = self.w
        w.search_box.textChanged.connect(self._typed)
        w.search_box.installEventFilter(self)
        w.results_view.installEventFilter(self)
        w.collection_combo.currentIndexChanged.connect(self._collection_chosen)
        w.results_view.selectionModel().currentChanged.connect(self._current_changed)
        w.results_view.activated.connect(lambda index: self.open_hit(w.results_model.hit_at(index)))
        w.results_view.customContextMenuRequested.connect(self._results_menu)
        w.filter_bar.changed.connect(self._filters_changed)
        w.related.open_requested.connect(lambda hit: self.show_hit(hit, remember=True))
        w.results_view.viewport().installEventFilter(self)  # a new width: rows wrap anew, their heights change
        w.preview.note_followed.connect(self._note_followed)
        w.bridge.results.connect(self._show_results)
        w.bridge.search_failed.connect(self._search_failed)
        w.back_action.triggered.connect(self.go_back)
        w.forward_action.triggered.connect(self.go_forward)
        for shortcut in w.focus_shortcuts:
            shortcut.activated.connect(self.focus_search)
        w.pin_shortcut.activated.connect(self.toggle_pin)

    # -- what the other controllers say (MainWindow connects their signals here) ---------------
    def set_model_ready(self, ready: bool) -> None:
        self.model_ready = ready

    def set_indexing(self, running: bool) -> None:
        self.indexing = running

    def notes_indexed(self) -> None:
        if not self.w.search_box.text().strip():
            self.show_idle_text()  # the count of notes searchable so far

    def collections_changed(self, names: list) -> None:
        if names and not self.w.search_box.text().strip():
            self.show_start_page()

    def hold_results(self, text: str) -> None:
        """``text`` in place of the results (a clip offer); results on their way are dropped."""
        self.search_seq += 1
        self._show_message(text)

    def offer_withdrawn(self) -> None:
        if not self.w.search_box.text().strip():
            self.show_start_page()

    def find_note(self, path: str, title: str) -> None:
        """Search for a new note by its title, and select it when the results come (a fresh clip)."""
        self.focus_path = path
        self.w.search_box.setText(title)
        self.search_now()

    # -- typing --------------------------------------------------------------------------
    def focus_search(self) -> None:
        self.w.search_box.setFocus()
        self.w.search_box.selectAll()

    def search_mode(self) -> str:
        # Until the model is loaded, "auto" would load it inside the first search.
        return "auto" if self.model_ready else "keyword"

    def selected_collections(self) -> list[str] | None:
        name = self.w.collection_combo.currentData()
        return [name] if name else None

    def _filters_changed(self) -> None:
        if self.w.search_box.text().strip() or self.w.filter_bar.active():
            self.search_now()
        else:
            self._typed("")

    def _typed(self, text: str) -> None:
        w = self.w
        self.offers.drop_offer()
        if not text.strip() and not w.filter_bar.active():
            self.debounce.stop()
            self.search_seq += 1  # results still on their way are now stale
            self.preview_timer.stop()
            if w.results_model.query and self.current_hit() is not None:
                self.remember(self.current_hit())  # the note read last is the one worth finding again
            self.show_start_page()  # one model reset: no row-by-row walk, no preview render
            return
        if self.preview_timer.isActive():
            self.preview_timer.start(PREVIEW_SETTLE_MS)  # typing on: the preview waits for the pause
        # Leading edge: a lone keystroke searches at once; fast typing searches every DEBOUNCE_MS.
        if not self.debounce.isActive() and time.monotonic() - self.last_submit >= DEBOUNCE_MS / 1000:
            self.search_now()
        else:
            self.debounce.start()

    def search_now(self) -> None:
        self.debounce.stop()
        query = self.w.search_box.text()
        note_filter = self.w.filter_bar.note_filter()
        self.w.layout_controller.end_view_message(query)
        if not query.strip() and not note_filter:
            return
        self.search_seq += 1
        self.last_submit = time.monotonic()
        # The last word matches as a prefix while typing, once it has a few letters (the engine's rule).
        self.w.searcher.submit(self.search_seq, query, self.search_mode(), self.selected_collections(), RESULTS,
                               True, note_filter)

    def _collection_chosen(self, _index: int) -> None:
        self.w.settings.setValue("search/collection", self.w.collection_combo.currentData() or "")
        self.search_now()

    def _show_results(self, seq: int, query: str, result, seconds: float) -> None:
        w = self.w
        if seq != self.search_seq:
            return  # an older query's answer; a newer one is on its way
        self.last_search_seconds = seconds
        # The divider's header tells the truth: none for a filter-only listing, and
        # "no note contains these words" only once the words are whole.
        w.results_model.set_result(result, query, words_complete=not pms.is_partial_word(query))
        hits = w.results_model.hits
        if hits:
            w.results_stack.setCurrentWidget(w.results_view)
            wanted = [i for i, hit in enumerate(hits) if hit.abspath == self.focus_path]
            if not wanted:
                self.focus_path = None
            # The list is painted first; the preview (tens of ms for a long chapter) waits until
            # typing pauses, so it never stands between a keystroke and its results.
            self.preview_timer.start(PREVIEW_SETTLE_MS)
            w.results_view.setCurrentIndex(w.results_model.index(w.results_model.hit_row(wanted[0] if wanted else 0), 0))
        else:
            w.preview.clear_note()
            w.related.clear()
            self._show_message(f"No notes match “{query.strip()}”." if query.strip() else self._no_listing_message())
        w.results_shown.emit(query)

    def _no_listing_message(self) -> str:
        """A filter that lists nothing; a ``path:`` that names a folder (pms.path_prefix_glob):
        say how to match names that start with it."""
        path = self.w.filter_bar.note_filter().path
        glob = pms.path_prefix_glob(path)
        if glob:
            return f"No notes match the filter. path:{path} is a folder; path:'{glob}' matches names that start with it."
        return "No notes match the filter."

    def _search_failed(self, seq: int, message: str) -> None:
        if seq == self.search_seq:
            self._show_message(message)
            self.w.results_shown.emit(self.w.search_box.text())

    def _show_message(self, text: str) -> None:
        self.w.results_message.setText(text)
        self.w.results_stack.setCurrentWidget(self.w.results_message)

    def _idle_message(self) -> str:
        # The collections' own counts: kb.status() counts everything (20+ ms), and this
        # runs on every clear of the search bar and twice a second during a sync.
        notes = sum(col.counts()[0] for col in self.w.kb.collections.list())
        running = self.indexing
        if notes:
            return f"Type to search {notes:,} notes." + (" More are being indexed…" if running else "")
        return "Indexing your notes…" if running else "No notes indexed yet."

    # -- the selected note -------------------------------------------------------------------
    def current_hit(self):
        return self.w.results_model.hit_at(self.w.results_view.currentIndex())

    def _current_changed(self, current, _previous) -> None:
        hit = self.w.results_model.hit_at(current)
        if hit is None:
            return
        # Leading edge: a lone move shows its note at once; rows passed through
        # while an arrow key repeats wait until the keys rest. Meanwhile the
        # preview and Related say which note is coming, never show another one.
        if self.preview_timer.isActive() or time.monotonic() - self.last_preview < PREVIEW_DEBOUNCE_MS / 1000:
            self.preview_timer.start()
            if self.shown_hit is None or (self.shown_hit.collection, self.shown_hit.path) != (hit.collection, hit.path):
                self.w.preview.show_pending(hit.title or hit.path)
                self.w.related.show_pending(hit)
                self.shown_hit = None
        else:
            self.show_current()

    def show_current(self) -> None:
        self.preview_timer.stop()
        self.preview_timer.setInterval(PREVIEW_DEBOUNCE_MS)
        self.last_preview = time.monotonic()
        hit = self.current_hit()
        if hit is not None:
            self.show_hit(hit)

    def show_start_page(self) -> None:
        """Empty search bar: pinned and recent notes, and the keys worth knowing."""
        w = self.w
        w.results_model.set_sections(self.shelf.sections(w.kb))
        w.preview.clear_note()
        w.related.clear()
        self.shown_hit = None
        if w.results_model.hits:
            w.results_stack.setCurrentWidget(w.results_view)
        self.show_idle_text()

    def show_idle_text(self) -> None:
        w = self.w
        message = self._idle_message()
        w.results_message.setText(message)
        if not w.results_model.hits:
            w.results_stack.setCurrentWidget(w.results_message)
        if w.preview.abspath is None:
            w.preview.setHtml(hints_html(message))

    def toggle_pin(self, hit=None) -> None:
        hit = hit or self.current_hit()
        if hit is not None:
            pinned = self.shelf.toggle_pin(f"{hit.collection}/{hit.path}")
            self.w.flash(f"{'Pinned' if pinned else 'Unpinned'} “{hit.title or hit.path}”" +
                         (": it stays on the start page" if pinned else ""))
            if not self.w.search_box.text().strip():
                self.show_start_page()

    def show_hit(self, hit, remember: bool = False) -> None:
        """Show ``hit``'s note in the preview (at its passage) and its related notes.
        ``remember``: a step away from the note shown (Back returns to it)."""
        w = self.w
        if remember and self.shown_hit is not None:
            self.back = (self.back + [self.shown_hit])[-HISTORY:]
            self.forward = []
        page = hit.page  # a PDF's passage: its page is shown, the passage tinted
        ref = f"#{hit.docid}" if hit.docid else f"{hit.collection}/{hit.path}"
        try:
            doc = w.kb.get(f"{ref}:{page}" if page else ref)
        except pms.PMSError as exc:
            w.flash(str(exc))
            w.preview.clear_note()
            return
        words = w.results_model.words  # the words of the search it was found by (none on the start page)
        from_top = hit.abspath == self.focus_path  # a fresh clip: read it from its start
        self.focus_path = None
        self.shown_hit = hit
        text, start_line, end_line, heading = doc.text, hit.start_line, hit.end_line, hit.heading_path
        if page:
            text, start_line, end_line = pdf_page_markdown(doc.title, page, doc.text, hit.start_line, hit.end_line)
            heading = ""
        w.preview.show_note(doc.abspath, text=text, start_line=0 if from_top else start_line,
                            end_line=end_line, heading="" if from_top else heading, words=words, staged=True)
        w.related.show_for(hit)
        self._update_history_actions()

    def _note_followed(self, abspath: str) -> None:
        """A link followed in the preview: Back returns to the note it was in."""
        try:
            doc = self.w.kb.get(abspath)
        except pms.PMSError:
            return  # a note outside the index: shown, but not one to come back to
        hit = doc.as_hit()
        if self.shown_hit is not None:
            self.back = (self.back + [self.shown_hit])[-HISTORY:]
            self.forward = []
        self.shown_hit = hit
        self.w.related.show_for(hit)
        self._update_history_actions()

    def go_back(self) -> None:
        if self.back:
            if self.shown_hit is not None:
                self.forward.append(self.shown_hit)
            self.show_hit(self.back.pop())

    def go_forward(self) -> None:
        if self.forward:
            if self.shown_hit is not None:
                self.back.append(self.shown_hit)
            self.show_hit(self.forward.pop())

    def _update_history_actions(self) -> None:
        self.w.back_action.setEnabled(bool(self.back))
        self.w.forward_action.setEnabled(bool(self.forward))

    # -- keys ------------------------------------------------------------------------------
    def eventFilter(self, watched, event) -> bool:
        w = self.w
        if event.type() == QEvent.Resize and watched is w.results_view.viewport():
            if event.size().width() != event.oldSize().width():
                w.results_view.doItemsLayout()  # (a list lays rows out again on a new height only)
            return False
        if event.type() != QEvent.KeyPress:
            return False
        key = event.key()
        if watched is w.search_box and event.matches(QKeySequence.Paste) and self.offers.offer_clip_from_clipboard():
            return True  # a lone URL: offered for clipping, not searched
        if watched is w.search_box and key in (Qt.Key_Down, Qt.Key_Up, Qt.Key_PageDown, Qt.Key_PageUp):
            self._move_current(key)
            return True
        if watched is w.search_box and key == Qt.Key_Escape:
            if self.offers.drop_offer():
                pass
            elif w.search_box.text():
                w.search_box.clear()
            else:
                w.dismiss()  # Esc on an empty query: out of the way, as launchers do
            return True
        if watched is w.results_view and key == Qt.Key_Escape:
            self.focus_search()
            return True
        if watched in (w.search_box, w.results_view) and key in (Qt.Key_Return, Qt.Key_Enter):
            if watched is w.search_box and self.offers.accept_offer():
                pass
            elif event.modifiers() & Qt.ControlModifier:  # Cmd on macOS
                self.reveal(self.current_hit())
            elif event.modifiers() & Qt.ShiftModifier:
                self.open_in_obsidian(self.current_hit())
            elif watched is w.search_box and (self.debounce.isActive() or w.results_model.query != w.search_box.text()):
                self.search_now()  # results for what was typed are not in yet
            else:
                self.open_hit(self.current_hit())
            return True
        return False

    def _move_current(self, key) -> None:
        model = self.w.results_model
        if not model.hits:
            return
        step = {Qt.Key_Down: 1, Qt.Key_Up: -1, Qt.Key_PageDown: 5, Qt.Key_PageUp: -5}[key]
        current = self.current_hit()
        position = next((i for i, hit in enumerate(model.hits) if hit is current), 0)  # dividers are no stop
        position = min(len(model.hits) - 1, max(0, position + step))
        self.w.results_view.setCurrentIndex(model.index(model.hit_row(position), 0))

    # -- results actions -----------------------------------------------------------------
    def open_hit(self, hit) -> bool:
        """Open the hit's note (a PDF at its page) with the system's app; whether it opened."""
        if hit is None:
            return False
        self.remember(hit)
        return self.open_pdf_page(Path(hit.abspath), hit.page) if hit.page else self.open_path(Path(hit.abspath))

    def open_in_obsidian(self, hit) -> None:
        """Open the hit's note in Obsidian (the engine's ``obsidian_url``); a note in no vault opens as usual."""
        if hit is None:
            return
        if not hit.obsidian_url:
            if self.open_hit(hit):
                self.w.flash(f"{Path(hit.abspath).name} is in no Obsidian vault: opened in its usual app")
            return
        self.remember(hit)
        if not QDesktopServices.openUrl(QUrl(hit.obsidian_url)):
            self.w.flash("Obsidian did not open the note (is it installed?)", "Open",
                         lambda: self.open_path(Path(hit.abspath)))

    def open_pdf_page(self, path: Path, page: int) -> bool:
        """Open a PDF at ``page`` in the system's PDF viewer when it takes a page
        argument; else open it as usual and say which page to turn to."""
        command = pdf_viewer_command(default_pdf_viewer(), path, page)
        if command and shutil.which(command[0]):
            try:
                subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                return True
            except OSError:
                pass
        if self.open_path(path):
            self.w.flash(f"Opened {path.name}: your PDF viewer cannot be told a page, so turn to p. {page}")
            return True
        return False

    def remember(self, hit) -> None:
        self.shelf.remember(f"{hit.collection}/{hit.path}")

    def open_path(self, path: Path) -> bool:
        """Open a note or folder with the system's default app; say so when there is none."""
        if QDesktopServices.openUrl(QUrl.fromLocalFile(str(path))):
            return True
        kind = "folder" if path.is_dir() else f"{path.suffix or 'such'} files"
        self.w.flash(f"No app is set to open {kind} on this system: {path.name} was not opened",
                     "Copy path", lambda: self.copy_text(str(path), "Path copied"))
        return False

    def reveal(self, hit) -> None:
        """Show the note in the file manager: selected where the system can, else its folder."""
        if hit is None:
            return
        path = Path(hit.abspath)
        command = (["open", "-R", str(path)] if sys.platform == "darwin" else
                   ["explorer", f"/select,{path}"] if sys.platform == "win32" else None)
        if command and shutil.which(command[0]):
            subprocess.Popen(command)
            return
        self.open_path(path.parent)

    def copy_text(self, text: str, done: str = "Copied") -> None:
        QGuiApplication.clipboard().setText(text)
        self.w.flash(f"{done}: {text}")

    def _results_menu(self, pos) -> None:
        w = self.w
        hit = w.results_model.hit_at(w.results_view.indexAt(pos))
        if hit is None:
            return
        menu = QMenu(w)
        if hit.page:
            menu.addAction(f"Open at page {hit.page}", lambda: self.open_pdf_page(Path(hit.abspath), hit.page))
            menu.addAction("Open", lambda: self.open_path(Path(hit.abspath)))
        else:
            menu.addAction("Open", lambda: self.open_hit(hit))
        if hit.obsidian_url:
            menu.addAction("Open in Obsidian", lambda: self.open_in_obsidian(hit))
        menu.addAction("Copy path", lambda: self.copy_text(hit.abspath, "Path copied"))
        menu.addAction("Copy reference", lambda: self.copy_text(f"{hit.collection}/{hit.path}", "Reference copied"))
        menu.addAction("Open containing folder", lambda: self.reveal(hit))
        pinned = f"{hit.collection}/{hit.path}" in self.shelf.pinned
        menu.addAction("Unpin from the start page" if pinned else "Pin to the start page", lambda: self.toggle_pin(hit))
        menu.exec(w.results_view.viewport().mapToGlobal(pos))
