"""The window's layout: widgets, menus, tray, saved geometry, the status line,
and how the panes collapse when the window gets small."""

from __future__ import annotations

from PySide6.QtCore import QObject, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QFontMetrics, QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QFrame, QHBoxLayout, QLabel, QLineEdit, QListView, QMenu,
                               QProgressBar, QPushButton, QSizePolicy, QSplitter, QStackedWidget, QSystemTrayIcon,
                               QToolButton, QVBoxLayout, QWidget)

from gui.notes import FilterBar, RelatedPanel
from gui.preview import NotePreview
from gui.results import HitDelegate, ResultsModel

MESSAGE_MS = 6000          # how long a status-bar message stays
# Below these window widths a pane folds away, Related first, then the preview:
# a pane narrower than about 30 characters wraps words letter by letter.
RELATED_MIN_WINDOW = 900
PREVIEW_MIN_WINDOW = 560
CHIPS_MIN_WINDOW = 760     # the tag chips leave the filter field the whole row below this


def first_line(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class WelcomePanel(QFrame):
    """First run: what PMS does and one button; the whole panel is a drop zone."""

    add_folder_requested = Signal()

    def __init__(self, parent=None):
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
        self.button.clicked.connect(self.add_folder_requested)
        zone = QLabel("or drop a folder of notes here\n(drop a web page link to clip it once a folder is added)")
        zone.setObjectName("dropzone")
        zone.setAlignment(Qt.AlignCenter)
        zone.setMinimumSize(QSize(300, 120))
        zone.setStyleSheet("#dropzone { border: 2px dashed palette(mid); border-radius: 12px; "
                           "color: palette(placeholder-text); padding: 16px; }")
        for widget in (title, blurb, self.button, zone):
            outer.addWidget(widget, 0, Qt.AlignHCenter)
            outer.addSpacing(10)
        outer.addStretch(2)


class StatusLine(QLabel):
    """The status bar's one line: the index's stats, or for a while a message in
    their place (never both drawn over each other); a long text is elided and
    whole in the tooltip."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.stats = ""
        self.message = ""
        self.setMinimumWidth(40)
        self.timer = QTimer(self, singleShot=True)
        self.timer.timeout.connect(self.clear_message)

    def set_stats(self, text: str) -> None:
        self.stats = text
        self._draw()

    def show_message(self, text: str, ms: int) -> None:
        self.message = text
        self.timer.start(ms)
        self._draw()

    def clear_message(self) -> None:
        self.timer.stop()
        self.message = ""
        self._draw()

    def full_text(self) -> str:
        return self.message or self.stats

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._draw()

    def _draw(self) -> None:
        text = self.full_text()
        shown = QFontMetrics(self.font()).elidedText(text, Qt.ElideRight, max(40, self.width() - 4))
        super().setText(shown)
        self.setToolTip(text if shown != text else "")


class LayoutController(QObject):
    """Builds the window's widgets (as attributes of the window), the menus and
    the tray; keeps the status line; folds panes away in small windows."""

    def __init__(self, window):
        super().__init__(window)
        self.w = window
        self.folded: tuple[bool, bool] = (False, False)  # (Related, preview) folded away

    def build(self) -> None:
        w = self.w
        w.search_box = QLineEdit(placeholderText="Search your notes…  (words, \"a phrase\", -exclude)")
        w.search_box.setClearButtonEnabled(True)
        w.search_box.setAcceptDrops(False)  # a dropped link is for clipping, not for the query
        font = w.search_box.font()
        font.setPointSizeF(font.pointSizeF() * 1.25)
        w.search_box.setFont(font)
        w.search_box.setMinimumHeight(34)
        w.search_box.setMinimumWidth(100)
        w.collection_combo = QComboBox(minimumContentsLength=10)
        w.collection_combo.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        w.collection_combo.setToolTip("Search in one collection or all of them")
        w.badge = QLabel()
        w.badge.setMaximumWidth(360)
        top = QWidget()
        row = QHBoxLayout(top)
        row.setContentsMargins(10, 8, 10, 6)
        row.addWidget(w.search_box, 1)
        row.addWidget(w.collection_combo)
        row.addWidget(w.badge)
        w.fix_button = QToolButton(visible=False)  # what to do about keyword-only search, as a button (SyncController.BADGE_FIXES)
        row.addWidget(w.fix_button)

        w.results_model = ResultsModel(w)
        w.results_view = QListView()
        w.results_view.setModel(w.results_model)
        w.results_view.setItemDelegate(HitDelegate(w.results_view))
        w.results_view.setResizeMode(QListView.Adjust)
        w.results_view.setLayoutMode(QListView.Batched)  # the visible rows first, the rest between events
        w.results_view.setBatchSize(10)
        w.results_view.setVerticalScrollMode(QAbstractItemView.ScrollPerPixel)
        w.results_view.setSelectionMode(QAbstractItemView.SingleSelection)
        w.results_view.setContextMenuPolicy(Qt.CustomContextMenu)
        w.results_view.setAcceptDrops(False)
        w.results_view.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        w.results_view.setMinimumWidth(200)
        w.results_message = QLabel(alignment=Qt.AlignCenter, wordWrap=True)
        w.results_message.setStyleSheet("color: palette(placeholder-text); padding: 24px;")
        w.results_stack = QStackedWidget()
        w.results_stack.addWidget(w.results_view)
        w.results_stack.addWidget(w.results_message)
        w.preview = NotePreview(w.kb)
        w.preview.setMinimumWidth(240)
        w.splitter = QSplitter(Qt.Horizontal)
        w.splitter.addWidget(w.results_stack)
        w.splitter.addWidget(w.preview)
        w.related = RelatedPanel(w.kb)
        w.splitter.addWidget(w.related)
        w.filter_bar = FilterBar(w.kb)
        w.splitter.setStretchFactor(0, 2)
        w.splitter.setStretchFactor(1, 3)
        w.splitter.setStretchFactor(2, 1)
        w.splitter.setSizes([380, 500, 240])  # results, preview, related
        w.splitter.setChildrenCollapsible(False)

        w.welcome = WelcomePanel()
        # Its long lines must not set the window's minimum width once the search pages are shown.
        w.welcome.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Ignored)
        w.pages = QStackedWidget()
        w.pages.addWidget(w.welcome)
        w.pages.addWidget(w.splitter)
        w.drop_frame = QFrame()  # its border is the drop highlight
        w.drop_frame.setObjectName("dropframe")
        column = QVBoxLayout(w.drop_frame)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        column.addWidget(top)
        column.addWidget(w.filter_bar)
        column.addWidget(w.pages, 1)
        w.setCentralWidget(w.drop_frame)

        w.status_line = StatusLine()
        w.progress_label = QLabel()
        w.progress_bar = QProgressBar(maximumWidth=180, textVisible=False)
        w.cancel_button = QToolButton(text="Cancel", toolTip="Stop the sync; the index stays consistent")
        w.message_button = QToolButton()  # the one thing to do about the message shown ("Copy path")
        w.message_button.hide()
        w.message_button.clicked.connect(self._message_action)
        self.message_callback = None
        w.statusBar().addWidget(w.status_line, 1)
        w.statusBar().addPermanentWidget(w.message_button)
        for widget in (w.progress_label, w.progress_bar, w.cancel_button):
            widget.hide()
            w.statusBar().addPermanentWidget(widget)
        w.resize(1100, 720)

    def build_menus(self) -> None:
        """The menus and keys; each controller connects those it answers (its ``connect``)."""
        w = self.w
        bar = w.menuBar()
        file_menu = bar.addMenu("&File")
        w.add_action = file_menu.addAction("&Add folder…")
        w.add_action.setShortcut(QKeySequence("Ctrl+O"))
        w.clip_action = file_menu.addAction("&Clip URL…")
        w.clip_action.setShortcut(QKeySequence("Ctrl+Shift+V"))
        # A clipped PDF becomes a note of its text; this keeps the PDF itself beside it too.
        w.keep_pdf_action = file_menu.addAction("&Keep clipped PDFs beside their notes")
        w.keep_pdf_action.setCheckable(True)
        w.keep_pdf_action.setChecked(w.settings.value("clip/keep_pdf", False, type=bool))
        w.keep_pdf_action.toggled.connect(lambda on: w.settings.setValue("clip/keep_pdf", on))
        file_menu.addSeparator()
        file_menu.addAction("&Quit", w.close, QKeySequence.Quit)
        w.collections_menu = bar.addMenu("&Collections")
        go_menu = bar.addMenu("&Go")
        w.back_action = go_menu.addAction("&Back")
        w.back_action.setShortcut(QKeySequence.Back)
        w.forward_action = go_menu.addAction("&Forward")
        w.forward_action.setShortcut(QKeySequence.Forward)
        help_menu = bar.addMenu("&Help")
        help_menu.addAction("&About PMS", w.show_about)
        w.paste_shortcut = QShortcut(QKeySequence.Paste, w)  # focus outside the search bar
        # Cmd+K on macOS
        w.focus_shortcuts = [QShortcut(QKeySequence(keys), w) for keys in ("Ctrl+L", "Ctrl+K", QKeySequence.Find)]
        w.pin_shortcut = QShortcut(QKeySequence("Ctrl+D"), w)
        w.sync_shortcut = QShortcut(QKeySequence("F5"), w)

    def build_tray(self) -> None:
        w = self.w
        w.tray = None
        if not QSystemTrayIcon.isSystemTrayAvailable():
            return
        w.tray = QSystemTrayIcon(QGuiApplication.windowIcon(), w)
        w.tray.setToolTip("PMS — search your notes")
        menu = QMenu(w)
        menu.addAction("Search notes", w.summon)
        menu.addAction("Quit", w.close)
        w.tray.setContextMenu(menu)
        w.tray.activated.connect(lambda reason: w.summon() if reason == QSystemTrayIcon.Trigger else None)
        w.tray.show()

    # -- settings ----------------------------------------------------------------------
    def restore_settings(self) -> None:
        w = self.w
        geometry = w.settings.value("window/geometry")
        if geometry is not None:
            w.restoreGeometry(geometry)
        splitter = w.settings.value("window/splitter")
        if splitter is not None:
            w.splitter.restoreState(splitter)
        last = w.settings.value("search/collection", "")
        index = w.collection_combo.findData(last) if last else 0
        w.collection_combo.setCurrentIndex(max(0, index))
        self.fold_panes()

    def save_settings(self) -> None:
        w = self.w
        w.settings.setValue("window/geometry", w.saveGeometry())
        if not any(self.folded):  # a folded layout is the small window's, not the one to come back to
            w.settings.setValue("window/splitter", w.splitter.saveState())
        w.settings.setValue("search/collection", w.collection_combo.currentData() or "")
        w.settings.sync()

    # -- small windows -------------------------------------------------------------------
    def fold_panes(self) -> None:
        """Related folds away first, then the preview; the chips leave a narrow filter row."""
        w = self.w
        width = w.width()
        folded = (width < RELATED_MIN_WINDOW, width < PREVIEW_MIN_WINDOW)
        w.filter_bar.show_chips(width >= CHIPS_MIN_WINDOW)
        # A narrow window: the badge and the collection list give the search bar room.
        w.badge.setMaximumWidth(360 if width >= CHIPS_MIN_WINDOW else 140 if width >= PREVIEW_MIN_WINDOW else 70)
        w.collection_combo.setMinimumContentsLength(10 if width >= PREVIEW_MIN_WINDOW else 4)
        if folded == self.folded:
            return
        self.folded = folded
        w.related.set_wanted(not folded[0])
        w.preview.setVisible(not folded[1])

    # -- the status line ---------------------------------------------------------------
    def flash(self, text: str, action: str = "", callback=None, view: bool = False) -> None:
        """A status message in the stats' place; with ``action``, a button next to it that runs ``callback``.
        ``view``: it is about what the window shows now ("… shown here"), so the next search ends it."""
        w = self.w
        w.status_line.show_message(first_line(text, 300), MESSAGE_MS * (2 if action else 1))
        self.view_query = w.search_box.text() if view else None
        self.message_callback = callback
        w.message_button.setText(action)
        w.message_button.setVisible(bool(action))
        if action:
            # the button as context: the timer is dropped with the window, never calls into a deleted widget
            QTimer.singleShot(MESSAGE_MS * 2, w.message_button, lambda: None if w.status_line.message else w.message_button.hide())

    def message(self) -> str:
        return self.w.status_line.message

    def end_view_message(self, query: str) -> None:
        """A search for other words than those shown when a message about the view came: it ends."""
        if getattr(self, "view_query", None) is not None and query != self.view_query:
            self.view_query = None
            self.w.status_line.clear_message()
            self.w.message_button.hide()

    def _message_action(self) -> None:
        callback, self.message_callback = self.message_callback, None
        self.w.status_line.clear_message()
        self.w.message_button.hide()
        if callback:
            callback()

    def drop_highlight(self, on: bool) -> None:
        self.w.drop_frame.setStyleSheet("#dropframe { border: 3px solid palette(highlight); }" if on else "")
