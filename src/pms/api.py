"""``KnowledgeBase``: the one object every front end uses (CLI, MCP, the desktop app).

Owns: collections, sync, search, get, links, related notes, clipping and status, each a
call with a deadline; ``Note`` and ``NoteRef``. It wires store, retrieval, sync and
clip together and holds no rule of its own that a front end should repeat.

May import: config, markdown, notes, pdf, paths, filters, schema, store, vector_memory, embedding, query,
ranking, retrieval, sync, watch, clip.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from .config import (
    CALL_DEADLINE, DEFAULT_GLOB, VERSION, DeadlineExceeded, Hint, PMSError, Record, _typing,
    check_deadline, clean_query, default_db_path, max_file_bytes, past_deadline,
)
from .markdown import DEFAULT_PASSAGE_CHARS, BinaryFileError, FileTooLargeError, decode_text, unlabelled_link_targets
from .notes import LinkResolver, note_links
from .pdf import PDF_NO_TEXT, PDF_SUFFIX, is_pdf
from .paths import Exclusions, compile_glob, inside, obsidian_vaults, pdf_glob, read_note_file
from .filters import NoteFilter, checked_number
from .schema import DOCID_CHARS, MIGRATIONS
from .store import CollectionRow, NoteRow, Store, storage_errors
from .vector_memory import VECTOR_MATRIX_MAX_MB, VectorMemory
from .embedding import (
    LANGUAGE_MIN_NOTES, MULTILINGUAL_MODEL, MULTILINGUAL_PICK_SHARE, Embedder, EmbeddingProvider, EmbeddingUnavailable,
    embedding_choice_from_env, language_advice, make_embedder, model_configured,
)
from .query import Hit
from .ranking import RankingSettings, first_results, fuse
from .retrieval import Retrieval, SearchMode, SearchResult, checked_min_score
from .sync import SyncCancelled, Syncer, SyncPlan, SyncProgress, SyncReport
from .watch import WATCH_INTERVAL, WATCH_PATHS_PER_LOOK, WATCH_QUIET, FolderWatcher
from .clip import (
    CLIP_MAX_BYTES, CLIP_MAX_TIMEOUT, CLIP_TIMEOUT, AlreadyClipped, ClippedNote, check_clip_url, clip_filename,
    clip_target_folder, extract_from_pdf, extract_within, fetch_html, find_clipped, made_folder, render_clip_note,
    require_clipper, write_new_file,
)


MAX_QUERIES = 5  # phrasings in one search (KnowledgeBase.search's queries)
# Notes that searches showed while this KnowledgeBase's sync embeds, kept to be embedded next
# (Syncer.embed_first): the latest ones, a few searches' worth.
SEARCHED_NOTES_KEPT = 100
# An answer for a model (get and multi_get over MCP, multi_get everywhere): a few whole
# notes; what does not fit is marked truncated and says how to ask for the rest.
ANSWER_MAX_BYTES = 20_000
MULTI_GET_MAX_BYTES = ANSWER_MAX_BYTES
MULTI_GET_MAX_FILES = 50
MULTI_GET_MAX_NAMES = 1000  # notes a comma-separated list may name (each is looked up)
# A multi_get note left out because the answer was full starts its reason with this.
OVER_BUDGET = "does not fit in max_bytes"


def with_obsidian_urls(result: SearchResult) -> SearchResult:
    """``result`` with each hit's ``obsidian_url`` (copies too): the file system is looked
    at for the hits shown only, never while ranking."""
    for hit in result.hits:
        hit.obsidian_url = obsidian_vaults.url(hit.abspath)
    return result


def _split_outside_braces(text: str) -> list[str]:
    """Split on commas, except inside a glob's ``{a,b}``."""
    parts, depth, current = [], 0, list[str]()
    for ch in text:
        depth += (ch == "{") - (ch == "}")
        if ch == "," and depth <= 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    return [*parts, "".join(current)]


class Note(Record):
    """A note read back from disk (``pms get``)."""

    collection: str
    path: str
    abspath: str
    docid: str
    title: str
    tags: list[str]
    text: str
    from_line: int = 1
    to_line: int = 0  # the last line in text (0 for none)
    total_lines: int = 0  # lines in the whole note
    truncated: bool = False  # text stops before to_line reached what was asked (max_bytes)
    page: int | None = None  # a PDF read from this page on (get file.pdf:12); lines then count within it
    obsidian_url: str = ""  # obsidian://open?path=… when the note is in an Obsidian vault, else ""

    def to_dict(self) -> dict:
        return self.as_dict()

    @property
    def ref(self) -> str:
        return f"{self.collection}/{self.path}"

    def as_hit(self) -> Hit:
        """The note as a result row of its own (a recent or pinned note, a link followed): its
        title, no passage."""
        return Hit(path=self.path, collection=self.collection, abspath=self.abspath, docid=self.docid, title=self.title,
                   heading_path=self.title, start_line=0, end_line=0, score=0.0, snippet="", tags=list(self.tags),
                   obsidian_url=self.obsidian_url)

    def rest(self) -> str:
        """How to read on after a truncated text: the ref of its next line."""
        return f"{self.ref}:{self.to_line + 1}"

    def numbered(self) -> str:
        """The text with each line's number in front (of a PDF, the page's)."""
        return "\n".join(f"{n:>5}  {line}" for n, line in enumerate(self.text.split("\n"), self.from_line))


Document = Note  # the old name (pms.__all__ still lists it): scripts written against it keep working


class NoteRef(Record):
    """A note at one end of a link; an unresolved link has no path, title or docid."""

    collection: str
    path: str | None
    title: str | None
    docid: str | None
    target: str = ""  # the link as written (for backlinks: how the other note wrote it)
    line: int = 0  # where the link is, in the linking note
    resolved: bool = True

    def to_dict(self) -> dict:
        return self.as_dict()


