# /// script
# requires-python = ">=3.10"
# dependencies = [
#     "fastembed>=0.5",
#     "sqlite-vec>=0.1.6",
#     "sqlean-py>=3.45",
#     "trafilatura>=2.0",
#     "lxml_html_clean",
#     "mcp>=2.3",
#     "pypdfium2>=4.30",
# ]
# ///
"""PMS: a local-first, private search engine for folders of Markdown notes.

The contract
------------
* One file to download. ``python3 pms.py`` runs on any Python >= 3.10 with the
  standard library alone: collections, incremental sync and keyword search (SQLite
  FTS5, BM25). When ``fastembed`` and ``sqlite-vec`` (plus ``sqlean-py`` where the
  standard ``sqlite3`` cannot load extensions) are importable, search becomes
  hybrid: BM25, embeddings and note names fused (``fuse``). A missing
  optional package is a one-line notice, never a traceback.
* The user's notes are read, never written. The index is one SQLite file that
  can always be deleted and rebuilt. Clipping only creates new files.
* Nothing leaves the machine, except fetching a URL the user asked to clip and
  a one-time embedding model download.
* Bad input (any query string, any file, a dead URL, a killed sync) gets a
  one-line error naming the cause and loses nothing.

The source is the package src/pms/, one module per concern, each importing only
the layers below it (its docstring says which); pms.py is made from it by
scripts/amalgamate.py, modules in this order:
config -> frontmatter -> markdown -> language -> notes -> pdf -> paths -> filters
-> schema -> store -> embedding -> query -> ranking -> retrieval -> sync -> watch
-> clip -> api (``KnowledgeBase``) -> evaluation (``pms bench``) -> mcp_server
(``pms mcp``, for AI assistants) -> cli. docs/design.md maps them.

    from pms import KnowledgeBase
    kb = KnowledgeBase()                       # default index in the data folder
    kb.collections.create(path="~/notes", name="notes")
    kb.sync()
    for hit in kb.search("how do I rotate my keys", k=5):
        print(hit.path, hit.heading_path, hit.score)
"""

from __future__ import annotations

# No garbage collection while the package loads (it would free nothing); it resumes at the end.
import gc

_GC_WAS_ENABLED = gc.isenabled()
gc.disable()

from .config import (
    DEFAULT_GLOB, DEFAULT_MODEL, EMBED_BATCH_SIZE, SEARCH_MODES, VERSION, DeadlineExceeded, Hint, PMSError, data_dir,
    hint_text, module_available, names_its_setting, pms_command, private_env_dir, reason_text, use_private_env,
)
from .frontmatter import FrontmatterError, parse_frontmatter, split_frontmatter
from .markdown import (
    DEFAULT_CHUNK_CHARS, DEFAULT_PASSAGE_CHARS, BinaryFileError, Chunk, FileTooLargeError, Passage, chunk_markdown, decode_text,
    callout_title, first_heading, highlighted_parts, markdown_passages, passage_display_text, title_line_as_heading, wikilink_text,
    without_obsidian_hidden,
)
from .notes import links_label_first, replace_wikilinks, with_frontmatter_values
from .paths import is_skipped_folder, path_prefix_glob, read_note_file
from .filters import NoteFilter
from .schema import sqlite_module
from .embedding import (
    EMBED_HTTP_BATCH_SIZE, EMBEDDING_PROVIDERS, Embedder, EmbeddingProvider, EmbeddingUnavailable, HTTPEmbedder,
    make_embedder, model_settings, quiet_logs,
)
from .query import (
    STOPWORDS, VECTOR_UNAVAILABLE, Hit, ParsedQuery, VectorStatus, copy_groups, highlight_pattern, is_partial_word, parse_query, render_snippet,
)
from .ranking import Fused, RankingSettings, fuse, name_similarity, rank
from .retrieval import SearchMode, SearchRequest, SearchResult
from .sync import SyncPlan, SyncProgress, SyncReport
from .watch import FolderWatcher
from .clip import AlreadyClipped, ClippedNote, ExtractedPage, clip_filename, extract_from_html, extract_from_url
from .api import Collection, Collections, Document, KnowledgeBase, Note, NoteRef
from .evaluation import BENCH_MODES, Judgment, load_fixture, run_benchmark
from .cli import ProgressPrinter, main, main_and_exit

__version__ = VERSION

__all__ = [
    "VERSION",
    # the engine behind one object, and what it returns
    "KnowledgeBase", "Collection", "Collections", "Note", "SearchMode", "Hit", "NoteFilter", "NoteRef",
    "SyncPlan", "SyncProgress", "SyncReport", "ClippedNote", "ExtractedPage", "FolderWatcher",
    "path_prefix_glob", "SEARCH_MODES", "VECTOR_UNAVAILABLE", "VectorStatus",
    # errors: everything a user can cause is a PMSError
    "PMSError", "EmbeddingUnavailable", "AlreadyClipped", "BinaryFileError", "FileTooLargeError", "FrontmatterError",
    "DeadlineExceeded",
    # Markdown without an index (its passages, the desktop app's preview)
    "Passage", "markdown_passages", "decode_text", "read_note_file", "split_frontmatter", "parse_frontmatter",
    "first_heading", "title_line_as_heading", "passage_display_text", "is_skipped_folder", "parse_query", "is_partial_word", "ParsedQuery", "STOPWORDS", "replace_wikilinks", "with_frontmatter_values", "wikilink_text", "links_label_first",
    "callout_title", "highlighted_parts", "without_obsidian_hidden",
    # web pages without an index
    "extract_from_url", "extract_from_html", "clip_filename",
    # settings, the embedding model, evaluation: bench/ and build/
    "DEFAULT_MODEL", "DEFAULT_GLOB", "DEFAULT_PASSAGE_CHARS", "EMBED_BATCH_SIZE", "Embedder", "model_settings",
    "EmbeddingProvider", "HTTPEmbedder", "EMBEDDING_PROVIDERS", "make_embedder", "EMBED_HTTP_BATCH_SIZE",
    "quiet_logs", "sqlite_module", "Judgment", "load_fixture", "run_benchmark", "BENCH_MODES",
    # ranking: fusion as a pure function, and note-name similarity
    "RankingSettings", "Fused", "fuse", "rank", "name_similarity", "SearchRequest", "SearchResult", "render_snippet",
    "highlight_pattern", "copy_groups",
    "Hint", "hint_text", "reason_text", "names_its_setting",
    # running PMS: the CLI entry point, its progress bar, the optional extras
    "main", "main_and_exit", "pms_command", "ProgressPrinter", "data_dir", "module_available", "use_private_env",
    "private_env_dir",
    # the old names of Note, Passage, markdown_passages and DEFAULT_PASSAGE_CHARS, kept for scripts written against them
    "Document", "Chunk", "chunk_markdown", "DEFAULT_CHUNK_CHARS",
]

# What loading made (functions, classes, constants) lives as long as the process: frozen, the
# collector never walks it again (in a one-shot search it did a few times: 6 ms of 25).
gc.freeze()
if _GC_WAS_ENABLED:
    gc.enable()
