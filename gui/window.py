"""The main window: search bar, results, preview, collections, sync, clipping."""

from __future__ import annotations

import datetime as dt
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from PySide6.QtCore import QEvent, QSettings, QSize, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import (QComboBox, QSystemTrayIcon, QFileDialog, QFrame, QHBoxLayout, QInputDialog, QLabel, QLineEdit,
                               QListView, QMainWindow, QMenu, QMessageBox, QProgressBar, QPushButton,
                               QSplitter, QStackedWidget, QToolButton, QVBoxLayout, QWidget, QAbstractItemView)

import pms
from gui.idle import NoteShelf, hints_html
from gui.notes import FilterBar, RelatedPanel
from gui.preview import NotePreview, pdf_page_markdown
from gui.results import HitDelegate, ResultsModel
from gui.workers import (Bridge, FolderWatcher, RateMeter, SearchThread, SetupJob, SyncJob, clip_in_background, emit,
                         load_model_in_background)

PMS_SCRIPT = Path(__file__).resolve().parent.parent / "pms.py"  # the gui package sits next to it
DEBOUNCE_MS = 120          # while typing fast, search at most this often
PREVIEW_DEBOUNCE_MS = 90   # while an arrow key repeats, render the preview at most this often
PREVIEW_SETTLE_MS = 200    # new results: their first note is rendered once typing has paused this long
RESULTS = 30
PREFIX_MIN_LETTERS = 3
MESSAGE_MS = 6000          # how long a status-bar message stays
URL_RE = re.compile(r"^https?://\S+$", re.I)
CLIPPABLE_FILES = (".html", ".htm", ".xhtml", ".pdf")
BADGE_STYLE = "QLabel {{ background:{bg}; color:white; border-radius:9px; padding:2px 10px; font-weight:600; }}"