class Collection:
    """A named folder of notes."""

    def __init__(self, kb: KnowledgeBase, row: CollectionRow):
        self.kb = kb
        self.id, self.name, self.glob, self.description = row.id, row.name, row.glob, row.description
        self.created_at, self.last_sync = row.created_at, row.last_sync
        self.path = Path(row.path)
        self.exclude = [g for g in row.excludes.split("\n") if g]

    @property
    def patterns(self) -> list[str]:
        """The globs of the files it indexes: its glob, and the PDFs that glob names (``pdf_glob``)."""
        pdfs = pdf_glob(self.glob)
        return [self.glob] if pdfs == self.glob else [self.glob, pdfs]

    def exclusions(self) -> dict[str, list[str]]:
        """What is never indexed, by source: 'exclude' (the collection's own globs),
        '.pmsignore' and 'obsidian' (Obsidian's excluded files), when present."""
        return Exclusions(self.path, self.exclude).sources

    def exclusion_warnings(self) -> list[str]:
        """One line each for what of .pmsignore or Obsidian's settings cannot be read (file:line: why); ignored."""
        return Exclusions(self.path, self.exclude).warnings

    def __repr__(self) -> str:
        return f"<Collection {self.name!r} {str(self.path)!r} {self.glob!r}>"

    @property
    def files(self) -> list[str]:
        """Indexed notes, as collection-relative paths."""
        return self.kb.store.note_paths(self.id)

    def indexed_stats(self) -> dict[str, tuple[int, int]]:
        """Each indexed note's (mtime_ns, size) as the index has it (what a watcher compares the file with)."""
        return {rel: (mtime, size) for rel, (size, mtime, _version) in self.kb.store.note_stamps(self.id).items()}

    def counts(self) -> tuple[int, int]:
        """(notes, passages) in the index."""
        return self.kb.store.collection_counts(self.id)

    def sync(self, **kwargs) -> SyncReport:
        return self.kb.sync(collections=[self.name], **kwargs)

    def to_dict(self) -> dict:
        notes, passages = self.counts()
        exclusions = Exclusions(self.path, self.exclude)
        return {"name": self.name, "path": str(self.path), "glob": self.glob, "patterns": self.patterns,
                "description": self.description,
                "folder_descriptions": self.kb.store.folder_descriptions().get(self.name, {}),
                "notes": notes, "passages": passages, "chunks": passages, "created_at": self.created_at, "last_sync": self.last_sync,
                "exclusions": exclusions.sources, "exclusion_warnings": exclusions.warnings}

    def clip(self, source: str | None, *, html: bytes | str | None = None, subfolder: str | None = None,
             force: bool = False, timeout: float = CLIP_TIMEOUT, max_bytes: int = CLIP_MAX_BYTES,
             embed: bool = True, pdf: bytes | None = None, keep_original: bool = False) -> ClippedNote:
        """Clip a web page or a PDF into this collection as ``YYYY-MM-DD-<slug>.md`` and index it.
        ``source``, the page's URL, is fetched unless ``html`` (a saved page) or ``pdf`` (its
        bytes) is given (None: the page's canonical URL, if it names one). A PDF becomes a note
        of its text, ``## Page N`` per page; ``keep_original`` saves the PDF beside it. A URL
        already clipped into the collection raises AlreadyClipped unless ``force``."""
        if pdf is None:
            require_clipper()  # a fetched URL may turn out to be a PDF: then trafilatura is not needed
        self.kb.store.require_writable()  # before a note is written that could not be indexed
        if source and (pdf is None or re.match(r"^[A-Za-z][A-Za-z0-9+.-]+://", source)):
            source = check_clip_url(source)
        elif html is None and pdf is None:
            raise PMSError("nothing to clip: give a URL, the HTML of a saved page, or a PDF")
        folder = clip_target_folder(self.path, self.name, subfolder)
        timeout = checked_number(timeout, "timeout", minimum=0.001, maximum=CLIP_MAX_TIMEOUT, whole=False)
        deadline = time.monotonic() + timeout  # the download and the extraction share it

        def refuse_duplicate(*urls: str | None) -> None:
            existing = None if force else find_clipped(self.path, self.glob, [u for u in urls if u])
            if existing:
                rel = existing.relative_to(self.path).as_posix()
                raise AlreadyClipped(f"{urls[0]} is already clipped into {self.name!r} as {rel} "
                                     "(nothing written; use --force to clip it again)", existing)

        refuse_duplicate(source)
        if pdf is not None:
            page = extract_from_pdf(pdf, url=source)
        elif html is None:
            assert source is not None  # checked above: a URL or a page
            fetched, final_url = fetch_html(source, timeout=timeout, max_bytes=max_bytes)
            if isinstance(fetched, bytes) and fetched.startswith(b"%PDF-"):
                pdf = fetched
                page = extract_from_pdf(fetched, url=final_url)  # read in a worker process with its own deadline
            else:
                page = extract_within(fetched, final_url, deadline, timeout)
            refuse_duplicate(source, final_url)
            source = final_url
        else:
            page = extract_within(html, source, deadline, timeout)
            if not source and page.url:  # a saved page that names its canonical URL
                source = page.url
                refuse_duplicate(source)
        name = clip_filename(page.title, source)
        rel_folder = folder.relative_to(self.path).as_posix()
        rel = name if rel_folder == "." else f"{rel_folder}/{name}"
        if not compile_glob(self.glob, "--glob").match(rel):
            raise PMSError(f"collection {self.name!r} only indexes {self.glob}, so {rel} would not be searchable "
                           "(choose another --subfolder)")
        with made_folder(folder):
            target = write_new_file(folder, name, render_clip_note(page, source).encode("utf-8"))
        rel = target.relative_to(self.path).as_posix()
        # The PDF beside its note, named after it; not indexed now (its text is the note's).
        original = write_new_file(folder, target.stem + PDF_SUFFIX, pdf) if keep_original and pdf is not None else None
        report = self.kb.sync(collections=[self.name], paths=[target], embed=embed)
        problems = [why for _path, why in report.errors + report.skipped]
        rows = self.kb.store.find_notes(collection=self.name, path=rel)
        return ClippedNote(path=target, relpath=rel, collection=self.name, title=page.title, source=source,
                           docid=rows[0].docid if rows else None, page=page, original=original,
                           index_error="; ".join(problems) or (None if rows else "the note was written but not indexed"))


class Collections:
    """``kb.collections``: create, list, get, rename, delete."""

    _NAME = re.compile(r"^[\w][\w .-]{0,63}$", re.UNICODE)

    def __init__(self, kb: KnowledgeBase):
        self.kb = kb

    def create(self, path: str | os.PathLike, name: str | None = None, glob: str = DEFAULT_GLOB, description: str = "",
               force: bool = False, exclude: Sequence[str] = ()) -> Collection:
        """Add a folder as a collection (named after the folder unless ``name``). A folder that
        is, is inside or holds another collection's is refused unless ``force``: every note
        would be found twice. ``exclude``: globs of notes and folders never to index."""
        folder = Path(path).expanduser()
        if not folder.is_dir():
            raise PMSError(f"{folder} is not a folder (give the folder that holds your notes)")
        folder = folder.resolve()
        name = self._new_name(name or self.free_name(folder.name))
        compile_glob(glob or DEFAULT_GLOB, "--glob")
        excludes = self._checked_excludes(exclude)
        if not force:
            self._refuse_overlap(folder)
        self.kb.store.add_collection(name, str(folder), glob or DEFAULT_GLOB, description or "", excludes)
        return self.get(name)

    def _new_name(self, name: str) -> str:
        """``name``, checked as the name of a new collection."""
        if not self._NAME.match(name) or "/" in name:
            raise PMSError(f"collection name {name!r} is not valid (letters, digits, space, '.', '_' or '-'; at most 64)")
        if self.kb.store.collection_row(name):
            raise PMSError(f"a collection named {name!r} already exists (choose another name, or remove that one first)")
        return name

    @staticmethod
    def _checked_excludes(exclude: Sequence[str] | str) -> str:
        globs = [exclude] if isinstance(exclude, str) else list(exclude or ())
        for glob in globs:
            if "\n" in glob or not glob.strip():
                raise PMSError(f"exclude {glob!r} is not a glob (one pattern per --exclude)", argument="exclude")
            compile_glob(glob.strip().strip("/") or "x", "exclude")
        return "\n".join(g.strip() for g in globs)

    def set_exclude(self, name: str, exclude: Sequence[str]) -> Collection:
        """Replace a collection's own exclusion globs (none: ``[]``); the next sync drops the notes they leave out."""
        self.get(name)
        self.kb.store.update_collection(name, excludes=self._checked_excludes(exclude))
        return self.get(name)

    def free_name(self, wanted: str) -> str:
        """A valid collection name like ``wanted`` (a folder's name) that no collection has yet:
        other characters become '-', a taken name gets '-2', '-3'..."""
        base = re.sub(r"[^\w .-]", "-", wanted)[:60].strip(" .-") or "notes"
        taken = {c.name for c in self.list()}
        name, n = base, 2
        while name in taken:
            name, n = f"{base}-{n}", n + 1
        return name

    def _refuse_overlap(self, folder: Path) -> None:
        for other in sorted(self.list(), key=lambda c: c.path != folder):  # the very same folder is named first
            there = other.path
            if folder == there:
                why = "is already the collection"
            elif there in folder.parents:
                why = "is inside the folder of the collection"
            elif folder in there.parents:
                why = "holds the folder of the collection"
            else:
                continue
            raise PMSError(f"{folder} {why} {other.name!r} ({there}), so its notes would be found twice "
                           f"(use that collection, or add --force to index them twice)")

    def list(self) -> list[Collection]:
        return [Collection(self.kb, row) for row in self.kb.store.collection_rows()]

    def get(self, name: str) -> Collection:
        return Collection(self.kb, self.kb.store.require_collection(name))

    def rename(self, old: str, new: str) -> Collection:
        self.get(old)
        self.kb.store.rename_collection(old, self._new_name(new))
        return self.get(new)

    def move(self, name: str, path: str | os.PathLike) -> Collection:
        """Point the collection at its moved folder ``path``; unchanged passages keep their vectors."""
        self.get(name)
        folder = Path(path).expanduser()
        if not folder.is_dir():
            raise PMSError(f"{folder} is not a folder (give the folder that now holds the notes of {name!r})")
        self.kb.store.update_collection(name, path=str(folder.resolve()))
        return self.get(name)

    def delete(self, name: str) -> None:
        """Forget a collection: its notes leave the index, which gives their space back; the files stay untouched."""
        collection = self.get(name)
        passages, total = collection.counts()[1], self.kb.store.totals()["passages"]
        self.kb.store.delete_collection(collection.id)
        self.kb.store.reclaim_space(passages / total if total else 0.0)

    def __iter__(self):
        return iter(self.list())

    def __len__(self) -> int:
        return len(self.kb.store.collection_rows())


