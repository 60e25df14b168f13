"""The index file's schema: tables, migrations, ids, and which SQLite to use.

Owns: ``MIGRATIONS`` (the schema as a list of steps; an index is brought up to date when
opened), ``NOTE_PARSER_VERSION``, docids, the CJK side table's spacing, and
``sqlite_module`` / ``sqlite_vec_path`` (the standard sqlite3, or sqlean where it cannot
load extensions).

May import: config.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Callable

from .config import WORD_TOKEN, find_module_spec, hex_digest


# Chinese and Japanese are written without spaces, so FTS5's unicode61 tokenizer takes
# a whole run of characters for one token. The cjk_fts table holds those passages with
# each such character a token of its own; a query word becomes a phrase of its
# characters (FTS5's trigram tokenizer cannot match one- and two-character words).
UNSPACED_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # Hiragana, Katakana, Han
_HAS_UNSPACED_SQL = f"GLOB '*[{UNSPACED_CHARS}]*'"  # the same test in SQL (GLOB compares code points)


@functools.cache  # compiled at first use: a large class
def _unspaced_char() -> re.Pattern:
    return re.compile(f"[{UNSPACED_CHARS}]")


def has_unspaced_chars(text: str) -> bool:
    return not text.isascii() and _unspaced_char().search(text) is not None


def spaced_cjk(text: str | None) -> str:
    """Text with a space around each Chinese/Japanese character (SQL: pms_spaced_cjk)."""
    text = text or ""
    return _unspaced_char().sub(r" \g<0> ", text) if has_unspaced_chars(text) else text


def _names_sql(row: str) -> str:
    """SQL for a note's names, one per line: title, aliases, and the file name
    without folder and extension, with - and _ read as spaces (SQLite has no
    basename(): rtrim(x, <x without '/'>) is x's folder part)."""
    path = f"{row}path"
    base = f"substr({path}, length(rtrim({path}, replace({path}, '/', ''))) + 1)"
    folder_dot = f"rtrim({base}, replace({base}, '.', ''))"
    stem = f"(CASE WHEN instr({base}, '.') > 1 THEN substr({folder_dot}, 1, length({folder_dot}) - 1) ELSE {base} END)"
    return (f"{row}title || char(10) || replace({row}aliases, ',', char(10)) || char(10) || "
            f"replace(replace({stem}, '-', ' '), '_', ' ')")


# A note's id: the first DOCID_CHARS hex digits of sha1("collection_id:path"),
# longer when those are taken (checked at insert).
DOCID_CHARS = 8


def note_docid(collection_id: int, path: str, taken: Callable[[str], bool]) -> str:
    """The shortest free id (DOCID_CHARS or more hex digits) of a note; ``taken(id)`` says which are used."""
    full = hex_digest(f"{collection_id}:{path}".encode(), "sha1")
    for n in range(DOCID_CHARS, len(full)):
        if not taken(full[:n]):
            return full[:n]
    return full  # a (collection, path) is unique, and so is its whole digest


def _unique_docids(db) -> None:
    """Migration: every note's id re-made unique and longer, the index made UNIQUE."""
    taken: set[str] = set()
    ids = []
    for note_id, collection_id, path in db.execute("SELECT id, collection_id, path FROM documents ORDER BY id").fetchall():
        docid = note_docid(collection_id, path, taken.__contains__)
        taken.add(docid)
        ids.append((docid, note_id))
    db.execute("DROP INDEX IF EXISTS documents_docid")
    db.execute("UPDATE documents SET docid = '#' || id")  # placeholders first: old and new ids may swap
    db.executemany("UPDATE documents SET docid = ? WHERE id = ?", ids)
    db.execute("CREATE UNIQUE INDEX documents_docid ON documents(docid)")


def _add_column(db, table: str, column: str, declaration: str) -> None:
    """ALTER TABLE ... ADD COLUMN, unless it is there (a migration may run again on a repaired index)."""
    if column not in [row[1] for row in db.execute(f"PRAGMA table_info({table})")]:
        db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")


def namesake_keys(title: str, path: str) -> tuple[str, str]:
    """What a note shares with its namesakes: its title's words, and its file name's (no
    folder, no extension), lower-cased: the index's ``title_key`` and ``stem_key``. Pure."""
    stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    return " ".join(WORD_TOKEN.findall(title.lower())), " ".join(WORD_TOKEN.findall(stem.lower()))


def _namesake_key_columns(db) -> None:
    """Migration: each note's namesake keys (namesake_keys) from its title and path, indexed."""
    _add_column(db, "documents", "title_key", "TEXT")
    _add_column(db, "documents", "stem_key", "TEXT")
    rows = db.execute("SELECT id, title, path FROM documents WHERE title_key IS NULL OR stem_key IS NULL").fetchall()
    db.executemany("UPDATE documents SET title_key = ?, stem_key = ? WHERE id = ?",
                   [(*namesake_keys(title or "", path), note_id) for note_id, title, path in rows])
    db.execute("CREATE INDEX IF NOT EXISTS documents_title_key ON documents(title_key)")
    db.execute("CREATE INDEX IF NOT EXISTS documents_stem_key ON documents(stem_key)")


def _note_substance_columns(db) -> None:
    """Migration: a note's words, own words and links out (note_substance), -1 until read."""
    for column, declaration in (("words", "INTEGER NOT NULL DEFAULT -1"), ("own_words", "INTEGER NOT NULL DEFAULT -1"),
                                ("links_out", "INTEGER NOT NULL DEFAULT 0")):
        _add_column(db, "documents", column, declaration)


# Numbered migrations: PRAGMA user_version counts how many have run. Append,
# never edit a released one. An entry is SQL text, or a function of the connection.
MIGRATIONS: list[str | Callable] = [
    # 1: collections, documents, chunks, FTS5 (external content: the text is stored once).
    """
    CREATE TABLE collections (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        path TEXT NOT NULL,
        glob TEXT NOT NULL DEFAULT '**/*.md',
        description TEXT NOT NULL DEFAULT '',
        created_at TEXT,
        last_sync TEXT
    );
    CREATE TABLE documents (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        path TEXT NOT NULL,
        docid TEXT NOT NULL,
        title TEXT NOT NULL,
        tags TEXT NOT NULL DEFAULT '',
        aliases TEXT NOT NULL DEFAULT '',
        size INTEGER,
        mtime_ns INTEGER,
        sha256 TEXT,
        indexed_at TEXT,
        UNIQUE (collection_id, path)
    );
    CREATE INDEX documents_docid ON documents(docid);
    CREATE TABLE chunks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        start_line INTEGER NOT NULL,
        end_line INTEGER NOT NULL,
        hash TEXT NOT NULL,
        title TEXT NOT NULL,
        headings TEXT NOT NULL,
        body TEXT NOT NULL,
        embedded INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX chunks_document ON chunks(document_id);
    CREATE INDEX chunks_unembedded ON chunks(id) WHERE embedded = 0;
    CREATE VIRTUAL TABLE chunks_fts USING fts5(
        title, headings, body,
        content='chunks', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2'
    );
    CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_fts(rowid, title, headings, body) VALUES (new.id, new.title, new.headings, new.body);
    END;
    CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, title, headings, body) VALUES ('delete', old.id, old.title, old.headings, old.body);
    END;
    CREATE TRIGGER chunks_au AFTER UPDATE OF title, headings, body ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, title, headings, body) VALUES ('delete', old.id, old.title, old.headings, old.body);
        INSERT INTO chunks_fts(rowid, title, headings, body) VALUES (new.id, new.title, new.headings, new.body);
    END;
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
    """,
    # Files a sync skipped (binary, too large, unreadable, unsafe frontmatter), so
    # that status and dry runs do not count them as new, and an unchanged one is
    # not read again; ctime too, so a chmod makes an unreadable file retried.
    """
    CREATE TABLE IF NOT EXISTS skipped_files (
        collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        path TEXT NOT NULL,
        size INTEGER,
        mtime_ns INTEGER,
        ctime_ns INTEGER,
        failed INTEGER NOT NULL DEFAULT 0,
        reason TEXT NOT NULL,
        PRIMARY KEY (collection_id, path)
    );
    """,
    # Chinese/Japanese passages, one token per character (see spaced_cjk); filled from chunks by triggers.
    f"""
    CREATE VIRTUAL TABLE IF NOT EXISTS cjk_fts USING fts5(title, body, tokenize='unicode61 remove_diacritics 2');
    CREATE TRIGGER IF NOT EXISTS chunks_cjk_ai AFTER INSERT ON chunks WHEN (new.title || ' ' || new.body) {_HAS_UNSPACED_SQL} BEGIN
        INSERT INTO cjk_fts(rowid, title, body) VALUES (new.id, pms_spaced_cjk(new.title), pms_spaced_cjk(new.body));
    END;
    CREATE TRIGGER IF NOT EXISTS chunks_cjk_ad AFTER DELETE ON chunks BEGIN
        DELETE FROM cjk_fts WHERE rowid = old.id;
    END;
    CREATE TRIGGER IF NOT EXISTS chunks_cjk_au AFTER UPDATE OF title, body ON chunks BEGIN
        DELETE FROM cjk_fts WHERE rowid = old.id;
        INSERT INTO cjk_fts(rowid, title, body) SELECT new.id, pms_spaced_cjk(new.title), pms_spaced_cjk(new.body)
            WHERE (new.title || ' ' || new.body) {_HAS_UNSPACED_SQL};
    END;
    INSERT INTO cjk_fts(rowid, title, body) SELECT id, pms_spaced_cjk(title), pms_spaced_cjk(body) FROM chunks
        WHERE (title || ' ' || body) {_HAS_UNSPACED_SQL};
    """,
    # Notes-native metadata: tags, frontmatter fields, the note's date, links
    # and folder descriptions. Existing notes are filled in by the next sync,
    # which re-reads notes whose parsed_version is behind (vectors are kept).
    """
    ALTER TABLE documents ADD COLUMN note_date TEXT;
    ALTER TABLE documents ADD COLUMN parsed_version INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX documents_note_date ON documents(note_date);
    CREATE TABLE note_tags (
        document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
        tag TEXT NOT NULL,
        PRIMARY KEY (tag, document_id)
    ) WITHOUT ROWID;
    CREATE INDEX note_tags_document ON note_tags(document_id);
    CREATE TABLE note_fields (
        document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
        key TEXT NOT NULL COLLATE NOCASE,
        value TEXT NOT NULL COLLATE NOCASE
    );
    CREATE INDEX note_fields_document ON note_fields(document_id, key);
    CREATE TABLE note_links (
        document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
        target TEXT NOT NULL,
        target_key TEXT NOT NULL,
        fragment TEXT NOT NULL DEFAULT '',
        kind TEXT NOT NULL,
        line INTEGER NOT NULL
    );
    CREATE INDEX note_links_document ON note_links(document_id);
    CREATE INDEX note_links_target ON note_links(target_key);
    CREATE TABLE folder_descriptions (
        collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        folder TEXT NOT NULL,
        description TEXT NOT NULL,
        PRIMARY KEY (collection_id, folder)
    );
    """,
    # note_names: each note's names (title, aliases, file name) for near-miss name
    # search with FTS5's trigram tokenizer (SQLite >= 3.34). Filled by triggers
    # on documents, and here from the notes already indexed.
    f"""
    CREATE VIRTUAL TABLE IF NOT EXISTS note_names USING fts5(names, tokenize='trigram');
    CREATE TRIGGER IF NOT EXISTS note_names_ai AFTER INSERT ON documents BEGIN
        INSERT INTO note_names(rowid, names) VALUES (new.id, {_names_sql("new.")});
    END;
    CREATE TRIGGER IF NOT EXISTS note_names_ad AFTER DELETE ON documents BEGIN
        DELETE FROM note_names WHERE rowid = old.id;
    END;
    CREATE TRIGGER IF NOT EXISTS note_names_au AFTER UPDATE OF title, aliases, path ON documents BEGIN
        DELETE FROM note_names WHERE rowid = old.id;
        INSERT INTO note_names(rowid, names) VALUES (new.id, {_names_sql("new.")});
    END;
    INSERT INTO note_names(rowid, names) SELECT id, {_names_sql("")} FROM documents
        WHERE id NOT IN (SELECT rowid FROM note_names);
    """,
    # PDFs: a passage's page (1-based; NULL for a note's passages), which hits show, and a
    # document's page count (NULL for a note). get file.pdf:N reads the page's passages.
    """
    ALTER TABLE chunks ADD COLUMN page INTEGER;
    ALTER TABLE documents ADD COLUMN pages INTEGER;
    """,
    # Each note's language (note_language), counted by status; filled by the next sync,
    # which re-reads notes of an older NOTE_PARSER_VERSION (vectors are kept).
    """
    ALTER TABLE documents ADD COLUMN language TEXT;
    """,
    # 8: note ids never collide: DOCID_CHARS digits or more, unique (see note_docid).
    _unique_docids,
    # 9: a collection's own exclusion globs (Exclusions), one a line.
    lambda db: _add_column(db, "collections", "excludes", "TEXT NOT NULL DEFAULT ''"),
    # 10: a note's substance (note_substance): ranking tells a stub that points
    # elsewhere from a note with content. -1: not read yet (NOTE_PARSER_VERSION 4).
    _note_substance_columns,
    # 11: a note's paragraph prints (paragraph_prints): ranking tells a note that holds
    # another's text (a print edition's chapter) from it. NULL: not read yet (NOTE_PARSER_VERSION 5).
    lambda db: _add_column(db, "documents", "paragraphs", "BLOB"),
    # 12: a note's passages by number: a note's passages are numbered 0..n-1 (seq), so
    # how many it has is one seek (max(seq) + 1), which every BM25 pass reads for its hits.
    """
    CREATE INDEX IF NOT EXISTS chunks_document_seq ON chunks(document_id, seq);
    DROP INDEX IF EXISTS chunks_document;
    """,
    # 13: notes per language (language_counts, which a sync and status ask for) from an index:
    # 8 ms instead of 48 for 100,000 notes, for 1.2 MB.
    """
    CREATE INDEX IF NOT EXISTS documents_language ON documents(language);
    """,
    # 14: a note's namesakes (notes of its title or file name: the note prior's pointer test) by
    # two index seeks, not a phrase search of the names' trigrams (1-2 ms a note at 100,000 names).
    _namesake_key_columns,
]
# Bump when parse_note extracts something new: sync then re-reads every note
# indexed by an older parser (unchanged passages keep their vectors).
# 6: note_language leaves web addresses out.
# 7: reference-link definitions are no passage text; colours, HTML attributes and #include are no tags.
# 8: Dendron's links to a vault's note (dendron://vault/note, label first) point to that note.
# 9: a Dendron note (links_label_first) writes [[label|target]]: the target is the note; a wikilink to
#    the note itself is a link within it, no link to a note; a dendron:// link reads as its label (words).
# 10: a wikilink without a label reads as "note › heading" (wikilink_text): a note's words and
#    paragraph prints leave out block ids and Dendron's note-reference ranges ("#heading,1:#*").
# 11: Dendron's {{fm.field}} reads as the frontmatter field's value (with_frontmatter_values).
NOTE_PARSER_VERSION = 11


def sqlite_module(want_extensions: bool):
    """The DB-API module to use: ``sqlite3``, or ``sqlean`` when extensions are
    wanted and the standard module cannot load them (this is the case for
    macOS' system Python and some Linux builds)."""
    import sqlite3

    if want_extensions and not hasattr(sqlite3.Connection, "enable_load_extension"):
        with contextlib.suppress(ImportError):
            import sqlean

            return sqlean
    return sqlite3


def sqlite_vec_path() -> str:
    """The sqlite-vec extension file, found without ``import sqlite_vec`` (which imports numpy)."""
    spec = find_module_spec("sqlite_vec")
    return os.path.join(list(spec.submodule_search_locations)[0], "vec0")
