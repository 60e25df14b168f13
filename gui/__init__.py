"""PMS desktop app: a PySide6 window over ``pms.KnowledgeBase``.

Start it with ``python3 pms.py gui`` or ``python -m gui``; the entry point is
``gui.app.main``. The window only calls the KnowledgeBase API: no SQL and no
search logic live here. Importing this package does not import Qt.
"""
