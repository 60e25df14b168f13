"""The clipping controller: a web page's URL (typed, pasted, dropped) or a saved
page becomes a new note in a collection; a dropped folder becomes a collection."""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtCore import QObject, QUrl, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QInputDialog

from gui.workers import clip_in_background

URL_RE = re.compile(r"^https?://\S+$", re.IGNORECASE)
CLIPPABLE_FILES = (".html", ".htm", ".xhtml", ".pdf")


def first_line(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ClipController(QObject):
    # What the other controllers follow (MainWindow connects them).
    offer_shown = Signal(str)       # a pasted URL offered for clipping: the line to show in place of results
    offer_withdrawn = Signal()      # the offer was taken or dropped
    note_clipped = Signal(str, str)  # the new note's path and title: find it
    folder_dropped = Signal(object)  # a folder dropped on the window: add it as a collection (a Path)

    def __init__(self, window):
        super().__init__(window)
        self.w = window
        self.offered: str | None = None  # a pasted URL waiting for Enter

    def connect(self) -> None:
        w = self.w
        w.bridge.clip_finished.connect(self._clip_finished)
        w.clip_action.triggered.connect(self.clip_url_dialog)
        w.paste_shortcut.activated.connect(self.paste_url)

    def clip_url_dialog(self) -> None:
        text = QGuiApplication.clipboard().text().strip()
        url, ok = QInputDialog.getText(self.w, "Clip a web page", "URL of the page to save as a note:",
                                       text=text if URL_RE.match(text) else "https://")
        if ok and url.strip() and url.strip() != "https://":
            self.clip(url.strip())

    def paste_url(self) -> None:
        """Ctrl+V outside the search bar: clip the copied link."""
        text = QGuiApplication.clipboard().text().strip()
        if URL_RE.match(text):
            self.clip(text)
        else:
            self.w.flash("The clipboard holds no web address to clip (copy a page's URL, then press Ctrl+V)")

    # -- Ctrl+V in the search bar: a lone URL is offered for clipping, Enter confirms ---------
    def offer_clip_from_clipboard(self) -> bool:
        text = QGuiApplication.clipboard().text().strip()
        if not URL_RE.match(text) or self.w.search_box.text().strip():
            return False  # words to search for, or pasted into a query being written
        self.offered = text
        self.offer_shown.emit(f"Press Enter to clip {first_line(text, 90)} into a note  (Esc: cancel)")
        self.w.flash(f"Clip {first_line(text, 80)}?", "Clip", self.accept_offer)
        return True

    def accept_offer(self) -> bool:
        url, self.offered = self.offered, None
        if not url:
            return False
        self.offer_withdrawn.emit()
        self.clip(url)
        return True

    def drop_offer(self) -> bool:
        """Forget a pending offer (typing or Esc); True if there was one."""
        if self.offered is None:
            return False
        self.offered = None
        self.offer_withdrawn.emit()
        return True

    def choose_clip_collection(self, source: str) -> str | None:
        w = self.w
        names = [c.name for c in w.kb.collections.list()]
        if len(names) <= 1:
            return names[0] if names else None
        last = w.settings.value("clip/collection", "")
        name, ok = QInputDialog.getItem(w, "Clip into", f"Save {first_line(source, 80)}\nas a note in:", names,
                                        names.index(last) if last in names else 0, False)
        return name if ok else None

    def clip(self, source: str) -> bool:
        w = self.w
        if not w.kb.collections.list():
            w.flash("Add a folder first: clipped pages are saved as notes in one of your collections")
            return False
        name = self.choose_clip_collection(source)
        if not name:
            return False
        w.settings.setValue("clip/collection", name)
        w.flash(f"Clipping {first_line(source, 80)} into “{name}”…")
        clip_in_background(w.kb, w.bridge, name, source, keep_original=w.keep_pdf_action.isChecked())
        return True

    def _clip_finished(self, note, source: str, error: str) -> None:
        w = self.w
        if error:
            if note is not None:  # already clipped: nothing new was written; show the note it is
                w.flash(f"Already clipped: this page is the note “{Path(note).name}”, shown here", view=True)
                w.preview.show_note(note)
            else:  # the engine's message names the page when it is about the page
                w.flash(f"Could not clip: {error}" if source in error else f"Could not clip {first_line(source, 60)}: {error}")
            w.clip_done.emit(None, error)
            return
        name, path = note.collection, Path(note.path)
        title = note.title or path.stem
        w.flash(f"Clipped “{first_line(title, 60)}” into “{name}”" + (f" ({note.index_error})" if note.index_error else ""))
        w.preview.show_note(path)  # at once, and selected in the results when they come
        self.note_clipped.emit(str(path), title)
        w.clip_done.emit(path, "")

    # -- drag and drop ---------------------------------------------------------------------
    @staticmethod
    def droppable(mime) -> bool:
        return mime.hasUrls() or (mime.hasText() and bool(URL_RE.match(mime.text().strip())))

    def handle_drop(self, mime) -> bool:
        """A folder becomes a collection; a web link or a saved page is clipped."""
        w = self.w
        urls = list(mime.urls()) if mime.hasUrls() else [QUrl(mime.text().strip())]
        handled = False
        for url in urls:
            if url.isLocalFile():
                path = Path(url.toLocalFile())
                if path.is_dir():
                    self.folder_dropped.emit(path)
                    handled = True
                elif path.suffix.lower() in CLIPPABLE_FILES:
                    handled = self.clip(str(path)) or handled
                else:
                    w.flash(f"Drop a folder to add it, or a web page or PDF to clip it ({path.name} is neither)")
            elif url.scheme().lower() in ("http", "https"):
                handled = self.clip(url.toString()) or handled
        return handled