def _examples(info: dict, key: str, entries: list, examples: int | None) -> None:
    """``info[key]``: ``entries``, or their first ``examples``; ``info[key + "_count"]``: how many there are."""
    info[key] = entries if examples is None else entries[: max(0, examples)]
    info[f"{key}_count"] = len(entries)


def _what_chose(embedder: bool, embedding: dict | None, model: str | None, model_dir, words: str = "") -> str:
    """What chose the embedding provider, named for messages (model_mismatch): the argument (as
    ``words`` name it), or the setting."""
    if embedder or embedding or model or model_dir:
        return words or f"the {'embedder' if embedder else 'embedding' if embedding else 'model' if model else 'model_dir'} argument"
    settings = [name for name in ("PMS_EMBED_URL", "PMS_MODEL", "PMS_MODEL_DIR") if os.environ.get(name)]
    if settings:
        return " and ".join(settings[:1] if settings[0] == "PMS_EMBED_URL" else settings)
    return "the packaged app's model" if model_configured() else ""


def _relative_to(path: Path, root: Path) -> str | None:
    """``path`` as a posix path relative to ``root`` (relative paths are taken as
    already relative), or None when it lies outside."""
    if not path.is_absolute():
        return path.as_posix()
    for candidate, base in ((path, root), (path.resolve(), root.resolve())):
        with contextlib.suppress(ValueError):
            return candidate.relative_to(base).as_posix()
    return None