def shorten(text: str, limit: int) -> str:
    """``text`` cut at a word boundary to at most ``limit`` characters."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    return text[: limit].rsplit(" ", 1)[0].rstrip(",;:·-") + "…"


# An engine Hint's command as the app offers it: its button or menu item (pms.Hint).
HINT_ACTIONS = {"setup": "click “Enable meaning search…”", "sync": "choose Collections ▸ Sync all now",
                "sync --reembed": "run Sync with “re-embed” from the command line"}


def hint_action(hint) -> str:
    """What the app tells the user to do about an engine Hint ('' for none)."""
    if hint is None:
        return ""
    if hint.command:
        return HINT_ACTIONS.get(hint.command, f"run “pms {hint.command}”")
    return f"set {hint.setting}" if hint.setting else ""


def model_label(info: dict) -> str:
    """The embedding model as the badge and the status bar both name it (the index's)."""
    return (info.get("model") or "none").split("/")[-1]


def first_line(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"



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


class WelcomePanel(QFrame):
    """First run: what PMS does and one button; the whole panel is a drop zone."""

    def __init__(self, add_folder, parent=None):
        super().__init__(parent)
        self.setObjectName("welcome")
        outer = QVBoxLayout(self)
        outer.addStretch(1)
        title = QLabel("<h2>Search your notes, privately</h2>")
        title.setAlignment(Qt.AlignCenter)
        # Explicit line breaks: a word-wrapped label in a centred layout gets squeezed to one line's height.
        blurb = QLabel("PMS indexes folders of Markdown notes on this computer<br>"
                       "and finds things by keyword or by meaning. Nothing leaves your machine.")
        blurb.setAlignment(Qt.AlignCenter)
        self.button = QPushButton("Add a folder…")
        self.button.setDefault(True)
        self.button.clicked.connect(add_folder)
        zone = QLabel("or drop a folder of notes here\n(drop a web page link to clip it once a folder is added)")
        zone.setObjectName("dropzone")
        zone.setAlignment(Qt.AlignCenter)
        zone.setMinimumSize(QSize(420, 140))
        zone.setStyleSheet("#dropzone { border: 2px dashed palette(mid); border-radius: 12px; "
                           "color: palette(placeholder-text); padding: 16px; }")
        for widget in (title, blurb, self.button, zone):
            outer.addWidget(widget, 0, Qt.AlignHCenter)
            outer.addSpacing(10)
        outer.addStretch(2)


class MainWindow(QMainWindow):
    # For tests and benchmarks: what the user can see just changed.
    results_shown = Signal(str)
    sync_done = Signal(object)            # SyncReport, or None when it failed
    clip_done = Signal(object, str)       # the new note's path or None, error message
    setup_done = Signal(bool)             # pms.py setup finished (True: installed)

    def __init__(self, kb: pms.KnowledgeBase, settings: QSettings | None = None):
        super().__init__()
        self.kb = kb
        self.settings = settings or QSettings("PMS", "PMS")
        self.shelf = NoteShelf(self.settings)
        self.bridge = Bridge()
        self.searcher = SearchThread(kb, self.bridge)
        self.searcher.start()
        self.search_seq = 0
        self.last_submit = 0.0
        self.model_state = "loading" if kb.embeddings_enabled else "off"
        self.sync_job: SyncJob | None = None
        self.sync_queue: set[str] | None = None    # None: nothing waiting; empty set: every collection
        self.sync_phase = ""
        self.setup_job: SetupJob | None = None
        self.setup_command = [sys.executable, str(PMS_SCRIPT), "setup"]
        self.rate = RateMeter()                 # the sync's recent pace, for an ETA that follows it
        self.last_search_seconds = 0.0
        self.focus_path: str | None = None      # a note to select when the next results come (a fresh clip)
        self.last_preview = 0.0                 # when the preview last rendered a result (monotonic seconds)
        self.setWindowTitle("PMS — private search for your notes")
        self.setAcceptDrops(True)
        self._build()
        self._connect()
        self.refresh_collections()
        self.update_badge()
        self.update_stats()
        self._restore_settings()
        self.search_box.setFocus()

    # -- layout ----------------------------------------------------------------------
    def _build(self) -> None:
        self.search_box = QLineEdit(placeholderText="Search your notes…  (words, \"a phrase\", -exclude)")
        self.search_box.setClearButtonEnabled(True)
        self.search_box.setAcceptDrops(False)  # a dropped link is for clipping, not for the query
        font = self.search_box.font()
        font.setPointSizeF(font.pointSizeF() * 1.25)
        self.search_box.setFont(font)
        self.search_box.setMinimumHeight(34)
        self.collection_combo = QComboBox(minimumContentsLength=14)
        self.collection_combo.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.collection_combo.setToolTip("Search in one collection or all of them")
        self.badge = QLabel()
        self.badge.setMaximumWidth(360)
        top = QWidget()
        row = QHBoxLayout(top)
        row.setContentsMargins(10, 8, 10, 6)
        row.addWidget(self.search_box, 1)
        row.addWidget(self.collection_combo)
        row.addWidget(self.badge)
        self.setup_button = QToolButton(text="Enable meaning search…", visible=False,
                                        toolTip="Install the optional packages for search by meaning (as pms.py setup does)")
        self.setup_button.clicked.connect(self.run_setup)
        row.addWidget(self.setup_button)

        self.results_model = ResultsModel(self)
        self.results_view = QListView()
        self.results_view.setModel(self.results_model)
        self.results_view.setItemDelegate(HitDelegate(self.results_view))
        self.results_view.setResizeMode(QListView.Adjust)
        self.results_view.setLayoutMode(QListView.Batched)  # the visible rows first, the rest between events
        self.results_view.setBatchSize(10)
        self.results_view.setVerticalScrollMode(QAbstractItemView.ScrollPerPixel)
        self.results_view.setSelectionMode(QAbstractItemView.SingleSelection)
        self.results_view.setContextMenuPolicy(Qt.CustomContextMenu)
        self.results_view.setAcceptDrops(False)
        self.results_view.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.results_message = QLabel(alignment=Qt.AlignCenter, wordWrap=True)
        self.results_message.setStyleSheet("color: palette(placeholder-text); padding: 24px;")
        self.results_stack = QStackedWidget()
        self.results_stack.addWidget(self.results_view)
        self.results_stack.addWidget(self.results_message)
        self.preview = NotePreview(self.kb)
        self.splitter = QSplitter(Qt.Horizontal)
        self.splitter.addWidget(self.results_stack)
        self.splitter.addWidget(self.preview)
        self.related = RelatedPanel(self.kb)
        self.splitter.addWidget(self.related)
        self.filter_bar = FilterBar(self.kb)
        self.splitter.setStretchFactor(0, 2)
        self.splitter.setStretchFactor(1, 3)
        self.splitter.setSizes([420, 620])
        self.splitter.setStretchFactor(2, 1)
        self.splitter.setSizes([380, 520, 200])  # results, preview, related
        self.splitter.setChildrenCollapsible(False)

        self.welcome = WelcomePanel(self.add_folder_dialog)
        self.pages = QStackedWidget()
        self.pages.addWidget(self.welcome)
        self.pages.addWidget(self.splitter)
        central = QWidget()
        column = QVBoxLayout(central)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        column.addWidget(top)
        column.addWidget(self.filter_bar)
        column.addWidget(self.pages, 1)
        self.setCentralWidget(central)

        self.stats_label = QLabel()
        self.progress_label = QLabel()
        self.progress_bar = QProgressBar(maximumWidth=180, textVisible=False)
        self.cancel_button = QToolButton(text="Cancel", toolTip="Stop the sync; the index stays consistent")
        self.cancel_button.clicked.connect(self.cancel_sync)
        self.message_button = QToolButton()  # the one thing to do about the message shown ("Copy path")
        self.message_button.hide()
        self.message_button.clicked.connect(self._message_action)
        self.message_callback = None
        self.statusBar().addPermanentWidget(self.message_button)
        for widget in (self.progress_label, self.progress_bar, self.cancel_button):
            widget.hide()
            self.statusBar().addPermanentWidget(widget)
        # A normal (not permanent) widget: a message takes its place instead of being cut behind it.
        self.statusBar().addWidget(self.stats_label, 1)
        self.statusBar().messageChanged.connect(self._message_changed)
        self._build_menus()
        self._build_tray()
        self.debounce = QTimer(self, singleShot=True, interval=DEBOUNCE_MS)
        self.debounce.timeout.connect(self.search_now)
        self.preview_timer = QTimer(self, singleShot=True, interval=PREVIEW_DEBOUNCE_MS)
        self.preview_timer.timeout.connect(self.show_current)
        self.watcher = FolderWatcher(self)
        self.resize(1100, 720)

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file_menu = bar.addMenu("&File")
        self.add_action = file_menu.addAction("&Add folder…", self.add_folder_dialog, QKeySequence("Ctrl+O"))
        self.clip_action = file_menu.addAction("&Clip URL…", self.clip_url_dialog, QKeySequence("Ctrl+Shift+V"))
        # A clipped PDF becomes a note of its text; this keeps the PDF itself beside it too.
        self.keep_pdf_action = file_menu.addAction("&Keep clipped PDFs beside their notes")
        self.keep_pdf_action.setCheckable(True)
        self.keep_pdf_action.setChecked(self.settings.value("clip/keep_pdf", False, type=bool))
        self.keep_pdf_action.toggled.connect(lambda on: self.settings.setValue("clip/keep_pdf", on))
        file_menu.addSeparator()
        file_menu.addAction("&Quit", self.close, QKeySequence.Quit)
        self.collections_menu = bar.addMenu("&Collections")
        self.collections_menu.aboutToShow.connect(self._fill_collections_menu)
        help_menu = bar.addMenu("&Help")
        help_menu.addAction("&About PMS", self.show_about)
        QShortcut(QKeySequence.Paste, self, self.paste_url)  # the search bar keeps its own Ctrl+V
        QShortcut(QKeySequence("Ctrl+L"), self, self.focus_search)
        QShortcut(QKeySequence("Ctrl+K"), self, self.focus_search)  # Cmd+K on macOS
        QShortcut(QKeySequence("Ctrl+D"), self, self.toggle_pin)
        QShortcut(QKeySequence.Find, self, self.focus_search)
        QShortcut(QKeySequence("F5"), self, lambda: self.request_sync(None))

    def _fill_collections_menu(self) -> None:
        menu = self.collections_menu
        menu.clear()
        menu.addAction("&Add folder…", self.add_folder_dialog)
        sync_all = menu.addAction("&Sync all now", lambda: self.request_sync(None))
        sync_all.setShortcut(QKeySequence("F5"))
        busy = self.sync_running()
        collections = self.kb.collections.list()
        if collections:
            menu.addSeparator()
        for col in collections:
            notes, _ = col.counts()
            sub = menu.addMenu(f"{col.name}  ({notes:,} notes)")
            sub.setToolTip(str(col.path))
            sub.addAction("Sync now", lambda name=col.name: self.request_sync([name]))
            sub.addAction("Open folder", lambda path=col.path: self.open_path(path))
            for label, handler in (("Rename…", self.rename_collection_dialog), ("Remove…", self.remove_collection_dialog)):
                action = sub.addAction(label, lambda name=col.name, handler=handler: handler(name))
                action.setEnabled(not busy)
                if busy:
                    action.setToolTip("Wait for the sync to finish")

    def _connect(self) -> None:
        self.search_box.textChanged.connect(self._typed)
        self.search_box.installEventFilter(self)
        self.results_view.installEventFilter(self)
        self.collection_combo.currentIndexChanged.connect(self._collection_chosen)
        self.results_view.selectionModel().currentChanged.connect(self._current_changed)
        self.results_view.activated.connect(lambda index: self.open_hit(self.results_model.hit_at(index)))
        self.results_view.customContextMenuRequested.connect(self._results_menu)
        self.preview.status_message.connect(self.flash)
        self.filter_bar.changed.connect(self._filters_changed)
        self.related.open_requested.connect(self.show_hit)
        self.bridge.results.connect(self._show_results)
        self.bridge.search_failed.connect(self._search_failed)
        self.bridge.model_loaded.connect(self._model_loaded)
        self.bridge.sync_progress.connect(self._sync_progress)
        self.bridge.sync_finished.connect(self._sync_finished)
        self.bridge.clip_finished.connect(self._clip_finished)
        self.bridge.notice.connect(self.flash)
        self.kb.notice = lambda text: emit(self.bridge.notice, text)  # called from worker threads
        self.watcher.collections_changed.connect(self.request_sync)

    def start_background_work(self, sync: bool = True) -> None:
        """After the window is on screen: load the model, catch up with the folders, watch them."""
        if self.kb.embeddings_enabled:
            load_model_in_background(self.kb, self.bridge)
        if sync and self.kb.collections.list():
            self.request_sync(None)
        else:
            self.watch_folders()

    # -- settings ----------------------------------------------------------------------
    def _restore_settings(self) -> None:
        geometry = self.settings.value("window/geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        splitter = self.settings.value("window/splitter")
        if splitter is not None:
            self.splitter.restoreState(splitter)
        last = self.settings.value("search/collection", "")
        index = self.collection_combo.findData(last) if last else 0
        self.collection_combo.setCurrentIndex(max(0, index))

    def _save_settings(self) -> None:
        self.settings.setValue("window/geometry", self.saveGeometry())
        self.settings.setValue("window/splitter", self.splitter.saveState())
        self.settings.setValue("search/collection", self.collection_combo.currentData() or "")
        self.settings.sync()

    def closeEvent(self, event) -> None:
        self._save_settings()
        if self.tray is not None:
            self.tray.hide()
        self.searcher.stop()
        self.related.worker.stop()
        self.preview.html_worker.stop()
        if self.sync_job and self.sync_job.running():
            self.sync_job.cancel.set()
            self.sync_job.thread.join(5)  # cancel stops between batches; wait so the index closes cleanly
        super().closeEvent(event)

    # -- search ------------------------------------------------------------------------
    def focus_search(self) -> None:
        self.search_box.setFocus()
        self.search_box.selectAll()

    def dismiss(self) -> None:
        """Hide to the tray icon when there is one, else minimise."""
        if self.tray is not None and self.tray.isVisible():
            self.hide()
        else:
            self.showMinimized()

    def summon(self) -> None:
        """Bring the window back (tray icon, a second launch, a desktop shortcut) with the search bar ready."""
        self.showNormal()
        self.raise_()
        self.activateWindow()
        self.focus_search()

    def _build_tray(self) -> None:
        self.tray = None
        if not QSystemTrayIcon.isSystemTrayAvailable():
            return
        self.tray = QSystemTrayIcon(QGuiApplication.windowIcon(), self)
        self.tray.setToolTip("PMS — search your notes")
        menu = QMenu(self)
        menu.addAction("Search notes", self.summon)
        menu.addAction("Quit", self.close)
        self.tray.setContextMenu(menu)
        self.tray.activated.connect(lambda reason: self.summon() if reason == QSystemTrayIcon.Trigger else None)
        self.tray.show()

    def search_mode(self) -> str:
        # Until the model is loaded, "auto" would load it inside the first search.
        return "auto" if self.model_state == "ready" else "keyword"

    def selected_collections(self) -> list[str] | None:
        name = self.collection_combo.currentData()
        return [name] if name else None

    def _filters_changed(self) -> None:
        if self.search_box.text().strip() or self.filter_bar.active():
            self.search_now()
        else:
            self._typed("")

    def _typed(self, text: str) -> None:
        if not text.strip() and not self.filter_bar.active():
            self.debounce.stop()
            self.search_seq += 1  # results still on their way are now stale
            self.preview_timer.stop()
            if self.results_model.query and self.current_hit() is not None:
                self.remember(self.current_hit())  # the note read last is the one worth finding again
            self.related.clear()
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
        query = self.search_box.text()
        filters = self.filter_bar.search_kwargs()
        if not query.strip() and not filters:
            return
        self.search_seq += 1
        self.last_submit = time.monotonic()
        # The last word matches as a prefix while typing, once it has a few letters:
        # "c*" or "co*" would expand to thousands of words and cost 50-150 ms.
        last = query.split()[-1] if query.split() else ""
        prefix = len(last.strip('"*-')) >= PREFIX_MIN_LETTERS and not query.endswith(" ")
        self.searcher.submit(self.search_seq, query, self.search_mode(), self.selected_collections(), RESULTS, prefix, filters)

    def _collection_chosen(self, _index: int) -> None:
        self.settings.setValue("search/collection", self.collection_combo.currentData() or "")
        self.search_now()

    def _show_results(self, seq: int, query: str, hits: list, seconds: float) -> None:
        if seq != self.search_seq:
            return  # an older query's answer; a newer one is on its way
        self.last_search_seconds = seconds
        self.results_model.set_hits(hits, query, divide=self.search_mode() != "keyword")
        hits = self.results_model.hits
        if hits:
            self.results_stack.setCurrentWidget(self.results_view)
            wanted = [i for i, hit in enumerate(hits) if hit.abspath == self.focus_path]
            if not wanted:
                self.focus_path = None
            # The list is painted first; the preview (tens of ms for a long chapter) waits until
            # typing pauses, so it never stands between a keystroke and its results.
            self.preview_timer.start(PREVIEW_SETTLE_MS)
            self.results_view.setCurrentIndex(self.results_model.index(self.results_model.hit_row(wanted[0] if wanted else 0), 0))
        else:
            self.preview.clear_note()
            self._show_message(f"No notes match “{query.strip()}”." if query.strip() else "No notes match the filter.")
        self.results_shown.emit(query)

    def _search_failed(self, seq: int, message: str) -> None:
        if seq == self.search_seq:
            self._show_message(message)
            self.results_shown.emit(self.search_box.text())

    def _show_message(self, text: str) -> None:
        self.results_message.setText(text)
        self.results_stack.setCurrentWidget(self.results_message)

    def _idle_message(self) -> str:
        # The collections' own counts: kb.status() counts everything (20+ ms), and this
        # runs on every clear of the search bar and twice a second during a sync.
        notes = sum(col.counts()[0] for col in self.kb.collections.list())
        if notes:
            return f"Type to search {notes:,} notes." + (" More are being indexed…" if self.sync_running() else "")
        return "Indexing your notes…" if self.sync_running() else "No notes indexed yet."

    def current_hit(self):
        index = self.results_view.currentIndex()
        return self.results_model.hit_at(index)

    def _current_changed(self, current, _previous) -> None:
        if self.results_model.hit_at(current) is None:
            return
        # Leading edge: a lone move shows its note at once; rows passed through
        # while an arrow key repeats wait until the keys rest.
        if self.preview_timer.isActive() or time.monotonic() - self.last_preview < PREVIEW_DEBOUNCE_MS / 1000:
            self.preview_timer.start()
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
        self.results_model.set_sections(self.shelf.sections(self.kb))
        self.preview.clear_note()
        if self.results_model.hits:
            self.results_stack.setCurrentWidget(self.results_view)
        self.show_idle_text()

    def show_idle_text(self) -> None:
        message = self._idle_message()
        self.results_message.setText(message)
        if not self.results_model.hits:
            self.results_stack.setCurrentWidget(self.results_message)
        if self.preview.abspath is None:
            self.preview.setHtml(hints_html(message))

    def toggle_pin(self, hit=None) -> None:
        hit = hit or self.current_hit()
        if hit is not None:
            pinned = self.shelf.toggle_pin(f"{hit.collection}/{hit.path}")
            self.flash(f"{'Pinned' if pinned else 'Unpinned'} “{hit.title or hit.path}”" +
                       (": it stays on the start page" if pinned else ""))
            if not self.search_box.text().strip():
                self.show_start_page()

    def show_hit(self, hit) -> None:
        page = hit.page  # a PDF's passage: its page is shown, the passage tinted
        ref = f"#{hit.docid}" if hit.docid else f"{hit.collection}/{hit.path}"
        try:
            doc = self.kb.get(f"{ref}:{page}" if page else ref)
        except pms.PMSError as exc:
            self.flash(str(exc))
            self.preview.clear_note()
            return
        words = pms.parse_query(self.results_model.query).words
        from_top = hit.abspath == self.focus_path  # a fresh clip: read it from its start
        self.focus_path = None
        text, start_line, end_line, heading = doc.text, hit.start_line, hit.end_line, hit.heading_path
        if page:
            text, start_line, end_line = pdf_page_markdown(doc.title, page, doc.text, hit.start_line, hit.end_line)
            heading = ""
        self.preview.show_note(doc.abspath, text=text, start_line=0 if from_top else start_line,
                               end_line=end_line, heading="" if from_top else heading, words=words,
                               staged=True)
        self.related.show_for(hit)

    def eventFilter(self, watched, event) -> bool:
        if event.type() == QEvent.KeyPress:
            key = event.key()
            if watched is self.search_box and key in (Qt.Key_Down, Qt.Key_Up, Qt.Key_PageDown, Qt.Key_PageUp):
                self._move_current(key)
                return True
            if watched is self.search_box and key == Qt.Key_Escape:
                if self.search_box.text():
                    self.search_box.clear()
                else:
                    self.dismiss()  # Esc on an empty query: out of the way, as launchers do
                return True
            if watched is self.results_view and key == Qt.Key_Escape:
                self.focus_search()
                return True
            if watched in (self.search_box, self.results_view) and key in (Qt.Key_Return, Qt.Key_Enter):
                if event.modifiers() & Qt.ControlModifier:  # Cmd on macOS
                    self.reveal(self.current_hit())
                elif watched is self.search_box and (self.debounce.isActive() or self.results_model.query != self.search_box.text()):
                    self.search_now()  # results for what was typed are not in yet
                else:
                    self.open_hit(self.current_hit())
                return True
        return super().eventFilter(watched, event)

    def _move_current(self, key) -> None:
        model = self.results_model
        if not model.hits:
            return
        step = {Qt.Key_Down: 1, Qt.Key_Up: -1, Qt.Key_PageDown: 5, Qt.Key_PageUp: -5}[key]
        current = self.current_hit()
        position = next((i for i, hit in enumerate(model.hits) if hit is current), 0)  # dividers are no stop
        position = min(len(model.hits) - 1, max(0, position + step))
        self.results_view.setCurrentIndex(model.index(model.hit_row(position), 0))

    # -- results actions -----------------------------------------------------------------
    def open_hit(self, hit) -> None:
        if hit is not None:
            self.remember(hit)
            if hit.page:
                self.open_pdf_page(Path(hit.abspath), hit.page)
            else:
                self.open_path(Path(hit.abspath))

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
            self.flash(f"Opened {path.name}: your PDF viewer cannot be told a page, so turn to p. {page}")
            return True
        return False

    def remember(self, hit) -> None:
        self.shelf.remember(f"{hit.collection}/{hit.path}")

    def open_path(self, path: Path) -> bool:
        """Open a note or folder with the system's default app; say so when there is none."""
        if QDesktopServices.openUrl(QUrl.fromLocalFile(str(path))):
            return True
        kind = "folder" if path.is_dir() else f"{path.suffix or 'such'} files"
        self.flash(f"No app is set to open {kind} on this system: {path.name} was not opened",
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
        self.flash(f"{done}: {text}")

    def _results_menu(self, pos) -> None:
        hit = self.results_model.hit_at(self.results_view.indexAt(pos))
        if hit is None:
            return
        menu = QMenu(self)
        if hit.page:
            menu.addAction(f"Open at page {hit.page}", lambda: self.open_pdf_page(Path(hit.abspath), hit.page))
            menu.addAction("Open", lambda: self.open_path(Path(hit.abspath)))
        else:
            menu.addAction("Open", lambda: self.open_hit(hit))
        menu.addAction("Copy path", lambda: self.copy_text(hit.abspath, "Path copied"))
        menu.addAction("Copy reference", lambda: self.copy_text(f"{hit.collection}/{hit.path}", "Reference copied"))
        menu.addAction("Open containing folder", lambda: self.reveal(hit))
        pinned = f"{hit.collection}/{hit.path}" in self.shelf.pinned
        menu.addAction("Unpin from the start page" if pinned else "Pin to the start page", lambda: self.toggle_pin(hit))
        menu.exec(self.results_view.viewport().mapToGlobal(pos))

    # -- badge and status bar ------------------------------------------------------------
    def _model_loaded(self, ok: bool) -> None:
        self.model_state = "ready" if ok else "unavailable"
        self.update_badge()
        self.update_stats()
        self.search_now()  # the same words, now with meaning

    def update_badge(self) -> None:
        info = self.kb.status(pending=False)
        used = self.kb.search_mode()
        mode, why, code, hint = used.mode, used.reason, used.code, used.hint
        short = pms.VECTOR_UNAVAILABLE.get(code, "") or shorten(why, 40)
        if mode == "hybrid" and self.model_state == "loading":
            mode, why, short = "keyword", "loading the embedding model…", "loading the model…"
        hybrid = mode == "hybrid"
        model = model_label(info)
        if hybrid and info["embedded"] < info["chunks"]:
            share = info["embedded"] / max(1, info["chunks"])
            self.badge.setText(f"Hybrid · {int(share * 100)} % embedded")
            self.badge.setToolTip(f"Keyword and meaning ({model}), fused.\n{info['embedded']:,} of {info['chunks']:,} "
                                  f"passages are embedded: the other {info['chunks'] - info['embedded']:,} are found "
                                  "by their words only until the sync has embedded them.")
        elif hybrid:
            self.badge.setText("Hybrid")
            self.badge.setToolTip(f"Keyword and meaning ({model}), fused: all {info['chunks']:,} passages are embedded."
                                  + (f"\nVectors from {info['vectors_from']}." if info.get("vectors_from") else ""))
        else:
            self.badge.setText(f"Keyword only · {short}" if short else "Keyword only")
            action = hint_action(hint) if self.model_state != "loading" else ""
            self.badge.setToolTip((f"Keyword search only: {why}" + (f"; {action}" if action else "")) if why else "Keyword search only")
        self.badge.setStyleSheet(BADGE_STYLE.format(bg="#2e7d32" if hybrid else "#6b7280"))
        self.badge_mode = mode
        self.setup_button.setVisible(hint is not None and hint.command == "setup" and mode != "hybrid"
                                     and (self.setup_job is None or not self.setup_job.running()))

    # -- installing the extras (pms.py setup) ----------------------------------------------
    def run_setup(self) -> None:
        """Install the packages for search by meaning, as ``pms.py setup`` does."""
        if getattr(sys, "frozen", False):
            # A packaged app carries its packages inside; pip cannot add to it.
            self.flash("This packaged app cannot install packages; it includes search by meaning, so "
                       f"what is missing is: {self.kb.search_mode().reason}")
            return
        if self.sync_running() or (self.setup_job is not None and self.setup_job.running()):
            self.flash("Wait for the running sync or setup to finish")
            return
        self.setup_job = SetupJob(self.setup_command, self)
        self.setup_job.output.connect(lambda line: self.progress_label.setText(f"Setup: {first_line(line, 70)}"))
        self.setup_job.finished.connect(self._setup_finished)
        self.setup_button.hide()
        self.progress_label.setText("Setup: installing the packages for search by meaning…")
        self.progress_bar.setRange(0, 0)
        self.cancel_button.setEnabled(True)
        for widget in (self.progress_label, self.progress_bar, self.cancel_button):
            widget.show()

    def _setup_finished(self, ok: bool, last_line: str) -> None:
        for widget in (self.progress_label, self.progress_bar, self.cancel_button):
            widget.hide()
        if ok:
            self.flash("Installed: restart PMS to search by meaning (the packages load at start)")
        elif last_line == "cancelled":
            self.flash("Setup cancelled; nothing else changed (run it again any time)")
        else:
            self.flash(f"Setup failed: {last_line}")
        self.update_badge()
        self.setup_done.emit(ok)

    def update_stats(self) -> None:
        info = self.kb.status(pending=False)
        synced = [c["last_sync"] for c in info["collections_detail"] if c["last_sync"]]
        state = {"loading": " (loading)", "unavailable": " (unavailable)", "off": " (off)"}.get(self.model_state, "")
        self.stats_label.setText(f"{info['documents']:,} notes · {info['chunks']:,} passages · "
                                 f"last sync {self._when(max(synced)) if synced else 'never'} · model {model_label(info)}{state}"
                                 + (f" · {info['pdfs_without_text']} PDFs have no text" if info["pdfs_without_text"] else ""))

    @staticmethod
    def _when(iso: str) -> str:
        try:
            moment = dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone()
        except ValueError:
            return iso
        return moment.strftime("%H:%M" if moment.date() == dt.date.today() else "%Y-%m-%d %H:%M")

    def flash(self, text: str, action: str = "", callback=None) -> None:
        """A status-bar message; with ``action``, a button next to it that runs ``callback``."""
        self.statusBar().showMessage(first_line(text, 300), MESSAGE_MS * (2 if action else 1))
        self.message_callback = callback
        self.message_button.setText(action)
        self.message_button.setVisible(bool(action))

    def _message_changed(self, text: str) -> None:
        if not text:
            self.message_button.hide()

    def _message_action(self) -> None:
        callback, self.message_callback = self.message_callback, None
        self.statusBar().clearMessage()
        if callback:
            callback()

    def show_about(self) -> None:
        QMessageBox.about(self, "About PMS",
                          f"<h3>PMS {pms.VERSION}</h3><p>Private search for folders of Markdown notes: "
                          f"keyword and meaning, offline.</p><p>Index: {self.kb.index_path}</p>")

    # -- collections -----------------------------------------------------------------------
    def refresh_collections(self) -> None:
        collections = self.kb.collections.list()
        current = self.collection_combo.currentData()
        self.collection_combo.blockSignals(True)
        self.collection_combo.clear()
        self.collection_combo.addItem("All collections", "")
        for col in collections:
            self.collection_combo.addItem(col.name, col.name)
        self.collection_combo.setCurrentIndex(max(0, self.collection_combo.findData(current or "")))
        self.collection_combo.blockSignals(False)
        self.pages.setCurrentWidget(self.splitter if collections else self.welcome)
        self.search_box.setEnabled(bool(collections))
        self.collection_combo.setVisible(bool(collections))
        self.badge.setVisible(bool(collections))
        self.filter_bar.setVisible(bool(collections))
        self.filter_bar.refresh_tags()
        if collections and not self.search_box.text().strip():
            self.show_start_page()

    def add_folder_dialog(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a folder of notes", str(Path.home()))
        if folder:
            self.add_folder(folder)

    def add_folder(self, folder: str | Path) -> str | None:
        folder = Path(folder).resolve()
        for col in self.kb.collections.list():
            if col.path == folder:
                self.flash(f"{folder} is already the collection “{col.name}”")
                return None
        names = {c.name for c in self.kb.collections.list()}
        base = re.sub(r"[^\w .-]", "-", folder.name or "notes")[:60].strip(" .-") or "notes"
        name, n = base, 2
        while name in names:
            name, n = f"{base}-{n}", n + 1
        try:
            self.kb.collections.create(folder, name=name)
        except pms.PMSError as exc:
            self.flash(str(exc))
            return None
        self.refresh_collections()
        self.flash(f"Added “{name}”: indexing {folder}")
        self.request_sync([name])
        return name

    def rename_collection_dialog(self, name: str) -> None:
        new, ok = QInputDialog.getText(self, "Rename collection", f"New name for “{name}”:", text=name)
        if ok and new.strip() and new.strip() != name:
            try:
                self.kb.collections.rename(name, new.strip())
            except pms.PMSError as exc:
                self.flash(str(exc))
                return
            self.refresh_collections()
            self.watch_folders()
            self.search_now()

    def remove_collection_dialog(self, name: str) -> None:
        col = self.kb.collections.get(name)
        answer = QMessageBox.question(self, "Remove collection",
                                      f"Remove “{name}” from the index?\n\nThe files in {col.path} are not touched.")
        if answer == QMessageBox.Yes:
            self.kb.collections.delete(name)
            self.refresh_collections()
            self.watch_folders()
            self.update_stats()
            self.search_now()

    def watch_folders(self) -> None:
        self.watcher.watch(self.kb.collections.list())

    # -- sync ------------------------------------------------------------------------------
    def sync_running(self) -> bool:
        return self.sync_job is not None and self.sync_job.running()

    def request_sync(self, names: list[str] | None = None) -> None:
        """Sync these collections (None: all) now, or right after the running sync."""
        if self.sync_running():
            if names is None or self.sync_queue == set():
                self.sync_queue = set()
            else:
                self.sync_queue = (self.sync_queue or set()) | set(names)
            return
        self.sync_job = SyncJob(self.kb, self.bridge, names)
        self.sync_phase = ""
        self.setup_job: SetupJob | None = None
        self.setup_command = [sys.executable, str(PMS_SCRIPT), "setup"]
        self.progress_label.setText("Scanning folders…")
        self.progress_bar.setRange(0, 0)
        self.cancel_button.setEnabled(True)
        for widget in (self.progress_label, self.progress_bar, self.cancel_button):
            widget.show()

    def cancel_sync(self) -> None:
        if self.setup_job is not None and self.setup_job.running():
            self.setup_job.cancel()
            return
        if self.sync_running():
            self.sync_job.cancel.set()
            self.sync_queue = None
            self.cancel_button.setEnabled(False)
            self.progress_label.setText("Cancelling…")

    def _sync_progress(self, p) -> None:
        if self.sync_job is None or self.sync_job.cancel.is_set():
            return
        unit, verb = ("passages", "Embedding") if p.phase == "embed" else ("files", "Indexing" if p.phase == "index" else "Scanning")
        if p.phase != self.sync_phase:
            if self.sync_phase == "index" and self.search_box.text().strip():
                self.search_now()  # the new notes are searchable by keyword before they are embedded
            self.sync_phase = p.phase
            self.rate.restart()
            self.update_stats()
            self.update_badge()
        self.rate.add(p.done)
        left = self.rate.eta(p.total)
        eta = f" · {p.replace(eta=left).eta_text} left" if left is not None and p.done < p.total else ""
        if p.phase == "index" and not self.search_box.text().strip() and self.rate.due("idle", 0.5):
            self.show_idle_text()  # the notes indexed so far are searchable already
        self.progress_label.setText(f"{verb} {p.done:,}/{p.total:,} {unit}{eta}")
        self.progress_bar.setRange(0, max(1, p.total))
        self.progress_bar.setValue(p.done)

    def _sync_finished(self, report, error: str) -> None:
        self.sync_job = None  # its thread is about to end: the sync is over for the window
        for widget in (self.progress_label, self.progress_bar, self.cancel_button):
            widget.hide()
        if error or report.cancelled or report.added or report.updated or report.deleted or report.errors or report.embedded:
            self.flash(error or report.summary())  # a watcher's sync that found nothing new stays quiet
        self.refresh_collections()
        self.update_badge()
        self.update_stats()
        self.offer_multilingual_model(error)
        self.watch_folders()
        if self.search_box.text().strip():
            self.search_now()  # new and changed notes show up in the open search
        queued, self.sync_queue = self.sync_queue, None
        self.sync_done.emit(report)
        if queued is not None:
            self.request_sync(sorted(queued) or None)

    def offer_multilingual_model(self, error: str = "") -> None:
        """When a fair share of the notes is not in English and the model reads English only:
        say so once per index, with a button that tells how to switch."""
        advice = None if error else self.kb.language_advice()
        if advice and self.kb.tell_once("language_advice_app", advice):
            self.flash(first_line(advice, 90), "Multilingual search…",
                       lambda: QMessageBox.information(self, "Meaning search in every language", advice))

    # -- clipping ----------------------------------------------------------------------------
    def clip_url_dialog(self) -> None:
        text = QGuiApplication.clipboard().text().strip()
        url, ok = QInputDialog.getText(self, "Clip a web page", "URL of the page to save as a note:",
                                       text=text if URL_RE.match(text) else "https://")
        if ok and url.strip() and url.strip() != "https://":
            self.clip(url.strip())

    def paste_url(self) -> None:
        text = QGuiApplication.clipboard().text().strip()
        if URL_RE.match(text):
            self.clip(text)
        else:
            self.flash("The clipboard holds no web address to clip (copy a page's URL, then press Ctrl+V)")

    def choose_clip_collection(self) -> str | None:
        names = [c.name for c in self.kb.collections.list()]
        if len(names) <= 1:
            return names[0] if names else None
        last = self.settings.value("clip/collection", "")
        name, ok = QInputDialog.getItem(self, "Clip into", "Save the page as a note in:", names,
                                        names.index(last) if last in names else 0, False)
        return name if ok else None

    def clip(self, source: str) -> bool:
        if not self.kb.collections.list():
            self.flash("Add a folder first: clipped pages are saved as notes in one of your collections")
            return False
        name = self.choose_clip_collection()
        if not name:
            return False
        self.settings.setValue("clip/collection", name)
        self.flash(f"Clipping {first_line(source, 80)} into “{name}”…")
        clip_in_background(self.kb, self.bridge, name, source, keep_original=self.keep_pdf_action.isChecked())
        return True

    def _clip_finished(self, note, source: str, error: str) -> None:
        if error:
            if note is not None:  # already clipped: nothing new was written; show the note it is
                self.flash(f"Already clipped: this page is the note “{Path(note).name}”, shown here")
                self.preview.show_note(note)
            else:
                self.flash(f"Could not clip {first_line(source, 60)}: {error}")
            self.clip_done.emit(None, error)
            return
        name, path = note.collection, Path(note.path)
        title = note.title or path.stem
        self.flash(f"Clipped “{first_line(title, 60)}” into “{name}”" + (f" ({note.index_error})" if note.index_error else ""))
        self.preview.show_note(path)  # at once, and selected in the results when they come
        self.focus_path = str(path)
        self.search_box.setText(title)
        self.search_now()
        self.clip_done.emit(path, "")

    # -- drag and drop ---------------------------------------------------------------------
    def dragEnterEvent(self, event) -> None:
        if self._droppable(event.mimeData()):
            event.acceptProposedAction()

    def dragMoveEvent(self, event) -> None:
        if self._droppable(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:
        if self.handle_drop(event.mimeData()):
            event.acceptProposedAction()

    @staticmethod
    def _droppable(mime) -> bool:
        return mime.hasUrls() or (mime.hasText() and bool(URL_RE.match(mime.text().strip())))

    def handle_drop(self, mime) -> bool:
        """A folder becomes a collection; a web link or a saved page is clipped."""
        urls = list(mime.urls()) if mime.hasUrls() else [QUrl(mime.text().strip())]
        handled = False
        for url in urls:
            if url.isLocalFile():
                path = Path(url.toLocalFile())
                if path.is_dir():
                    handled = bool(self.add_folder(path)) or handled
                elif path.suffix.lower() in CLIPPABLE_FILES:
                    handled = self.clip(str(path)) or handled
                else:
                    self.flash(f"Drop a folder to add it, or a web page or PDF to clip it ({path.name} is neither)")
            elif url.scheme().lower() in ("http", "https"):
                handled = self.clip(url.toString()) or handled
        return handled
