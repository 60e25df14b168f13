"""The start page, shown while the search bar is empty: pinned and recent notes
in the results list, and the keys worth knowing in the preview pane."""

from __future__ import annotations

import html

from PySide6.QtGui import QKeySequence

import pms

RECENT_LIMIT = 8
PINNED_LIMIT = 20
PINNED_LABEL = "Pinned"
RECENT_LABEL = "Recent"

# (key sequence, what it does): shown with the platform's names (Cmd on macOS).
SHORTCUTS = [("Return", "open the selected note"), ("Ctrl+Return", "show it in the file manager"),
             ("Shift+Return", "open it in Obsidian (a note of an Obsidian vault)"),
             ("↑ ↓", "move through the results"), ("Ctrl+K", "search from anywhere in the window"),
             ("Esc", "clear the search; again to hide the window"), ("Ctrl+D", "pin or unpin the selected note"),
             ("Ctrl+V", "clip a copied web link into a note"), ("F5", "sync all folders now")]


class NoteShelf:
    """Recent and pinned notes, as ``collection/path`` references kept in QSettings."""

    def __init__(self, settings):
        self.settings = settings

    def _list(self, key: str) -> list[str]:
        value = self.settings.value(key, [])
        return [value] if isinstance(value, str) and value else list(value or [])

    @property
    def recent(self) -> list[str]:
        return self._list("notes/recent")

    @property
    def pinned(self) -> list[str]:
        return self._list("notes/pinned")

    def remember(self, ref: str) -> None:
        self.settings.setValue("notes/recent", [ref, *[r for r in self.recent if r != ref]][:RECENT_LIMIT])

    def toggle_pin(self, ref: str) -> bool:
        """Pin ``ref`` or unpin it; True when it is pinned now."""
        pinned = self.pinned
        now_pinned = ref not in pinned
        self.settings.setValue("notes/pinned", ([*pinned, ref][-PINNED_LIMIT:] if now_pinned else
                                                [r for r in pinned if r != ref]))
        return now_pinned

    def sections(self, kb) -> list[tuple[str, list]]:
        """(label, hits) for the results list; notes that are gone are left out."""
        pinned = self.pinned
        recent = [r for r in self.recent if r not in pinned]
        return [(PINNED_LABEL, notes_as_hits(kb, pinned)), (RECENT_LABEL, notes_as_hits(kb, recent))]


def notes_as_hits(kb, refs: list[str]) -> list:
    """Rows for notes known by reference: pms.Hit with the note's title and no passage."""
    hits = []
    for ref in refs:
        try:
            doc = kb.get(ref)
        except pms.PMSError:
            continue  # deleted or renamed since: not worth a message
        hits.append(doc.as_hit())
    return hits


def key_label(keys: str) -> str:
    return QKeySequence(keys).toString(QKeySequence.NativeText) if keys.isascii() else keys


def hints_html(message: str) -> str:
    """The preview pane's content on the start page."""
    rows = "".join(
        f"<tr><td align='right'><b>{html.escape(key_label(keys))}</b></td>"
        f"<td>&nbsp;&nbsp;{html.escape(what)}</td></tr>" for keys, what in SHORTCUTS)
    return (f"<h3>{html.escape(message)}</h3><p>Words match by prefix; use \"a phrase\" and -exclude. "
            "Drop a folder onto the window to add it, or a web link to clip it.</p>"
            f"<table cellspacing='4'>{rows}</table>")
