"""The main window: the widgets (gui/layout.py) and four controllers that act
on them: search (gui/search.py), sync and setup (gui/sync.py), clipping
(gui/clipping.py) and layout (gui/layout.py)."""

from __future__ import annotations

from PySide6.QtCore import QSettings, Signal
from PySide6.QtWidgets import QMainWindow, QMessageBox

import pms
from gui.clipping import ClipController
from gui.layout import LayoutController
from gui.search import SearchController
from gui.sync import SyncController
from gui.workers import Bridge, SearchThread, emit


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
        self.bridge = Bridge()
        self.searcher = SearchThread(kb, self.bridge)
        self.searcher.start()
        self.setWindowTitle("PMS — private search for your notes")
        self.setAcceptDrops(True)
        self.layout_controller = LayoutController(self)
        self.clipper = ClipController(self)
        self.sync = SyncController(self)
        self.search = SearchController(self, offers=self.clipper)
        self.layout_controller.build()
        self.layout_controller.build_menus()
        self.layout_controller.build_tray()
        for controller in (self.search, self.sync, self.clipper):
            controller.connect()
        self._connect_controllers()
        self.preview.status_message.connect(self.flash)
        self.bridge.notice.connect(self.flash)
        # Engine notices come from worker threads too: through the bridge, queued into this one.
        self.stop_notices = kb.listen(lambda text: emit(self.bridge.notice, text))
        self.sync.refresh_collections()
        self.sync.update_badge()
        self.sync.update_stats()
        self.layout_controller.restore_settings()
        self.search_box.setFocus()

    def _connect_controllers(self) -> None:
        """What each controller tells the others: signals, connected here, and nothing else."""
        search, sync, clipper = self.search, self.sync, self.clipper
        sync.index_changed.connect(search.search_now)
        sync.notes_indexed.connect(search.notes_indexed)
        sync.collections_changed.connect(search.collections_changed)
        sync.model_ready_changed.connect(search.set_model_ready)
        sync.running_changed.connect(search.set_indexing)
        sync.open_requested.connect(search.open_path)
        clipper.offer_shown.connect(search.hold_results)
        clipper.offer_withdrawn.connect(search.offer_withdrawn)
        clipper.note_clipped.connect(search.find_note)
        clipper.folder_dropped.connect(sync.add_folder)

    def start_background_work(self, sync: bool = True) -> None:
        self.sync.start_background_work(sync)

    def flash(self, text: str, action: str = "", callback=None, view: bool = False) -> None:
        self.layout_controller.flash(text, action, callback, view)

    def current_hit(self):
        return self.search.current_hit()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.layout_controller.fold_panes()

    def closeEvent(self, event) -> None:
        self.layout_controller.save_settings()
        if self.tray is not None:
            self.tray.hide()
        self.stop_notices()
        self.searcher.stop()
        self.sync.watcher.stop()
        self.related.worker.stop()
        self.preview.html_worker.stop()
        job = self.sync.sync_job
        if job and job.running():
            job.cancel.set()
            job.thread.join(5)  # cancel stops between batches; wait so the index closes cleanly
        super().closeEvent(event)

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
        self.search.focus_search()

    def show_about(self) -> None:
        QMessageBox.about(self, "About PMS",
                          f"<h3>PMS {pms.VERSION}</h3><p>Private search for folders of Markdown notes: "
                          f"keyword and meaning, offline.</p><p>Index: {self.kb.index_path}</p>")

    # -- drag and drop: a highlight while something droppable hovers -------------------------
    def dragEnterEvent(self, event) -> None:
        if self.clipper.droppable(event.mimeData()):
            event.acceptProposedAction()
            self.layout_controller.drop_highlight(True)

    def dragMoveEvent(self, event) -> None:
        if self.clipper.droppable(event.mimeData()):
            event.acceptProposedAction()

    def dragLeaveEvent(self, event) -> None:
        self.layout_controller.drop_highlight(False)

    def dropEvent(self, event) -> None:
        self.layout_controller.drop_highlight(False)
        if self.clipper.handle_drop(event.mimeData()):
            event.acceptProposedAction()