class KnowledgeBase:
    """The whole engine behind one object; the CLI, MCP and the GUI only call this.
    Thread-safe for one writer (sync) and any number of readers: each thread gets its
    own SQLite connection."""

    def __init__(self, db_path: str | os.PathLike | None = None, *, embeddings: bool = True,
                 model: str | None = None, model_dir: str | os.PathLike | None = None,
                 passage_chars: int = DEFAULT_PASSAGE_CHARS, allow_download: bool = True,
                 notice: Callable[[str], None] | None = None, embedder: EmbeddingProvider | None = None,
                 vector_memory_mb: float | None = None, embedding: dict | None = None, chosen_by: str = "",
                 ranking: RankingSettings | None = None, chunk_chars: int | None = None):
        """``notice`` receives one-line news while work goes on (a model download, waiting for
        another sync), possibly from a worker thread. ``embedder``: an EmbeddingProvider of
        your own instead of the one ``model``/``model_dir`` describe. ``embedding``: an
        embedding server, e.g. ``{"url": "http://127.0.0.1:11434", "kind": "ollama", "model":
        "bge-m3"}`` (keys of ``HTTPEmbedder.config()``), remembered by the index at sync.
        ``vector_memory_mb``: as keep_vectors_in_memory (None or 0: never). ``chosen_by``: how
        messages name what chose ``embedding``, ``model`` or ``model_dir`` (the CLI: its flags;
        default: the argument's name). ``ranking``: other ranking knobs than the defaults
        (RankingSettings; what bench/suite.py --setting measures). ``chunk_chars``: the old name of
        ``passage_chars``, still taken."""
        self.db_path = Path(db_path).expanduser() if db_path else default_db_path()
        self.notice = notice
        self._listeners: list[Callable[[str], None]] = []  # listen()
        self.store = Store(self.db_path, vectors=embeddings)
        embedder_given = embedder is not None
        chosen = embedding or (None if model or model_dir else embedding_choice_from_env())
        if embeddings and embedder is None and chosen:
            embedder = make_embedder(chosen, notice=self._notify)
        elif embeddings and embedder is None and model is None and model_dir is None and not (
                os.environ.get("PMS_MODEL") or os.environ.get("PMS_MODEL_DIR")) and self.store.remembered_provider():
            # The index was embedded by a server the user chose: ask it again (a bundled model is only a default).
            embedder = make_embedder(self.store.remembered_provider() or {}, notice=self._notify)
            embedder.remembered = True
        chosen_by_default = embedder is None and not chosen and model is None and model_dir is None and not model_configured()
        if embeddings and embedder is None:
            remembered = folder = None
            if model is None and model_dir is None and not model_configured():
                remembered, folder = self.store.remembered_model()
            # Nothing chosen now: embed queries with the model (and folder) the index was embedded with.
            embedder = Embedder(remembered or model, folder if remembered else model_dir, allow_download=allow_download,
                                notice=self._notify)
            embedder.remembered = bool(remembered)
            spec = self.store.query_spec(embedder.model_name)
            if spec and (embedder.model_dir is None or Path(spec["dir"]) == embedder.model_dir.resolve()):
                embedder.query_spec = spec  # a search can embed its query without loading fastembed
        if embeddings and embedder is not None and not embedder.remembered:
            embedder.chosen_by = _what_chose(embedder_given, embedding, model, model_dir, chosen_by)
        self.embedder = embedder if embeddings else None
        # Nothing chose the model (no setting, no bundled model, nothing remembered): the first
        # sync may pick a multilingual one when most notes are not English (_model_for_languages).
        self._model_by_default = bool(embeddings and chosen_by_default and self.store.get_meta("embed_model") is None)
        self._allow_download = allow_download
        self.retrieval = Retrieval(self.store, self.embedder, ranking)
        self.collections = Collections(self)
        self.passage_chars = chunk_chars if chunk_chars is not None else passage_chars
        self._syncs = 0  # syncs of this KnowledgeBase running now (any thread)
        self._searched: collections.deque[tuple[str, str]] = collections.deque(maxlen=SEARCHED_NOTES_KEPT)
        if vector_memory_mb:
            self.keep_vectors_in_memory(vector_memory_mb)

    @property
    def chunk_chars(self) -> int:
        """The old name of ``passage_chars``, still readable."""
        return self.passage_chars

    def use_embedding(self, *, model_dir: str | os.PathLike | None = None, embedding: dict | None = None,
                      keyword_only: bool = False) -> SearchMode:
        """Change how this KnowledgeBase finds meaning, as a long-running front end offers it (the
        app, offline with no model): a local model folder (any, recognised by what it holds), an
        embedding server (``embedding``: keys of ``HTTPEmbedder.config()``, e.g. ``{"url": ...,
        "model": ...}``), or ``keyword_only``: none. The model is loaded first: when it cannot be,
        EmbeddingUnavailable says why and nothing changes. The next sync embeds with it, and the
        index remembers it for later runs. Returns the mode searches use now (a model other than
        the index's: keyword, with the hint to re-embed)."""
        if [bool(model_dir), bool(embedding), keyword_only].count(True) != 1:
            raise PMSError("choose one: a model folder, an embedding server, or keyword search only")
        provider: EmbeddingProvider | None = None
        if model_dir:
            provider = Embedder(model_dir=Path(model_dir).expanduser().resolve(), allow_download=False, notice=self._notify)
            provider.chosen_by = "the chosen model folder"
        elif embedding:
            provider = make_embedder(embedding, notice=self._notify)
            provider.chosen_by = "the chosen embedding server"
        if provider is not None:
            provider.load()
        self.embedder = self.retrieval.embedder = provider
        self._model_by_default = False
        return self.search_mode()

    def keep_vectors_in_memory(self, max_mb: float = VECTOR_MATRIX_MAX_MB, ann: bool = False) -> None:
        """For a process that searches many times (the app, the MCP server): from its second
        vector search on, the vectors (up to ``max_mb``) are held in memory (VectorMemory).
        ``ann``: KNN without filters by an HNSW graph (usearch), for very big vaults. A one-shot
        process leaves this off: its single search never reads every vector."""
        self.retrieval.vectors = VectorMemory(self.store, max_mb, ann=ann)

    @property
    def index_path(self) -> Path:
        """The index file."""
        return self.db_path

    @property
    def embeddings_enabled(self) -> bool:
        """Whether this KnowledgeBase was opened to embed; ``search_mode()`` says if vectors can run now."""
        return self.embedder is not None

    def listen(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Send one-line news to ``callback`` too (besides ``notice``), possibly from a worker
        thread: a front end that shows it (the app's status line). Returns what stops it."""
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback) if callback in self._listeners else None

    def _notify(self, text: str) -> None:
        for receive in (self.notice, *self._listeners):
            if receive is not None:
                receive(text)

    def close(self) -> None:
        self.retrieval.close()
        self.store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- sync ------------------------------------------------------------------------
    def _collection_rows(self, names: Sequence[str] | None) -> list[CollectionRow]:
        if not names:
            return self.store.collection_rows()
        return [self.store.require_collection(n) for n in names]

    def check_sync_status(self, collections: Sequence[str] | None = None) -> SyncPlan:
        """What ``sync`` would add, update and delete, without changing anything."""
        return Syncer(self.store, None, self.passage_chars).plan(self._collection_rows(collections))

    def sync(self, collections: Sequence[str] | None = None, *, paths: Sequence[str | os.PathLike] | None = None,
             embed: bool = True, reembed: bool = False, progress: Callable[[SyncProgress], None] | None = None,
             cancel: threading.Event | None = None) -> SyncReport:
        """Index new and changed notes, drop deleted ones, then embed new passages. ``paths``
        (absolute or collection-relative) limits the work to those files; ``cancel`` (an
        Event) stops between batches, leaving a consistent index."""
        self.store.require_writable()
        rows = self._collection_rows(collections)
        by_collection: dict | None = None
        if paths is not None:
            by_collection = {}
            for row in rows:
                for p in paths:
                    rel = _relative_to(Path(p), Path(row.path))
                    if rel is not None:
                        by_collection.setdefault(row.name, []).append(rel)
        syncer = Syncer(self.store, self.embedder if embed else None, self.passage_chars, notice=self._notify,
                        choose_embedder=self._model_for_languages if self._model_by_default else None,
                        embed_first=self._searched)
        self._syncs += 1
        try:
            return self._run_sync(syncer, rows, by_collection, embed, reembed, progress, cancel)
        finally:
            self._syncs -= 1
            if not self._syncs:
                self._searched.clear()

    def _run_sync(self, syncer: Syncer, rows, by_collection, embed: bool, reembed: bool, progress, cancel) -> SyncReport:
        with storage_errors(self.db_path):  # a full disk or a damaged index: one line, the index as it was
            if reembed and self.embedder is not None:
                report = syncer.run(rows, paths=by_collection, embed=False, progress=progress, cancel=cancel)
                if not report.cancelled:
                    try:
                        syncer.embed_pending(report, progress, cancel, reembed=True)
                    except SyncCancelled:
                        report.cancelled = True
                return report
            return syncer.run(rows, paths=by_collection, embed=embed, progress=progress, cancel=cancel)

    def watch(self, collections: Sequence[str] | None = None, *, stop: threading.Event | None = None,
              on_sync: Callable[[SyncReport], None] | None = None, on_error: Callable[[str], None] | None = None,
              sync_lock: contextlib.AbstractContextManager | None = None, catch_up: bool = True,
              interval: float = WATCH_INTERVAL, quiet: float = WATCH_QUIET,
              paths_per_look: int = WATCH_PATHS_PER_LOOK) -> None:
        """Keep the index fresh until ``stop`` is set: sync (``catch_up``: once now, then) the
        collections whose folders changed (FolderWatcher); ``on_sync`` gets each report,
        ``on_error`` each failed sync's one line. A change made while a sync runs is synced
        after it. Past ``paths_per_look`` folders and notes, they are looked at in turns and
        ``notice`` hears once how long a change may take to be seen."""
        self.store.require_writable()
        self.collections.list() if collections is None else [self.collections.get(n) for n in collections]  # they exist

        def source():
            return [c for c in self.collections.list() if collections is None or c.name in collections]

        def sync(names: list[str] | None) -> None:
            try:
                with sync_lock or contextlib.nullcontext():
                    report = self.sync(collections=names)
            except PMSError as exc:
                if on_error is not None:
                    on_error(str(exc))
                return
            if on_sync is not None:
                on_sync(report)

        watcher = FolderWatcher(sync, source, interval=interval, quiet=quiet, paths_per_look=paths_per_look,
                                notice=self._notify)
        watcher.watch()  # before the first sync: a change while it runs is seen, and synced after it
        if catch_up:
            sync([c.name for c in source()])
        watcher.run(stop, look_first=False)

    def changed_on_disk(self, hits: Iterable[Hit]) -> list[Hit]:
        """The hits whose note changed or went away since it was indexed (the index is older than the file)."""
        if not hits:
            return []
        indexed = self.store.indexed_times([(h.collection, h.path) for h in hits])
        stale = []
        for h in hits:
            try:
                st = os.stat(h.abspath)
                now = (st.st_mtime_ns, st.st_size)
            except OSError:
                now = None
            if now != indexed.get((h.collection, h.path)):
                stale.append(h)
        return stale

    # -- search ------------------------------------------------------------------------
    def search_mode(self, mode: str = "auto") -> SearchMode:
        """The mode a search asked for ``mode`` will use, and why hybrid is not available."""
        return self.retrieval.search_mode(mode)

    def search(self, query: str, k: int = 10, mode: str = "auto", collections: Sequence[str] | None = None,
               passages: bool = False, prefix_last: bool = False, *, note_filter: NoteFilter | None = None,
               min_score: float | None = None, intent: str = "", queries: Sequence[str] = (),
               chunks: bool | None = None, **filter_fields) -> SearchResult:
        """Search notes: the best ``k`` results, each followed by its copies (hits whose ``copy_of``
        names it: the same text elsewhere, not counted among the k; ``result.groups`` pairs
        them; asking for fewer results gives the first ones of a longer list). ``mode``: auto
        (hybrid when embeddings are ready), hybrid, keyword, vector. ``min_score`` leaves out
        hits whose ``relevance`` (absolute, 0-1) is below it; the result's ``weak`` says when
        none reaches RankingSettings.relevance_floor. ``intent`` (what the search is for, in
        words) is context for the vector list only; ``queries`` are other phrasings searched
        in the same call, their lists fused into one. ``passages``: one result per passage, not
        per note (``chunks`` is its old name, still taken).

        ``note_filter`` (a NoteFilter) narrows every mode inside the query; its fields may be
        given instead as keywords (``tags=``, ``exclude_tags=``, ``path=``, ``after=``,
        ``before=``, ``where=``, as NoteFilter.build takes them). A filter and no words lists
        the matching notes, newest first. Any query is accepted (``clean_query``)."""
        if filter_fields:
            if note_filter is not None:
                raise PMSError("give note_filter or its fields (tags=, path=, ...), not both")
            note_filter = NoteFilter.build(**filter_fields)
        passages = passages or bool(chunks)
        if queries:
            if isinstance(queries, str) or len(queries) > MAX_QUERIES or not all(isinstance(q, str) for q in queries):
                raise PMSError(f"queries wants a list of at most {MAX_QUERIES} phrasings", argument="queries")
            return self._search_several([query, *queries], k=k, mode=mode, collections=collections, passages=passages,
                                        note_filter=note_filter, min_score=checked_min_score(min_score), intent=intent)
        req = self.retrieval.request(query, k, collections, passages, prefix_last, note_filter, mode, min_score, intent)
        try:
            result = self.retrieval.search(req)
        except EmbeddingUnavailable as exc:  # the model failed to load just now
            if mode != "auto":
                raise
            result = self.retrieval.search(req.replace(used="keyword", reason=exc.message, hint=exc.hint))
        if self._syncs:  # a sync embeds (or will): the notes just shown gain vectors next
            self._searched.extend((hit.collection, hit.path) for hit in result)
        return with_obsidian_urls(result)

    def _search_several(self, queries: list[str], *, k: int, mode: str, collections, passages: bool,
                        note_filter: NoteFilter | None, min_score: float | None, intent: str) -> SearchResult:
        """Each query searched alone (twice as deep), their hit lists fused by RRF into one; a
        hit keeps its best passage and relevance of all the queries."""
        results = [self.search(q, k=max(1, int(k)) * 2, mode=mode, collections=collections, passages=passages, intent=intent,
                               note_filter=note_filter) for q in queries if q.strip()]
        if not results:
            return self.search("", k=k, mode=mode, collections=collections, passages=passages, note_filter=note_filter)
        unit = (lambda h: (h.collection, h.path, h.start_line)) if passages else (lambda h: (h.collection, h.path))
        best: dict[object, Hit] = {}
        for result in results:
            for hit in result:
                kept = best.get(unit(hit))
                if kept is None or (hit.relevance or 0.0) > (kept.relevance or 0.0):
                    best[unit(hit)] = hit
        fused = fuse({f"query {i}": [(unit(h), h.score) for h in r] for i, r in enumerate(results)},
                     self.retrieval.settings.replace(method="rrf", score_share=0.0))
        hits = [best[entry.unit].replace(score=entry.score / fused[0].score if fused[0].score else 0.0) for entry in fused
                if min_score is None or (best[entry.unit].relevance or 0.0) >= min_score]
        top = max((r.best_relevance for r in results if r.best_relevance is not None), default=None)
        first = results[0]
        return SearchResult(first_results(hits, max(1, int(k))), first.mode, first.reason, first.hint,
                            explain=f"{len(results)} queries, fused by RRF", best_relevance=top,
                            weak=top is None or top < self.retrieval.settings.floor_for(first.mode), query=first.query,
                            words=list(dict.fromkeys(word for r in results for word in r.words)))

    def tags(self, collections: Sequence[str] | None = None) -> list[tuple[str, int]]:
        """(tag, number of notes) for every tag (frontmatter and inline), most used first."""
        return self.store.tag_counts(self.retrieval.collection_ids(collections))

    # -- notes: links and related notes ---------------------------------------------------------
    def links(self, note: str) -> list[NoteRef]:
        """The notes a note links to, in order; an unresolved link has ``path`` None."""
        row = self._resolve(self._split_ref(note)[0])  # a ':FROM:COUNT' suffix, as get takes, is fine
        resolver = self._resolver(row.collection)
        refs = []
        for target, key, fragment, kind, line in self.store.links_from(row.id):
            refs.append(self._note_ref(row.collection, resolver.resolve(kind, key), target + fragment, line))
        return refs

    def resolve_link(self, note: str, target: str, kind: str = "wiki") -> NoteRef:
        """The note a link written in ``note`` points to, by the rule ``links`` uses: ``target``
        as in ``[[target]]`` (kind "wiki") or ``[text](target)`` ("markdown"); path None: nowhere."""
        row = self._resolve(note)
        # (a wikilink needs no path: without one, a link to the note itself is read as one)
        written = note_links(f"[[{target}]]") if kind == "wiki" else note_links(f"[link](<{target}>)", row.path)
        if not written:  # [[#heading]] in the note itself, or no note link at all
            note_id = row.id if kind == "wiki" and target.startswith(("#", "^")) else None
            return self._note_ref(row.collection, note_id, target, 0)
        return self._note_ref(row.collection, self._resolver(row.collection).resolve(kind, written[0].key), target, 0)

    def link_titles(self, note: str, text: str) -> dict[str, str]:
        """Each label-less wikilink's target in ``text`` (``note``'s body; lower case, as
        ``unlabelled_link_targets`` gives it) -> the title of the note it names (its file name, in the
        note's collection; a name two notes share is left out): what a Dendron note's ``[[target]]``
        shows (``enableNoteTitleForLink``, Dendron's default), as its snippets do. One statement."""
        collection = self._resolve(note).collection
        return {target: title for (_, target), title in
                self.store.titles_named({(collection, t) for t in unlabelled_link_targets(text)}).items()}

    def backlinks(self, note: str) -> list[NoteRef]:
        """The notes that link to a note (one entry per linking note)."""
        row = self._resolve(self._split_ref(note)[0])  # a ':FROM:COUNT' suffix, as get takes, is fine
        note_id, collection, rel, aliases = row.id, row.collection, row.path, row.aliases
        col_id = self.store.require_collection(collection)[0]
        resolver = self._resolver(collection)
        sources, seen = [], {note_id}  # a note's links to itself are not backlinks
        keys = LinkResolver.keys_for(rel, aliases)
        for source, target, key, kind, line in self.store.links_to(col_id, keys, file_name=keys[0].rsplit("/", 1)[-1]):
            if source not in seen and resolver.resolve(kind, key) == note_id:
                seen.add(source)
                sources.append((source, target, line))
        rows = self.store.note_rows([s for s, _, _ in sources])
        return [NoteRef(collection=rows[s][0], path=rows[s][1], title=rows[s][3], docid=rows[s][2], target=target, line=line)
                for s, target, line in sources if s in rows]

    def unresolved_links(self, collections: Sequence[str] | None = None) -> list[NoteRef]:
        """Links that point to no note (a renamed or deleted note, a typo): the linking note and the target as written."""
        out = []
        for col in self._collection_rows(collections):
            resolver = self._resolver(col.name)
            broken = [(s, t, line) for s, t, key, kind, line in self.store.collection_links(col.id) if resolver.resolve(kind, key) is None]
            rows = self.store.note_rows([s for s, _, _ in broken])
            out += [NoteRef(collection=col.name, path=rows[s][1], title=rows[s][3], docid=rows[s][2], target=t, line=line, resolved=False)
                    for s, t, line in broken if s in rows]
        return out

    def related(self, note: str, k: int = 10, collections: Sequence[str] | None = None) -> SearchResult:
        """The notes closest in meaning to ``note``, each as a Hit on its passage that makes it
        related: by the note's passage vectors (the result's mode vector), without embeddings
        by the rare terms the notes share (keyword). By default from the note's own collection."""
        row = self._resolve(self._split_ref(note)[0])  # a ':FROM:COUNT' suffix, as get takes, is fine
        return with_obsidian_urls(self.retrieval.related(row.id, max(1, min(int(k), 1000)), collections or [row.collection]))

    def describe_folder(self, collection: str, folder: str, description: str) -> None:
        """Say what a folder of a collection holds (returned with every hit under it); '' removes it."""
        col = self.collections.get(collection)
        folder = folder.replace("\\", "/").strip().strip("/")
        if not folder:
            self.store.update_collection(col.name, description=description or "")
            return
        if not (col.path / folder).is_dir():
            raise PMSError(f"{col.path / folder} is not a folder of collection {col.name!r}")
        self.store.set_folder_description(col.id, folder, description or "")

    def _resolver(self, collection: str) -> LinkResolver:
        return LinkResolver(self.store.link_targets(self.store.require_collection(collection)[0]))

    def _note_ref(self, collection: str, note_id: int | None, target: str, line: int) -> NoteRef:
        row = self.store.note_rows([note_id]).get(note_id) if note_id is not None else None
        if row is None:
            return NoteRef(collection=collection, path=None, title=None, docid=None, target=target, line=line, resolved=False)
        return NoteRef(collection=row[0], path=row[1], title=row[3], docid=row[2], target=target, line=line)

    def _model_for_languages(self) -> EmbeddingProvider | None:
        """At the first sync of an index whose model nobody chose: a multilingual model when
        at least MULTILINGUAL_PICK_SHARE of the notes are not in English."""
        self._model_by_default = False
        if self.store.get_meta("embed_model") is not None:
            return None
        counts = self.store.language_counts()
        known = sum(n for lang, n in counts.items() if lang != "und")
        if known < LANGUAGE_MIN_NOTES or (known - counts.get("en", 0)) < MULTILINGUAL_PICK_SHARE * known:
            return None
        self._notify(f"{known - counts.get('en', 0)} of {known} notes are not in English: "
                     f"embedding with the multilingual model {MULTILINGUAL_MODEL}")
        self.embedder = Embedder(MULTILINGUAL_MODEL, allow_download=self._allow_download, notice=self._notify)
        self.retrieval.embedder = self.embedder
        return self.embedder

    def language_advice(self) -> str | None:
        """What to do when a fair share of the notes is not in English and the model reads English only."""
        model = self.store.get_meta("embed_model") or (self.embedder.model_name if self.embedder else None)
        return language_advice(self.store.language_counts(), model)

    def load_embedder(self, retry: bool = False) -> bool:
        """Make ready what a search embeds its query with, now (in a background thread, so the
        first search is fast); False if unavailable. When the index remembers its model's
        files that is the query encoder alone: fastembed loads only when it cannot be made."""
        embedder: _typing.Any = self.embedder  # a provider with a query encoder (fastembed's, a local folder)
        if retry and embedder is not None:  # a load that failed is tried again (the files are back, or the network)
            embedder.clear_error()
        if embedder is None:
            return False
        if getattr(embedder, "query_spec", None):
            try:
                embedder.query_encoder(optimised=True).embed("warm up")  # a session's first run is its slowest
                return True
            except Exception:  # files moved or changed: fastembed below says what is wrong
                pass
        try:
            embedder.load()
        except EmbeddingUnavailable:
            return False
        if getattr(embedder, "query_spec", None):  # learnt from the loaded model: searches embed their queries with it
            with contextlib.suppress(Exception):
                embedder.query_encoder(optimised=True).embed("warm up")
        return True

    @staticmethod
    @contextlib.contextmanager
    def time_limit(seconds: float | None, what: str = "the call"):
        """Stop what runs inside (in this thread) once ``seconds`` have passed: its SQLite
        queries are interrupted and it raises DeadlineExceeded."""
        if seconds is None:
            yield
            return
        saved = getattr(CALL_DEADLINE, "at", None), getattr(CALL_DEADLINE, "message", None)
        CALL_DEADLINE.at = time.monotonic() + max(0.0, float(seconds))
        CALL_DEADLINE.message = (f"{what} took longer than {seconds:g} s and was stopped "
                             "(narrow it: fewer notes, a smaller k, a more specific pattern)")
        try:
            yield
        except DeadlineExceeded:
            raise
        except Exception:
            if past_deadline():  # an interrupted query, whatever error it surfaced as
                raise DeadlineExceeded(CALL_DEADLINE.message) from None
            raise
        finally:
            CALL_DEADLINE.at, CALL_DEADLINE.message = saved

    # -- reading ----------------------------------------------------------------------------
    def get(self, ref: str, from_line: int | None = None, count: int | None = None,
            max_bytes: int | None = None) -> Note:
        """A note by ``collection/path.md``, path, ``#docid`` or docid; ``:FROM[:COUNT]`` selects
        lines (of a PDF, pages). With ``max_bytes`` the text stops at the last whole line
        (page) that fits (``truncated``)."""
        target, ref_from, ref_count = self._split_ref(ref)
        from_line = from_line if from_line is not None else ref_from
        count = count if count is not None else ref_count
        if max_bytes is not None:
            max_bytes = checked_number(max_bytes, "max_bytes")
        return self._read_note(self._resolve(target), from_line, count, max_bytes)

    @staticmethod
    def _split_ref(ref: str) -> tuple[str, int | None, int | None]:
        """``note:FROM:COUNT`` -> (note, FROM, COUNT)."""
        ref = clean_query(ref, limit=None).strip()
        if not ref:
            raise PMSError("which note? give collection/path.md, a path or the #docid shown in search results")
        m = re.match(r"^(.*?)(?::(\d+))?(?::(\d+))?\Z", ref, re.DOTALL)  # a file name may hold a newline
        return m.group(1), int(m.group(2)) if m.group(2) else None, int(m.group(3)) if m.group(3) else None

    def _read_note(self, row: NoteRow, from_line: int | None = None, count: int | None = None,
                       max_bytes: int | None = None) -> Note:
        if count is not None and count < 1:
            raise PMSError(f"a line count must be 1 or more, not {count} (leave it out for the rest of the note)")
        if from_line is not None and from_line < 1:
            raise PMSError(f"lines count from 1, not {from_line}")
        abspath = Path(row.collection_path) / row.path
        if not inside(abspath, os.path.realpath(row.collection_path)) and abspath.exists():
            raise PMSError(f"{row.collection}/{row.path} is not read: it is a symlink that leads outside the "
                           "collection's folder (it was replaced after the last sync)")
        if is_pdf(row.path):
            return self._read_pdf(row, abspath, from_line, count, max_bytes)
        try:
            text = decode_text(read_note_file(abspath))
        except FileNotFoundError:
            raise PMSError(f"{row.collection}/{row.path} no longer exists (the index is older than the folder)",
                           Hint(command="sync")) from None
        except (OSError, BinaryFileError, FileTooLargeError) as exc:
            raise PMSError(f"cannot read {row.collection}/{row.path}: {exc}") from None
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()  # the "line" after the final newline is none
        first = max(1, from_line or 1)
        if first > max(1, len(lines)):
            raise PMSError(f"{row.collection}/{row.path} has {len(lines)} lines; line {first} is past its end")
        end = len(lines) if count is None else min(len(lines), first - 1 + count)
        chosen = lines[first - 1 : end]
        truncated = False
        if max_bytes is not None:
            budget, kept = max(1, int(max_bytes)), 0
            for line in chosen:
                budget -= len(line.encode("utf-8")) + 1
                if budget < 0:
                    break
                kept += 1
            if kept < len(chosen):
                truncated = True
                if kept == 0:  # one line longer than the whole budget: its start
                    chosen = [chosen[0].encode("utf-8")[: max(1, int(max_bytes))].decode("utf-8", "ignore")]
                    kept = 1
                chosen = chosen[:kept]
        body = text if from_line is None and count is None and not truncated else "\n".join(chosen)  # whole: as on disk
        return Note(collection=row.collection, path=row.path, abspath=str(abspath), docid=row.docid, title=row.title,
                        tags=[t for t in row.tags.split(",") if t], text=body, from_line=first,
                        to_line=first + len(chosen) - 1, total_lines=len(lines), truncated=truncated,
                        obsidian_url=obsidian_vaults.url(str(abspath)))

    def _read_pdf(self, row: NoteRow, abspath: Path, first_page: int | None, count: int | None,
                  max_bytes: int | None) -> Note:
        """A PDF's text as indexed (without the PDF library): the pages asked for (``file.pdf:12``
        is page 12 alone), each after a ``--- p. N ---`` line when there are several."""
        pages, texts = self.store.pdf_pages(row.id)
        first = max(1, first_page or 1)
        count = 1 if first_page and count is None else count
        if first > max(pages, 1):
            raise PMSError(f"{row.collection}/{row.path} has {pages} pages; page {first} is past its end")
        last = pages if count is None else min(pages, first - 1 + max(0, count))
        chosen = [(n, texts.get(n, "")) for n in range(first, max(last, first) + 1)]
        truncated = False
        while True:  # whole pages while they fit
            text = chosen[0][1] if len(chosen) == 1 else "\n\n".join(f"--- p. {n} ---\n{t}" for n, t in chosen)
            if max_bytes is None or len(text.encode("utf-8")) <= max_bytes:
                break
            truncated = True
            if len(chosen) == 1:
                text = text.encode("utf-8")[: max(1, int(max_bytes))].decode("utf-8", "ignore")
                break
            chosen = chosen[:-1]
        return Note(collection=row.collection, path=row.path, abspath=str(abspath), docid=row.docid, title=row.title,
                        tags=[t for t in row.tags.split(",") if t], text=text, page=first, from_line=first,
                        to_line=chosen[-1][0], total_lines=pages, truncated=truncated,
                        obsidian_url=obsidian_vaults.url(str(abspath)))

    def multi_get(self, pattern: str, max_bytes: int = MULTI_GET_MAX_BYTES,
                  max_files: int = MULTI_GET_MAX_FILES) -> tuple[list[Note], list[tuple[str, str]]]:
        """Several indexed notes at once: (notes, skipped as (ref, why)). ``pattern`` is a
        glob over ``collection/path.md`` or a comma-separated list of refs as ``get`` takes
        them. ``max_bytes`` bounds the whole answer: notes are added whole while they fit (the
        first at least in part), the others skipped with a reason starting OVER_BUDGET."""
        limit = min(checked_number(max_bytes, "max_bytes"), max_file_bytes())  # never a read past the file limit
        items = [p.strip() for p in _split_outside_braces(pattern) if p.strip()]
        if not items:
            raise PMSError("give a glob such as journal/*.md or a comma-separated list of notes")
        if len(items) > MULTI_GET_MAX_NAMES:
            raise PMSError(f"the pattern names {len(items):,} notes: at most {MULTI_GET_MAX_NAMES:,} at a time "
                           "(or a glob such as journal/*.md)", argument="pattern")
        rows: dict[tuple[str, str], tuple[NoteRow, int | None, int | None]] = {}
        skipped: list[tuple[str, str]] = []
        every = None
        names: dict[str, list[NoteRow]] | None = None  # the loose names of every note, made once for the list
        for item in items:
            if not re.search(r"[*?\[{]", item):
                try:
                    target, start, count = self._split_ref(item)
                    if names is None and len(items) > 1:
                        names = self._loose_names()
                    # Close names are suggested for the first few unknown ones only: each costs a pass over every note.
                    row = self._resolve(target, names, suggest=len(skipped) < 5)
                except PMSError as exc:
                    skipped.append((item, str(exc)))
                    continue
                rows.setdefault((row.collection, row.path), (row, start, count))
                continue
            every = every if every is not None else self.store.find_notes()
            regex = compile_glob(item, "pattern")
            for row in every:
                check_deadline()
                if regex.match(f"{row.collection}/{row.path}") or regex.match(row.path):
                    rows.setdefault((row.collection, row.path), (row, None, None))
        notes: list[Note] = []
        left = max(1, limit)
        for (col, rel), (row, start, count) in rows.items():
            ref = f"{col}/{rel}"
            if len(notes) >= max_files:
                skipped.append((ref, f"more than {max_files} notes matched (narrow the pattern)"))
                continue
            if left <= 0 and notes:
                skipped.append((ref, f"{OVER_BUDGET} ({max_bytes} bytes): read it with get"))
                continue
            try:
                doc = self._read_note(row, start, count, max_bytes=left)
            except PMSError as exc:
                skipped.append((ref, str(exc)))
                continue
            if doc.truncated and notes:
                skipped.append((ref, f"{OVER_BUDGET} ({max_bytes} bytes): read it with get"))
                continue
            notes.append(doc)
            left -= len(doc.text.encode("utf-8")) + 1
        return notes, skipped

    def _resolve(self, target: str, names: dict[str, list[NoteRow]] | None = None, suggest: bool = True) -> NoteRow:
        store = self.store
        docid = target[1:].strip().lower() if target.startswith("#") else target.lower()
        if re.fullmatch(r"[0-9a-f]{6,40}", docid):
            rows = store.find_notes(docid=docid)
            if not rows and len(docid) < DOCID_CHARS:
                # Shorter than any id: an old 6-digit one, or typed short. An id of DOCID_CHARS or more
                # digits is whole: it never names another note whose id it starts (a deleted note's
                # 783ec005 is not 783ec0057).
                rows = store.find_notes(docid_prefix=docid, limit=6)
            if len(rows) == 1:
                return rows[0]
            if len(rows) > 1:  # an old 6-digit id that now starts several notes' ids
                listed = ", ".join(f"{r.collection}/{r.path} (#{r.docid})" for r in rows[:5])
                raise PMSError(f"#{docid} is ambiguous: it starts the ids of {listed}{' ...' if len(rows) > 5 else ''}; "
                               "give the whole id")
            if target.startswith("#"):
                raise PMSError(f"no indexed note has the id #{docid} (ids change when a note is renamed; search again)")
        if "/" in target:
            col, _, rel = target.partition("/")
            rows = store.find_notes(collection=col, path=rel)
            if rows:
                return rows[0]
        rows = store.find_notes(path=target.replace("\\", "/"))
        if rows:
            return rows[0]
        try:
            p = Path(target).expanduser()
        except RuntimeError:  # '~nosuchuser/…': no such home folder, so no such note
            p = Path(target)
        if p.is_absolute():
            for c in self.collections.list():
                inside = _relative_to(p, c.path)
                rows = store.find_notes(collection=c.name, path=inside) if inside else []
                if rows:
                    return rows[0]
        return self._resolve_loosely(target, names, suggest)

    def _loose_names(self) -> dict[str, list[NoteRow]]:
        """Every note under each name it answers to loosely: ``collection/path`` and ``path`` without
        '.md', in lower case, and every tail of them after a '/' (so ``rust`` finds ``dev/rust.md``)."""
        names: dict[str, list[NoteRow]] = {}
        for row in self.store.find_notes():
            check_deadline()
            keys: set[str] = set()
            for name in (f"{row.collection}/{row.path}".lower(), row.path.lower()):
                bare = name[:-3] if name.endswith(".md") else name
                keys.update(bare.split("/", n)[-1] for n in range(bare.count("/") + 1))
            for key in keys:
                names.setdefault(key, []).append(row)
        return names

    def _resolve_loosely(self, target: str, names: dict[str, list[NoteRow]] | None = None,
                         suggest: bool = True) -> NoteRow:
        """A note named loosely (its file name alone, without '.md', in any case); else an
        error that suggests the closest names (when ``suggest``)."""
        import difflib

        want = target.replace("\\", "/").strip().strip("/").lower()
        stem = want[:-3] if want.endswith(".md") else want
        matches = (names if names is not None else self._loose_names()).get(stem, [])
        if len(matches) == 1:
            return matches[0]
        if matches:
            names_text = ", ".join(f"{r.collection}/{r.path}" for r in matches[:5])
            raise PMSError(f"{target!r} names {len(matches)} notes: {names_text}{' ...' if len(matches) > 5 else ''}; give the folder too")
        hint = ""
        if suggest:
            by_name: dict[str, NoteRow] = {}
            for row in self.store.find_notes():
                name = row.path.rsplit("/", 1)[-1].lower()
                by_name.setdefault(name[:-3] if name.endswith(".md") else name, row)
            close = difflib.get_close_matches(stem.rsplit("/", 1)[-1], list(by_name), n=3, cutoff=0.6)
            hint = (" did you mean " + " or ".join(f"{by_name[c].collection}/{by_name[c].path}" for c in close) + "?") if close else ""
        raise PMSError(f"no indexed note matches {target!r};{hint or ' use collection/path.md or the #docid shown in results'}")

    # -- status -----------------------------------------------------------------------------
    def tell_once(self, topic: str, text: str) -> bool:
        """True the first time ``text`` is told about ``topic`` for this index (remembered in it)."""
        key = f"told_{topic}"
        if not text or self.store.get_meta(key) == text:
            return False
        self.store.set_meta_if_free(key, text)  # never waits for a sync: if busy, it is said again next time
        return True

    def sync_running(self) -> bool:
        """True while a sync of this index runs in another process."""
        return Syncer.lock(self.store).held_elsewhere()

    def _embedding_progress(self, totals: dict) -> dict | None:
        """A running sync's embedding (any process): passages done of total, rate and seconds
        left; None when none runs."""
        p = self.store.embedding_progress()
        if not p or p["done"] >= p["total"] or not self.sync_running() or totals["passages"] == totals["embedded"]:
            return None
        rate = p["done"] / p["seconds"] if p["seconds"] else 0.0
        return {"done": p["done"], "total": p["total"], "rate": round(rate, 1),
                "eta_s": round((p["total"] - p["done"]) / rate) if rate else None}

    def embedding_failure(self) -> dict | None:
        """The last time embedding failed, ``{"at": ISO time or None, "error": why}``: in this process
        (a search that fell back to keywords; an embedding server's last failure is kept after it
        recovers), else the last sync's, as the index remembers it; None when neither failed."""
        failure = getattr(self.embedder, "last_failure", None)
        if failure:
            return {"at": failure[0], "error": failure[1]}
        error = self.store.get_meta("embed_error")
        if not error:
            return None
        synced = [c.last_sync for c in self.collections.list() if c.last_sync]
        return {"at": max(synced) if synced else None, "error": error}

    def status(self, pending: bool = True, links: bool | None = None, examples: int | None = None) -> dict:
        """Counts, search mode, collections; with ``pending`` what a sync would change, with
        ``links`` (default: as ``pending``) the links that point to no note. ``examples``: at
        most that many entries of each list that grows with the vault (``unresolved_links``,
        ``warnings``), each list's whole length in ``<name>_count`` (None: every entry)."""
        if self.embedder is not None:
            self.embedder.check()  # a server that is down: keyword mode, and why
        used = self.search_mode()
        mode, why = used.mode, used.reason
        totals = self.store.totals()
        info = {
            "index": str(self.db_path),
            "index_bytes": self.store.size_bytes(),
            "schema_version": len(MIGRATIONS),
            "version": VERSION,
            **totals,
            "documents": totals["notes"], "chunks": totals["passages"],  # the old keys, kept for scripts that read them
            "search_mode": mode,
            "search_mode_reason": why,
            "search_mode_hint": used.hint.as_dict() if used.hint else None,
            "model": self.store.get_meta("embed_model") or (self.embedder.model_name if self.embedder else None),
            "vectors_from": self.embedder.source() if self.embedder else None,
            "languages": self.store.language_counts(),
            "language_advice": self.language_advice(),
            "embedding_provider": self.embedder.config() if self.embedder else None,
            "to_embed": totals["passages"] - totals["embedded"] if mode != "keyword" else 0,
            "read_only": self.store.read_only,
            "sync_running": self.sync_running(),
            "collections_detail": [c.to_dict() for c in self.collections.list()],
            "notes_to_reread": self.store.count_stale_notes(),
            "vectors_in_memory_bytes": getattr(self.retrieval.vectors, "nbytes", 0),
            "embedding": self._embedding_progress(totals),
            "pdfs_without_text": self.store.count_skipped(PDF_NO_TEXT),  # scans: OCR them to make them searchable
            "embedding_last_failure": self.embedding_failure(),
        }
        # Files a sync could not index (binary, damaged, too large...): each said once by sync, all listed here.
        not_indexed = [{"collection": c, "path": p, "reason": why, "failed": failed}
                       for c, p, failed, why in self.store.skipped_files()]
        _examples(info, "not_indexed", not_indexed, examples)
        # Lines of a .pmsignore (or Obsidian's settings) that cannot be read: each ignored, named by file and line.
        _examples(info, "warnings", [w for c in info["collections_detail"] for w in c["exclusion_warnings"]], examples)
        if pending if links is None else links:
            _examples(info, "unresolved_links", [r.to_dict() for r in self.unresolved_links()], examples)
        if pending:
            plan = self.check_sync_status()
            info["pending"] = {"added": len(plan.added), "updated": len(plan.updated), "deleted": len(plan.deleted)}
            # Not indexable as they are: those a sync met before, and those it would meet now.
            info["skipped"] = len(not_indexed) + len(plan.skipped) + len(plan.errors)
            info["pdfs_unread"] = plan.pdfs_unread  # the PDF library is not installed
        return info
