"""The MCP server (``pms mcp``): the API for AI assistants, over stdio or local HTTP.

Owns: the tools (plain functions over one KnowledgeBase: JSON in, JSON out), their
budgets and errors, and serving them with the official ``mcp`` SDK (imported lazily).

May import: config, paths, filters, query, ranking, retrieval, sync, clip, api.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from .config import SEARCH_MODES, VERSION, PMSError, _typing, data_dir, env_number, reason_text
from .paths import path_prefix_glob
from .filters import NoteFilter
from .query import Hit
from .ranking import RankingSettings
from .retrieval import SearchResult
from .sync import SyncReport
from .clip import one_line
from .api import ANSWER_MAX_BYTES, MAX_QUERIES, OVER_BUDGET, Note, KnowledgeBase


# The tools are plain functions over one KnowledgeBase (JSON in, JSON out); the
# official ``mcp`` SDK, imported lazily, speaks the protocol over stdio or
# Streamable HTTP. The process keeps the embedding model loaded, so every
# search after the first is warm.

MCP_DEFAULT_PORT = 8765
# No tool call runs longer than this (seconds; `pms mcp --timeout`), sync excepted: a
# glob or a filter that would run for minutes gets a one-line error instead.
MCP_CALL_TIMEOUT = 30.0
# After SIGTERM, or once a stdio client has closed its end, calls still running get this
# long to finish before the process ends anyway (the index is transactional: nothing is lost).
MCP_EXIT_GRACE = 1.5
# resources/list names at most this many notes (the template reaches every note).
RESOURCES_LISTED = 200
# status: at most this many entries of a list that grows with the vault (unresolved links, warnings), with its count.
STATUS_EXAMPLES = 20
MCP_INSTRUCTIONS = (
    "Private Markdown notes of the user, searched locally. Call search first (hybrid keyword + meaning); "
    "each hit names the note ('collection/path.md'), its lines, a score and a snippet. "
    "Then call get with that path (and ':FROM:COUNT' for a passage) to read it, related to explore around it.")

# A hit's or note's obsidian_url, as the output schemas describe it.
OBSIDIAN_URL_TEXT = ("a note in an Obsidian vault: the link that opens it in Obsidian, for the user to click "
                     "(\"\" for a note in none)")

# The search tool's arguments that make its NoteFilter: each field's schema, and the
# argument's name where it is not the field's (get's "path" is a note).
NOTE_FILTER_SCHEMA = {
    "tags": {"type": "array", "items": {"type": "string"},
             "description": "only notes with all these tags ('area' also matches 'area/sub')"},
    "exclude_tags": {"type": "array", "items": {"type": "string"}, "description": "leave out notes with any of these tags"},
    "path": {"type": "string", "description": "only notes under this folder or matching this glob inside the collection, "
                                              "e.g. 'journal/' or 'projects/*.md'"},
    "after": {"type": "string", "description": "only notes dated on or after this day (the frontmatter date, else the "
                                               "file's time): YYYY-MM-DD, a month YYYY-MM or year YYYY (its first day), "
                                               "today, yesterday, or a time back: 7d, 2w, 3m, 1y"},
    "before": {"type": "string", "description": "only notes dated on or before this day: YYYY-MM-DD, a month or year "
                                                "(its last day), or as after"},
    "where": {"type": "array", "items": {"type": "string"},
              "description": "frontmatter conditions, each 'key=value', 'key!=value' or 'key' (present)"},
}
SEARCH_TOOL_FILTERS = {"path": "path_filter"}


def _mcp_tools(allow_sync: bool) -> list[dict]:
    """Name, description, JSON schemas and hints of each tool: the text an assistant reads to choose.
    The output schemas list every field an answer can hold (the detail fields only with detail=true)."""
    ref = ("A note: 'collection/path.md' as search returns it, optionally ':FROM' or ':FROM:COUNT' "
           "to select lines (e.g. 'notes/dev/rust.md:12:20'), its file name alone, or '#docid' (e.g. '#3afed6c1'). "
           "A PDF's ':N' is its page N (e.g. 'papers/report.pdf:12', the page a hit names). "
           "Only notes in the index can be read.")
    number = {"type": ["integer", "null"]}
    hit = {"type": "object", "required": ["path", "title", "lines", "score", "relevance", "snippet", "docid"], "properties": {
        "path": {"type": "string", "description": "the note, 'collection/path.md': give it to get, related or links"},
        "title": {"type": "string"},
        "lines": {"type": "array", "items": {"type": "integer"}, "description": "[first, last] line of the passage"},
        "score": {"type": "number", "description": "rank within this search only (the best is near 1 whatever its match)"},
        "relevance": {"type": ["number", "null"], "description": "absolute, 0-1: how well the passage matches the query "
                      "(the larger of its similarity in meaning and the share of the query's words it holds, rare "
                      "words weighing more), never more than a hit ranked above it; below "
                      f"{RankingSettings().relevance_floor:g} ({RankingSettings().keyword_relevance_floor:g} in "
                      "keyword mode) it is likely unrelated"},
        "snippet": {"type": "string"}, "docid": {"type": "string", "description": "short id; get accepts '#docid'"},
        "page": {"type": "integer", "description": "a PDF's page the passage is on (get 'path:page' reads it); "
                                                   "only for PDFs"},
        "copies": {"type": "array", "items": {"type": "string"},
                   "description": "notes that copy this one (the page in another edition or folder, a print "
                                  "chapter holding its text): not counted among the k results"},
        # detail=true
        "obsidian_url": {"type": "string", "description": OBSIDIAN_URL_TEXT},
        "collection": {"type": "string"}, "heading_path": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}}, "date": {"type": ["string", "null"]},
        "collection_description": {"type": "string"}, "folder_description": {"type": "string"},
        "abspath": {"type": "string", "description": "the file on the user's disk"},
        "marks": {"type": "array", "description": "[start, end) of each matched word in snippet",
                  "items": {"type": "array", "items": {"type": "integer"}}},
        "similarity": {"type": ["number", "null"], "description": "cosine similarity of the passage to the query"},
        "matched": {"type": ["number", "null"], "description": "share of the query's words in the passage"},
        "bm25_rank": number, "vector_rank": number, "name_rank": number,
        "bm25_score": {"type": ["number", "null"]}, "vector_distance": {"type": ["number", "null"]}}}
    note = {"type": "object", "required": ["path", "docid", "title", "from_line", "to_line", "text"], "properties": {
        "path": {"type": "string", "description": "the note, 'collection/path.md'"}, "docid": {"type": "string"},
        "title": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
        "from_line": {"type": "integer"}, "to_line": {"type": "integer", "description": "last line in text"},
        "total_lines": {"type": "integer"}, "text": {"type": "string"},
        "truncated": {"type": "boolean", "description": "text stops before what was asked (max_bytes)"},
        "next": {"type": "string", "description": "when truncated: the path to get for the rest"},
        "page": {"type": "integer", "description": "a PDF: the first page returned (lines are then pages)"}}}
    max_bytes = {"type": "integer", "minimum": 1, "default": ANSWER_MAX_BYTES}
    tools = [
        {"name": "search", "title": "Search notes",
         "description": ("Search the user's notes by keywords and meaning. Returns the best notes (or passages), best "
                         "first: path, title, lines, score (rank in this search), relevance (absolute, 0-1: below 0.35 "
                         "likely unrelated), snippet and docid; detail=true adds headings, tags, dates, descriptions, "
                         "ranks and, for a note in an Obsidian vault, obsidian_url (a link that opens it there). Write the query in plain words; \"exact phrase\", -excluded and prefix* work too. "
                         "A notice says when nothing matched or nothing looks relevant."),
         "input": {"type": "object", "additionalProperties": False, "required": ["query"], "properties": {
             "query": {"type": "string", "description": "what to look for, in plain words; may be empty when a "
                                                         "filter is given (then the matching notes, newest first)"},
             "k": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10,
                   "description": "number of results (1-100, default 10)"},
             "mode": {"type": "string", "enum": list(SEARCH_MODES), "default": "auto",
                      "description": "auto (default: hybrid when embeddings are ready, else keyword), hybrid, "
                                     "keyword (exact words, fastest) or vector (meaning only)"},
             "collections": {"type": "array", "items": {"type": "string"},
                             "description": "only these collections (names from status); default all"},
             "passages": {"type": "boolean", "default": False,
                          "description": "return passages (several per note) instead of one result per note"},
             "chunks": {"type": "boolean", "default": False, "description": "the old name of passages"},
             "detail": {"type": "boolean", "default": False,
                        "description": "also return headings, tags, dates, descriptions, ranks and the file's location"},
             "queries": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_QUERIES,
                         "description": "other phrasings of the same need (synonyms, sub-questions), searched in the same "
                                        "call: one list, fused"},
             "intent": {"type": "string", "description": "what you are looking for and why, in a sentence: context "
                                                         "for the meaning search, not words to match"},
             "min_score": {"type": "number", "minimum": 0, "maximum": 1,
                           "description": "only hits at least this relevant (0-1; 0.35 leaves out what is likely unrelated)"},
             **{SEARCH_TOOL_FILTERS.get(name, name): spec for name, spec in NOTE_FILTER_SCHEMA.items()}}},
         "output": {"type": "object", "required": ["query", "mode", "count", "hits"], "properties": {
             "query": {"type": "string"}, "mode": {"type": "string", "description": "the mode used"},
             "count": {"type": "integer", "description": "number of hits"},
             "notice": {"type": "string", "description": "something to know about these results"},
             "embedded": {"type": "number", "description": "the share of passages with vectors, when not all have one "
                          "(notes without one are ranked by their words and names)"},
             "hits": {"type": "array", "items": hit}}}},
        {"name": "get", "title": "Read a note",
         "description": ("Read an indexed note, whole or a line range (use the path and lines of a search hit). "
                         "Answers stop at max_bytes: then truncated is true and next is the path to get for the rest."),
         "input": {"type": "object", "additionalProperties": False, "required": ["path"], "properties": {
             "path": {"type": "string", "minLength": 1, "description": ref},
             "from_line": {"type": "integer", "minimum": 1, "description": "first line to return (1-based)"},
             "count": {"type": "integer", "minimum": 1, "description": "number of lines to return (default: to the end)"},
             "line_numbers": {"type": "boolean", "default": False,
                              "description": "prefix each line with its number"},
             "max_bytes": {**max_bytes, "description": f"at most this many bytes of text (default {ANSWER_MAX_BYTES})"}}},
         "output": note},
        {"name": "multi_get", "title": "Read several notes",
         "description": ("Read several indexed notes at once, by glob over 'collection/path.md' "
                         "(e.g. 'notes/journal/2024-*.md', '**/meeting*') or a comma-separated list of notes (each may "
                         "take ':FROM:COUNT'). The whole answer stops at max_bytes: notes that do not fit are listed as "
                         "skipped (truncated is true); read them with get."),
         "input": {"type": "object", "additionalProperties": False, "required": ["pattern"], "properties": {
             "pattern": {"type": "string", "minLength": 1, "description": "a glob or a comma-separated list of notes"},
             "max_bytes": {**max_bytes, "description": f"at most this many bytes of text in all (default {ANSWER_MAX_BYTES})"}}},
         "output": {"type": "object", "required": ["count", "documents", "skipped", "truncated"], "properties": {
             "count": {"type": "integer"}, "truncated": {"type": "boolean"},
             "documents": {"type": "array", "items": note},
             "skipped": {"type": "array", "items": {"type": "object", "properties": {
                 "ref": {"type": "string"}, "reason": {"type": "string"}}}}}}},
        {"name": "related", "title": "Related notes",
         "description": ("The notes closest in meaning to a note (from its passages; by shared rare words without "
                         "embeddings), each with its passage that relates them. Use it to explore around a search hit."),
         "input": {"type": "object", "additionalProperties": False, "required": ["path"], "properties": {
             "path": {"type": "string", "minLength": 1, "description": ref},
             "k": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10,
                   "description": "number of notes (1-100, default 10)"},
             "detail": {"type": "boolean", "default": False, "description": "also return headings, tags, ranks, ..."}}},
         "output": {"type": "object", "required": ["note", "count", "hits"], "properties": {
             "note": {"type": "string"}, "count": {"type": "integer"}, "hits": {"type": "array", "items": hit}}}},
        {"name": "links", "title": "Links of a note",
         "description": ("The notes a note links to ([[wikilinks]] and Markdown links, in order; an unresolved link has "
                         "no path), or with direction 'backlinks' the notes that link to it."),
         "input": {"type": "object", "additionalProperties": False, "required": ["path"], "properties": {
             "path": {"type": "string", "minLength": 1, "description": ref},
             "direction": {"type": "string", "enum": ["links", "backlinks"], "default": "links",
                           "description": "links (default): what the note points to; backlinks: what points to it"}}},
         "output": {"type": "object", "required": ["note", "count", "links"], "properties": {
             "note": {"type": "string"}, "count": {"type": "integer"},
             "links": {"type": "array", "items": {"type": "object", "properties": {
                 "path": {"type": ["string", "null"], "description": "'collection/path.md'; null when unresolved"},
                 "title": {"type": ["string", "null"]}, "docid": {"type": ["string", "null"]},
                 "target": {"type": "string", "description": "the link as written"}, "line": {"type": "integer"},
                 "resolved": {"type": "boolean"}}}}}}},
        {"name": "status", "title": "Index status",
         "description": ("The collections (name, folder, description, counts), the search mode (hybrid or "
                         "keyword, and why), changes on disk not yet indexed, files that cannot be indexed and "
                         "links to no note (of each, the count and the first 20)."),
         "input": {"type": "object", "additionalProperties": False, "properties": {}},
         "output": {"type": "object", "properties": {
             "search_mode": {"type": "string"}, "notes": {"type": "integer"}, "passages": {"type": "integer"},
             "documents": {"type": "integer", "description": "the old name of notes"},
             "chunks": {"type": "integer", "description": "the old name of passages"},
             "collections_detail": {"type": "array", "items": {"type": "object"}}, "pending": {"type": "object"},
             "warnings": {"type": "array", "items": {"type": "string"},
                          "description": "lines of a .pmsignore (file:line) or Obsidian's settings that cannot be read: ignored"},
             "warnings_count": {"type": "integer"},
             "unresolved_links": {"type": "array", "items": {"type": "object"},
                                  "description": f"the first {STATUS_EXAMPLES} links to no note (linking note, line, target)"},
             "unresolved_links_count": {"type": "integer", "description": "how many links point to no note"},
             "not_indexed": {"type": "array", "items": {"type": "object"},
                             "description": f"the first {STATUS_EXAMPLES} files a sync could not index (collection, path, reason)"},
             "not_indexed_count": {"type": "integer", "description": "how many files a sync could not index"}}}},
    ]
    if allow_sync:
        tools.append(
            {"name": "sync", "title": "Re-index notes",
             "description": "Index new and changed notes and drop deleted ones (notes are only read, never changed).",
             "input": {"type": "object", "additionalProperties": False, "properties": {
                 "collections": {"type": "array", "items": {"type": "string"},
                                 "description": "only these collections; default all"}}},
             "output": {"type": "object", "properties": {
                 "summary": {"type": "string"}, "added": {"type": "integer"}, "updated": {"type": "integer"},
                 "deleted": {"type": "integer"}, "errors": {"type": "array"}}}})
    for tool in tools:  # what a client may assume: only sync writes, and only the index
        writes = tool["name"] == "sync"
        tool["annotations"] = {"read_only_hint": not writes, "destructive_hint": False, "idempotent_hint": True,
                               "open_world_hint": False}
    return tools




class UnknownTool(PMSError):
    """A tool name the server does not have (a protocol error, not a tool failure)."""


class MCPService:
    """The MCP tools over one KnowledgeBase, independent of the transport: ``call`` takes a
    tool name and JSON arguments and returns a JSON object or raises a one-line PMSError.
    Calls may come from several threads at once; syncs take turns."""

    def __init__(self, kb: KnowledgeBase, allow_sync: bool = False, call_timeout: float | None = MCP_CALL_TIMEOUT):
        self.kb = kb
        self.allow_sync = allow_sync
        self.call_timeout = call_timeout
        self.tools = {t["name"]: t for t in _mcp_tools(allow_sync)}
        self._sync_lock = threading.Lock()
        self._validators: dict = {}
        self._asked = threading.Event()
        self._calls = 0  # tool calls in progress (the process ends once they are done: end_process)
        self._idle = threading.Condition()

    def warm_up(self, wait: float = 2.0) -> threading.Thread:
        """Load the model in a background thread, so the first search is fast, once a client
        has listed the tools (or after ``wait`` seconds): importing ONNX Runtime holds the GIL."""
        def load():
            self._asked.wait(wait)
            with contextlib.suppress(PMSError):
                if self.kb.search_mode().mode != "keyword":
                    self.kb.load_embedder()

        thread = threading.Thread(target=load, name="pms-mcp-warm-up", daemon=True)
        thread.start()
        return thread

    def watch(self) -> threading.Thread:
        """Keep the index fresh in a background thread (``pms mcp --watch``): a sync once
        the handshake is over, then one after each change in the collections' folders."""
        def run():
            self._asked.wait(2.0)

            def synced(report: SyncReport) -> None:
                if report.added or report.updated or report.deleted or report.errors:
                    self.say(f"watch: {report.summary()}")

            try:
                self.kb.watch(on_sync=synced, on_error=lambda text: self.say(f"watch: sync failed: {text}"),
                              sync_lock=self._sync_lock)
            except PMSError as exc:
                self.say(f"not watching the folders: {exc}")

        thread = threading.Thread(target=run, name="pms-mcp-watch", daemon=True)
        thread.start()
        return thread

    def say(self, text: str) -> None:
        """One line for the person running the server (the CLI prints it on stderr)."""
        if self.kb.notice is not None:
            self.kb.notice(text)

    def listed(self) -> None:
        """A client has listed the tools: the handshake is over, the model may load."""
        self._asked.set()

    def call(self, name: str, arguments: dict | None) -> dict:
        with self._idle:
            self._calls += 1
        try:
            return self._call(name, arguments)
        finally:
            with self._idle:
                self._calls -= 1
                self._idle.notify_all()

    def wait_idle(self, seconds: float) -> bool:
        """Wait until no tool call is in progress, at most ``seconds``; whether none is."""
        with self._idle:
            return self._idle.wait_for(lambda: self._calls == 0, timeout=seconds)

    def _call(self, name: str, arguments: dict | None) -> dict:
        self._asked.set()
        tool = self.tools.get(name)
        if tool is None and name == "sync":
            return self.tool_sync()  # not listed on this server: says how to turn it on
        if tool is None:
            raise UnknownTool(f"unknown tool {name!r} (tools: {', '.join(self.tools)})")
        arguments = dict(arguments or {})
        self._check_arguments(tool, arguments)
        for key, spec in tool["input"]["properties"].items():
            if spec.get("type") == "integer" and key in arguments:
                arguments[key] = int(arguments[key])  # JSON Schema counts 3.0 as an integer
        with self.kb.time_limit(self.timeout_for(name), name):
            return getattr(self, f"tool_{name}")(**arguments)

    def timeout_for(self, name: str) -> float | None:
        """The deadline of a call to tool ``name`` (a sync may take as long as it needs)."""
        return None if name == "sync" else self.call_timeout

    def _check_arguments(self, tool: dict, arguments: dict) -> None:
        import jsonschema  # comes with the mcp SDK

        validator = self._validators.get(tool["name"])
        if validator is None:
            validator = self._validators[tool["name"]] = jsonschema.Draft202012Validator(tool["input"])
        error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path)
            message = error.message if len(error.message) <= 200 else error.message[:200] + "..."
            raise PMSError(f"bad argument{' ' + repr(where) if where else ''} for {tool['name']}: {message}")

    # -- the tools ------------------------------------------------------------------
    def tool_search(self, query: str, k: int = 10, mode: str = "auto", collections: list[str] | None = None,
                    passages: bool = False, detail: bool = False, queries: Sequence[str] = (), intent: str = "",
                    min_score: float | None = None, chunks: bool = False, **filter_arguments) -> dict:
        names = {argument: field for field, argument in SEARCH_TOOL_FILTERS.items()}
        note_filter = NoteFilter.build(**{names.get(key, key): value for key, value in filter_arguments.items()})
        found = self.kb.search(query, k=k, mode=mode, collections=collections or None, passages=passages or chunks, note_filter=note_filter,
                               queries=queries, intent=intent, min_score=min_score)
        rows = self._hit_rows(found.groups, detail)
        result = {"query": query, "mode": found.mode, "count": len(rows), "hits": rows}
        notices = [f"keyword-only search: {reason_text(found.reason, found.hint, 'mcp')}"] if found.reason else []
        if found.embedded is not None:
            result["embedded"] = found.embedded
            notices.append(f"only {found.embedded:.0%} of passages have vectors yet: notes without one are ranked by their "
                           "words and names (a sync is embedding them, or call sync)")
        stale = self.kb.changed_on_disk(found.hits)
        if stale:
            notices.append(f"the index is older than {len(stale)} of these notes ({', '.join(h.ref for h in stale[:3])}"
                           f"{' ...' if len(stale) > 3 else ''}): read them with get for their current text")
        if not found:
            notices.append("nothing in the notes matches this query" + (" and these filters" if note_filter else ""))
            if path_prefix_glob(note_filter.path):
                notices.append(f"path_filter {note_filter.path} is a folder; '{path_prefix_glob(note_filter.path)}' "
                               "matches names that start with it")
        elif found.weak and found.best_relevance is not None:
            floor = self.kb.retrieval.settings.floor_for(found.mode)
            notices.append(f"nothing looks clearly relevant (best relevance {found.best_relevance:.2f} of 1; "
                           f"below {floor:g} is likely unrelated): the notes may not cover this")
        if notices:
            result["notice"] = self.for_assistant("; ".join(notices))
        return result

    # What a hit's row holds with detail=true, besides path, title, lines, score, relevance, snippet and docid.
    DETAIL_FIELDS = ("collection", "heading_path", "marks", "similarity", "matched", "tags", "date", "collection_description",
                     "folder_description", "abspath", "obsidian_url", "bm25_rank", "vector_rank", "name_rank", "bm25_score", "vector_distance")

    @classmethod
    def _hit_rows(cls, groups: Iterable[tuple[Hit, list[Hit]]], detail: bool = False) -> list[dict]:
        """Hits (SearchResult.groups) as JSON: 'collection/path.md' as path, the copies named on
        their original's row, snippets as plain text (an assistant reads them, not a browser)."""
        rows = []
        for h, copies in groups:
            row = {"path": h.ref, "title": h.title, "lines": [h.start_line, h.end_line],
                   "score": round(h.score, 3), "relevance": h.relevance, "snippet": h.snippet, "docid": h.docid}
            if h.page is not None:
                row["page"] = h.page
            if copies:
                row["copies"] = [c.ref for c in copies]
            if detail:
                full = h.to_dict()
                row.update({key: full[key] for key in cls.DETAIL_FIELDS if key in full})
            rows.append(row)
        return rows

    def tool_related(self, path: str, k: int = 10, detail: bool = False) -> dict:
        rows = self._hit_rows(self.kb.related(path, k=k).groups, detail)
        return {"note": path, "count": len(rows), "hits": rows}

    def tool_links(self, path: str, direction: str = "links") -> dict:
        refs = self.kb.backlinks(path) if direction == "backlinks" else self.kb.links(path)
        links = [{"path": f"{r.collection}/{r.path}" if r.path else None, "title": r.title, "docid": r.docid,
                  "target": r.target, "line": r.line, "resolved": r.resolved} for r in refs]
        return {"note": path, "count": len(links), "links": links}

    def tool_get(self, path: str, from_line: int | None = None, count: int | None = None,
                 line_numbers: bool = False, max_bytes: int = ANSWER_MAX_BYTES) -> dict:
        doc = self.kb.get(path, from_line=from_line, count=count, max_bytes=max_bytes)
        return self._note_dict(doc, line_numbers)

    def tool_multi_get(self, pattern: str, max_bytes: int = ANSWER_MAX_BYTES) -> dict:
        notes, skipped = self.kb.multi_get(pattern, max_bytes=max_bytes)
        truncated = any(d.truncated for d in notes) or any(why.startswith(OVER_BUDGET) for _, why in skipped)
        return {"count": len(notes), "truncated": truncated, "documents": [self._note_dict(d) for d in notes],
                "skipped": [{"ref": ref, "reason": why} for ref, why in skipped]}

    def tool_status(self) -> dict:
        return self.kb.status(examples=STATUS_EXAMPLES)

    def tool_sync(self, collections: list[str] | None = None) -> dict:
        if not self.allow_sync:
            raise PMSError("sync is off on this server: start it with --allow-sync, or sync from the command line")
        with self._sync_lock:  # after the sync under way (a client's or the watcher's), which leaves little to do
            report = self.kb.sync(collections=collections or None)
        return {"summary": report.summary(), **report.as_dict()}

    @staticmethod
    def _note_dict(doc: Note, line_numbers: bool = False) -> dict:
        out = {"path": doc.ref, "docid": doc.docid, "title": doc.title, "tags": doc.tags, "from_line": doc.from_line,
               "to_line": doc.to_line, "total_lines": doc.total_lines, "text": doc.numbered() if line_numbers else doc.text}
        if doc.truncated:
            out.update(truncated=True, next=doc.rest())
        if doc.page is not None:
            out["page"] = doc.page
        return out

    def worded(self, exc: PMSError) -> str:
        """An engine error worded for an assistant: a command for the user's shell becomes what to do here."""
        text = reason_text(exc.message, exc.hint, "mcp")  # a hint names a tool or an argument, not a flag
        if exc.argument == "path" and text.startswith("path"):
            text = "path_filter" + text[4:]  # the search tool's name for the filter
        return self.for_assistant(text)

    def for_assistant(self, text: str) -> str:
        """A message with a command for the user's shell reworded as what an assistant can do."""
        sync = "call the sync tool" if self.allow_sync else "ask the user to sync the index"
        text = re.sub(r"(?:run: )?(?:python3 pms\.py|pms) sync\b", sync, text)
        return re.sub(r"(?:run: )?(?:python3 pms\.py|pms) (\w[\w-]*)[^);,]*", r"the user's 'pms \1' command", text)

    def instructions(self) -> str:
        """The server's instructions: how to use the tools, and what is in this index now."""
        text = MCP_INSTRUCTIONS
        with contextlib.suppress(Exception):  # a broken index still serves its tools' errors
            rows = self.kb.collections.list()
            if rows:
                named = "; ".join(f"{c.name} ({c.counts()[0]} notes{': ' + c.description if c.description else ''})"
                                  for c in rows[:20])
                text += f" Collections: {named}{' ...' if len(rows) > 20 else ''}."
            used = self.kb.search_mode()
            if used.reason:
                text += (f" Search is keyword-only here ({self.for_assistant(reason_text(used.reason, used.hint, 'mcp'))}): "
                         "use the words the notes would contain.")
        return text

    # -- rendering: the text a model reads (structuredContent holds the same as JSON) --
    @staticmethod
    def summary(name: str, result: dict) -> str:
        import json

        if name in ("search", "related"):
            lines = [f"{result['count']} hits" + (f" for {result['query']!r} ({result['mode']})" if name == "search"
                                                  else f" related to {result['note']}")]
            if result.get("notice"):
                lines.append(f"notice: {result['notice']}")
            for i, h in enumerate(result["hits"], 1):
                relevance = f" relevance {h['relevance']:g}" if h.get("relevance") is not None else ""
                lines_of = f"{h['lines'][0]}-{h['lines'][1]}"
                where = f"{h['page']} (page {h['page']}, lines {lines_of})" if h.get("page") else lines_of
                lines.append(f"{i}. {h['path']}:{where} #{h['docid']}{relevance} - {h['title']}")
                if h["snippet"]:
                    lines.append(f"   {h['snippet']}")
                if h.get("copies"):
                    lines.append(f"   copies: {', '.join(h['copies'])}")
            return "\n".join(lines)
        if name == "get":
            head = (f"{result['path']} #{result['docid']} lines {result['from_line']}-{result['to_line']} "
                    f"of {result['total_lines']}")
            if result.get("truncated"):
                head += f" (truncated: get {result['next']!r} for the rest)"
            return f"{head}\n\n{result['text']}"
        if name == "multi_get":
            parts = [f"{result['count']} notes" + (" (truncated: see skipped)" if result["truncated"] else "")]
            for d in result["documents"]:
                parts.append(f"==> {d['path']} #{d['docid']} lines {d['from_line']}-{d['to_line']} <==\n{d['text']}")
            parts += [f"skipped {s['ref']}: {s['reason']}" for s in result["skipped"]]
            return "\n\n".join(parts)
        return json.dumps(result, ensure_ascii=False, default=str, separators=(",", ":"))


def _error_line(text, limit: int = 300) -> str:
    """An error as one printable line (the clipper's one_line), cut at ``limit``."""
    text = one_line(text) or ""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def mcp_server(service: MCPService):
    """The SDK's low-level Server, answering tools/list and tools/call from ``service``."""
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.shared.exceptions import MCPError

    tools = [types.Tool(name=t["name"], title=t["title"], description=t["description"], input_schema=t["input"],
                        output_schema=t["output"], annotations=types.ToolAnnotations(**t["annotations"]))
             for t in service.tools.values()]

    async def list_tools(ctx, params) -> types.ListToolsResult:
        service.listed()
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx, params) -> types.CallToolResult:
        import json
        timeout = service.timeout_for(params.name)
        try:
            # In a worker thread: SQLite and ONNX block, and other clients keep being served meanwhile.
            # Past the deadline the client is answered at once; the thread's queries are stopped
            # (KnowledgeBase.time_limit), anything else it finishes unheard.
            with anyio.fail_after(None if timeout is None else timeout + 1.0):
                result = await anyio.to_thread.run_sync(service.call, params.name, params.arguments, abandon_on_cancel=True)
        except TimeoutError:
            return types.CallToolResult(content=[types.TextContent(type="text", text=_error_line(
                f"{params.name} took longer than {timeout:g} s and was stopped (narrow it: fewer notes, "
                "a smaller k, a more specific pattern)"))], is_error=True)
        except UnknownTool as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        except PMSError as exc:
            return types.CallToolResult(content=[types.TextContent(type="text", text=_error_line(service.worded(exc)))],
                                        is_error=True)
        except Exception as exc:  # a bug must not end the session nor show a traceback to the client
            service.say(f"tool {params.name} failed: {type(exc).__name__}: {exc}")
            return types.CallToolResult(content=[types.TextContent(
                type="text", text=_error_line(f"internal error in {params.name}: {type(exc).__name__}: {exc}"))], is_error=True)
        result = json.loads(json.dumps(result, default=str))  # dates and paths as the JSON the schema promises
        return types.CallToolResult(content=[types.TextContent(type="text", text=service.summary(params.name, result))],
                                    structured_content=result)

    # Notes as resources, pms://collection/path.md: what get returns, for clients that attach notes.
    template = types.ResourceTemplate(name="note", title="A note", uri_template="pms://{collection}/{path}",
                                      description="An indexed note by collection and path (as search returns it)",
                                      mime_type="text/markdown")

    async def list_templates(ctx, params) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[template])

    async def list_resources(ctx, params) -> types.ListResourcesResult:
        def notes():
            return [(c.name, rel) for c in service.kb.collections.list() for rel in c.files[:RESOURCES_LISTED]][:RESOURCES_LISTED]
        listed = await anyio.to_thread.run_sync(notes)
        return types.ListResourcesResult(resources=[
            types.Resource(name=f"{col}/{rel}", uri=f"pms://{col}/{quote(rel)}", mime_type="text/markdown") for col, rel in listed])

    async def read_resource(ctx, params) -> types.ReadResourceResult:
        uri = str(params.uri)
        if not uri.startswith("pms://"):
            raise MCPError(code=types.INVALID_PARAMS, message=f"not a PMS note: {uri} (pms://collection/path.md)")
        ref = unquote(uri[len("pms://"):])
        try:
            doc = await anyio.to_thread.run_sync(lambda: service.kb.get(ref, max_bytes=ANSWER_MAX_BYTES))
        except PMSError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=_error_line(exc)) from None
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type="text/markdown", text=doc.text)])

    from urllib.parse import quote, unquote

    return Server("pms", version=VERSION, title="PMS notes", instructions=service.instructions(),
                  on_list_tools=list_tools, on_call_tool=call_tool, on_list_resources=list_resources,
                  on_list_resource_templates=list_templates, on_read_resource=read_resource)


def serve_mcp_stdio(service: MCPService) -> None:
    """Serve one client over standard input/output (what assistants launch)."""
    import anyio
    import mcp_types as types
    from mcp.server.stdio import stdio_server
    from mcp.shared.message import SessionMessage

    server = mcp_server(service)

    async def answer_malformed(read_stream, write_stream, forward):
        # JSON-RPC wants an error (id null) for a line that is not a message; the SDK only logs it.
        async with forward:
            async for item in read_stream:
                if not isinstance(item, Exception):
                    await forward.send(item)
                    continue
                errors = getattr(item, "errors", lambda: [])()
                code, what = ((types.PARSE_ERROR, "Parse error: not valid JSON")
                              if errors and errors[0].get("type") == "json_invalid"
                              else (types.INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message"))
                await write_stream.send(SessionMessage(types.JSONRPCError(
                    jsonrpc="2.0", id=None, error=types.ErrorData(code=code, message=what))))

    class CheckedLines:
        """Standard input line by line; a request with an id that is no string or integer is
        made a line the SDK rejects, so answer_malformed answers it (-32600, id null)."""

        def __init__(self):
            self.lines = _capped_stdin()  # lines of at most MCP_MAX_MESSAGE_BYTES

        async def __aiter__(self):
            async for line in self.lines:
                yield '{"pms": "invalid request id"}\n' if '"id"' in line and bad_request_id(line) else line

    async def run():
        async with stdio_server(stdin=CheckedLines()) as (read_stream, write_stream):
            forward, messages = anyio.create_memory_object_stream(16)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(answer_malformed, read_stream, write_stream, forward)
                await server.run(messages, write_stream, server.create_initialization_options())
                tasks.cancel_scope.cancel()

    service.warm_up()
    try:
        anyio.run(run)
    finally:
        # The client has gone (its end of stdin closed): calls still running get a moment to finish.
        end_process(service)


# The biggest HTTP body or stdio line a client may send, as the SDK's /mcp route:
# no search or note request comes near it, and a bigger one stays unread.
MCP_MAX_MESSAGE_BYTES = 4 * 1024 * 1024


class _CappedLines(io.RawIOBase):
    """Standard input with every line cut at MCP_MAX_MESSAGE_BYTES: the rest of
    an overlong line is read and dropped, so memory stays bounded and the cut
    line fails to parse (the client gets a JSON-RPC parse error)."""

    def __init__(self, raw, limit: int = MCP_MAX_MESSAGE_BYTES):
        self.raw, self.limit, self.line_bytes, self.dropping, self.pending = raw, limit, 0, False, b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self.pending:
            data = self.raw.read1(len(buffer)) if hasattr(self.raw, "read1") else self.raw.read(len(buffer))
            if not data:
                return 0
            self.pending = self._cap(data)
        n = min(len(buffer), len(self.pending))
        buffer[:n], self.pending = self.pending[:n], self.pending[n:]
        return n

    def _cap(self, data: bytes) -> bytes:
        out, start = bytearray(), 0
        while start < len(data):
            newline = data.find(b"\n", start)
            end = len(data) if newline < 0 else newline + 1
            part = data[start:end]
            if self.dropping:
                self.dropping = newline < 0
            elif self.line_bytes + len(part.rstrip(b"\n")) > self.limit:
                out += part[: self.limit - self.line_bytes] + b"\n"
                self.dropping = newline < 0
                self.line_bytes = 0
            else:
                out += part
                self.line_bytes = 0 if newline >= 0 else self.line_bytes + len(part)
            start = end
        return bytes(out)


def _capped_stdin():
    """The stdio server's input: UTF-8 lines of at most MCP_MAX_MESSAGE_BYTES."""
    import anyio
    return anyio.wrap_file(io.TextIOWrapper(_CappedLines(sys.stdin.buffer), encoding="utf-8", errors="replace"))


def _exit_after(seconds: float, cleanup: Callable[[], None] | None = None) -> None:
    """End the process after ``seconds`` whatever its threads are doing (a server that was told to stop)."""
    time.sleep(seconds)
    _exit_now(cleanup)


def end_process(service: MCPService, cleanup: Callable[[], None] | None = None) -> _typing.NoReturn:
    """End a server's process once its tool calls are done (at most MCP_EXIT_GRACE seconds): with
    os._exit, output flushed. Python's usual teardown would run while a worker thread may still be in
    native code (ONNX Runtime loading the model or embedding a query), whose C++ destructors then
    abort the process (exit 134, "terminate called without an active exception")."""
    service.wait_idle(MCP_EXIT_GRACE)
    _exit_now(cleanup)


def _exit_now(cleanup: Callable[[], None] | None = None) -> _typing.NoReturn:
    if cleanup is not None:
        with contextlib.suppress(Exception):
            cleanup()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def mcp_server_file(pid: int | None = None) -> Path:
    """Where a running ``pms.py mcp --http`` (process ``pid``, default this one) says where it
    listens, so ``pms.py search`` can use it: one file per server, removed when it stops."""
    return data_dir() / "mcp-servers" / f"{os.getpid() if pid is None else pid}.json"


def _process_alive(pid: int) -> bool:
    if sys.platform == "win32":
        return True  # no cheap check: an unresponsive one is skipped by its timeout
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's process (EPERM): alive
    return True


def _search_route(service: MCPService, security):
    """POST /search: ``KnowledgeBase.search`` over HTTP for ``pms.py search`` (the model warm
    here): its arguments as search_via_server sends them, its SearchResult as to_dict."""
    import json

    import anyio
    from mcp.server.transport_security import TransportSecurityMiddleware
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    guard = TransportSecurityMiddleware(security)

    async def search(request):
        refused = await guard.validate_request(request, is_post=True)
        if refused is not None:
            return refused
        try:
            try:
                ask = json.loads(await request.body())  # its size is capped by _checked_requests
            except (ValueError, RecursionError):
                raise PMSError("the request body is not JSON (or nested too deep)") from None
            if not isinstance(ask, dict) or not isinstance(ask.get("search"), dict):
                raise PMSError("bad search request: a JSON object with the search's arguments is expected")
            kb = service.kb
            if ask.get("db") != str(kb.db_path.resolve()):  # a stale announcement of another server
                return JSONResponse({"error": "this server serves another index"}, status_code=409)
            arguments = search_arguments_from_json(ask["search"])

            def run():
                with kb.time_limit(service.call_timeout, "search"):
                    return kb.search(**arguments).to_dict(explain=True)

            return JSONResponse(await anyio.to_thread.run_sync(run))
        except PMSError as exc:
            return JSONResponse({"error": _error_line(exc)}, status_code=400)
        except (ValueError, KeyError, TypeError) as exc:
            return JSONResponse({"error": _error_line(f"bad search request: {exc}")}, status_code=400)

    return Route("/search", search, methods=["POST"])


# KnowledgeBase.search's arguments, as POST /search takes them.
SERVED_SEARCH_ARGUMENTS = ("query", "k", "mode", "collections", "passages", "prefix_last", "note_filter", "min_score", "intent",
                           "queries")


def search_arguments_to_json(arguments: dict) -> dict:
    """KnowledgeBase.search's keyword arguments as JSON (the NoteFilter as NoteFilter.build's)."""
    note_filter = arguments.get("note_filter")
    return {**arguments, "note_filter": note_filter.build_args() if note_filter else None,
            "collections": list(arguments.get("collections") or []), "queries": list(arguments.get("queries") or [])}


def search_arguments_from_json(data: dict) -> dict:
    """search_arguments_to_json's answer back as KnowledgeBase.search's keyword arguments; a
    PMSError for an argument it does not take or a filter that is not one."""
    unknown = sorted(set(data) - set(SERVED_SEARCH_ARGUMENTS))
    if unknown:
        raise PMSError(f"bad search request: unknown arguments {unknown}")
    fields = data.get("note_filter") or {}
    if not isinstance(fields, dict) or set(fields) - set(NoteFilter._fields):
        raise PMSError("bad search request: note_filter must be an object of NoteFilter's fields")
    return {**data, "note_filter": NoteFilter.build(**fields)}


# A server announced for this index gets this long (seconds) to answer a first, empty
# request (GET /search, which its event loop answers at once), else the CLI searches by
# itself: a hung or stopped server costs at most this. The search then gets 10 s.
SERVER_PROBE_TIMEOUT = 0.5


def search_via_server(kb: KnowledgeBase, arguments: dict, timeout: float = 10.0) -> SearchResult | None:
    """``kb.search(**arguments)`` run by a running ``pms.py mcp --http`` on the same index,
    whose model is warm: the same SearchResult; None when none can answer (the caller
    searches in-process, which also words any error). Standard library only."""
    try:
        announced = sorted(mcp_server_file(0).parent.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return None
    if not announced:
        return None  # no server: the usual case, without importing json
    import json

    for path in announced:
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
            if not _process_alive(int(info["pid"])):
                with contextlib.suppress(OSError):
                    path.unlink()  # a server that ended without withdrawing its announcement
                continue
            if Path(info["db"]) != kb.index_path.resolve() or info.get("version") != VERSION:
                continue
        except (OSError, ValueError, KeyError, TypeError):
            continue
        import urllib.error
        import urllib.request  # only now: importing it takes longer than a keyword search

        headers = {"Content-Type": "application/json"}
        if os.environ.get("PMS_MCP_TOKEN"):
            headers["Authorization"] = f"Bearer {os.environ['PMS_MCP_TOKEN']}"
        ask = {"db": info["db"], "search": search_arguments_to_json(arguments)}
        request = urllib.request.Request(info["search_url"], data=json.dumps(ask).encode(), headers=headers, method="POST")
        try:
            try:
                urllib.request.urlopen(urllib.request.Request(info["search_url"], headers=headers), timeout=SERVER_PROBE_TIMEOUT).close()
            except urllib.error.HTTPError as exc:  # 405 (GET), or 401: it answers
                if exc.code == 401:
                    raise
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return SearchResult.from_dict(json.loads(answer.read()))
        except urllib.error.HTTPError as exc:
            if exc.code == 401 and kb.notice is not None:
                kb.notice(f"the PMS server at {info['url']} wants its token (set PMS_MCP_TOKEN): searching without it")
        except (OSError, ValueError, KeyError, TypeError):  # hung, stopped, an error: the next one, or search here
            continue
    return None


def _bearer_guard(app, token: str):
    """ASGI wrapper: every HTTP request needs ``Authorization: Bearer <token>``."""
    import hmac

    expected = token.encode()

    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            scheme, _, credentials = given.strip().partition(b" ")
            # RFC 9110: the scheme is case-insensitive ("bearer" works as "Bearer" does).
            if not (scheme.lower() == b"bearer" and hmac.compare_digest(credentials.strip(), expected)):
                body = b'{"error": "missing or wrong bearer token (Authorization: Bearer <token>)"}'
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


MCP_SESSION_IDLE = 300.0  # how long an unused HTTP session lives: abandoned ones must not pile up


def bad_request_id(raw: str | bytes) -> bool:
    """Whether a JSON-RPC message or batch holds a request whose id is neither a string nor an
    integer (null, an object, a list): the SDK takes it for a notification and never answers."""
    import json

    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return False
    return any(isinstance(m, dict) and "method" in m and "id" in m and (isinstance(m["id"], bool) or not isinstance(m["id"], (str, int)))
               for m in (data if isinstance(data, list) else [data]))


INVALID_ID = {"jsonrpc": "2.0", "id": None,
              "error": {"code": -32600, "message": "Invalid Request: a request's id must be a string or an integer"}}


async def _send_json(send, status: int, data: dict) -> None:
    import json

    body = json.dumps(data).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _checked_requests(app):
    """ASGI wrapper: POST bodies over MCP_MAX_MESSAGE_BYTES get 413 (on /search as on /mcp), and a
    JSON-RPC request with an id that is no string or integer gets -32600, not silence."""
    async def wrapped(scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST":
            return await app(scope, receive, send)
        parts, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            parts.append(message.get("body", b""))
            size += len(parts[-1])
            if size > MCP_MAX_MESSAGE_BYTES:
                return await _send_json(send, 413, {"error": f"the request is larger than {MCP_MAX_MESSAGE_BYTES} bytes"})
            if not message.get("more_body"):
                break
        body = b"".join(parts)
        if scope.get("path", "").rstrip("/") == "/mcp" and b'"id"' in body and bad_request_id(body):
            return await _send_json(send, 400, INVALID_ID)
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await app(scope, replay, send)

    return wrapped


def _one_line_errors(app):
    """ASGI wrapper: the SDK answers a malformed HTTP message with a multi-line pydantic
    report; clients get the first line (or a plain 'Invalid Request')."""
    async def wrapped(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        held = None

        async def send_one_line(message):
            import json
            nonlocal held
            if message["type"] == "http.response.start" and message["status"] == 400:
                held = message  # sent with the (small, single) body below
                return
            if held is not None and message["type"] == "http.response.body":
                body = message.get("body", b"")
                with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
                    data = json.loads(body)
                    text = data["error"]["message"]
                    if text.startswith("Validation error"):  # JSON, but no JSON-RPC message: -32600 per the spec
                        data["error"].update(code=-32600, message="Invalid Request: not a JSON-RPC 2.0 message")
                    else:
                        data["error"]["message"] = text.splitlines()[0]
                    body = json.dumps(data).encode()
                headers = [(k, v) for k, v in held["headers"] if k.lower() != b"content-length"]
                await send({**held, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
                held = None
                return await send({**message, "body": body})
            await send(message)

        await app(scope, receive, send_one_line)

    return wrapped


# The HTTP server's limits (docs/robustness.md, "A server that cannot be starved"). A client has
# MCP_REQUEST_TIMEOUT seconds to send a whole request (headers and body): a half-sent one is closed.
MCP_REQUEST_TIMEOUT = 10.0
MCP_KEEP_ALIVE = 5  # seconds an idle connection stays open after an answer
# Open connections at most (PMS_MCP_MAX_CONNECTIONS; fewer if the descriptor limit is low): a new one
# past it closes the connection that has waited longest for a request, so a flood of idle or half-sent
# connections cannot lock out a client, nor run the process out of descriptors.
MCP_MAX_CONNECTIONS = 256
# Sessions at most (PMS_MCP_MAX_SESSIONS, about 40 KB each): a new one past it ends the session unused longest.
MCP_MAX_SESSIONS = 500
MCP_ACCEPT_BATCH = 64  # the listen backlog, and connections accepted at once: descriptors stay under the cap + this


def mcp_http_app(service: MCPService, host: str = "127.0.0.1", token: str | None = None,
                 session_idle: float = MCP_SESSION_IDLE, max_sessions: int = MCP_MAX_SESSIONS):
    """The Streamable HTTP app at /mcp: localhost Host/Origin only (DNS rebinding), optional bearer token,
    at most ``max_sessions`` sessions."""
    from mcp.server.transport_security import TransportSecuritySettings

    hosts = ["127.0.0.1", "localhost", "[::1]"]
    if host not in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::"):
        hosts.append(f"[{host}]" if ":" in host else host)  # the address the user chose to serve on
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[h for name in hosts for h in (name, f"{name}:*")],
        allowed_origins=[f"{scheme}://{name}{port}" for name in hosts for scheme in ("http", "https") for port in ("", ":*")])
    app = mcp_server(service).streamable_http_app(streamable_http_path="/mcp", transport_security=security, host=host,
                                                 json_response=True, max_request_body_size=MCP_MAX_MESSAGE_BYTES,
                                                 # The SDK's own cap (a 503) only when every session is busy.
                                                 session_idle_timeout=session_idle, max_sessions=max_sessions + 16,
                                                 custom_starlette_routes=[_search_route(service, security)])
    app = _checked_requests(_one_line_errors(_capped_sessions(app, max_sessions, session_idle)))
    return _bearer_guard(app, token) if token else app


def _capped_sessions(app, limit: int, idle: float):
    """ASGI wrapper: at most ``limit`` MCP sessions. A request that opens one more ends the session
    unused longest first, as a client ends one (DELETE /mcp with its id): new clients are never
    turned away, and abandoned sessions cannot pile up in memory. A session in use is never ended."""
    import collections

    sessions: collections.OrderedDict = collections.OrderedDict()  # id -> [last used, requests in flight], oldest first

    async def end_unused(scope) -> None:
        idle_ones = [sid for sid, (_, busy) in sessions.items() if not busy]
        if not idle_ones:
            return  # every session is busy: the SDK's own cap answers
        sid = idle_ones[0]
        del sessions[sid]
        keep = (b"host", b"origin", b"authorization", b"mcp-protocol-version")
        headers = [(k, v) for k, v in scope.get("headers") or [] if k in keep] + [(b"mcp-session-id", sid)]

        async def nothing():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def discard(message):
            pass

        await app({**scope, "method": "DELETE", "headers": headers, "query_string": b""}, nothing, discard)

    async def wrapped(scope, receive, send):
        if scope["type"] != "http" or scope.get("path", "").rstrip("/") != "/mcp":
            return await app(scope, receive, send)
        now = time.monotonic()
        for sid in [sid for sid, (used, busy) in sessions.items() if not busy and now - used > idle]:
            del sessions[sid]  # the SDK has ended it already
        sid = dict(scope.get("headers") or []).get(b"mcp-session-id")
        entry = sessions.get(sid) if sid else None
        if entry is not None:
            sessions.move_to_end(sid)
            entry[1] += 1
        elif sid is None and len(sessions) >= limit:
            await end_unused(scope)
        opened = []

        async def watch(message):
            if message["type"] == "http.response.start" and sid is None and message["status"] < 400:
                opened.extend(v for k, v in message.get("headers") or [] if k.lower() == b"mcp-session-id")
            await send(message)

        try:
            await app(scope, receive, watch)
        finally:
            if entry is not None:
                entry[0], entry[1] = time.monotonic(), entry[1] - 1
            for new in opened:
                sessions[new] = [time.monotonic(), 0]
            if sid is not None and scope.get("method") == "DELETE":
                sessions.pop(sid, None)

    return wrapped


def _guarded_protocol(max_connections: int, request_timeout: float):
    """uvicorn's HTTP/1.1 protocol (h11) with two limits it lacks: a client has ``request_timeout``
    seconds to send a whole request, from the moment the connection waits for one; and at most
    ``max_connections`` connections are open: one more closes the connection that has waited
    longest for a request (idle or half-sent), or, when every one is busy, itself."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    waiting: dict = {}  # connection -> its timer, the one waiting longest first

    class GuardedProtocol(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._wait_for_request()
            while len(self.connections) > max_connections:
                oldest = next((c for c in waiting if c is not self), self)
                oldest._close()
                if oldest is self:
                    return

        def _wait_for_request(self) -> None:
            self._stop_waiting()
            waiting[self] = self.loop.call_later(request_timeout, self._too_slow)

        def _stop_waiting(self) -> None:
            timer = waiting.pop(self, None)
            if timer is not None:
                timer.cancel()

        def _too_slow(self) -> None:
            if self.conn.their_state is not h11.DONE:  # not a request being answered
                self._close()

        def _close(self) -> None:
            self._stop_waiting()
            self.connections.discard(self)
            self.transport.close()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is h11.DONE:  # the whole request is in: it is being answered
                self._stop_waiting()
            elif self not in waiting and not self.transport.is_closing():
                self._wait_for_request()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is not h11.DONE:
                self._wait_for_request()  # keep-alive: the next request has its own time

        def connection_lost(self, exc) -> None:
            self._stop_waiting()
            super().connection_lost(exc)

    return GuardedProtocol


def _descriptor_room(wanted: int) -> int:
    """How many connections the process can hold: its descriptor limit raised to the hard limit
    (as servers do), less some for the index, the model and the standard streams."""
    if sys.platform == "win32":
        return wanted
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            raised = min(hard, 65536) if hard != resource.RLIM_INFINITY else 65536
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
    return max(8, min(wanted, soft - MCP_ACCEPT_BATCH - 64))


def _accept_errors_once(say: Callable[[str], None]):
    """An asyncio exception handler that tells 'cannot accept' (out of descriptors) in one line at
    most once a minute, instead of a traceback on every try."""
    told = [0.0]

    def handler(loop, context) -> None:
        if str(context.get("message", "")).startswith("socket.accept() out of system resource"):
            if time.monotonic() - told[0] > 60:
                told[0] = time.monotonic()
                say(f"warning: cannot accept connections: {one_line(context.get('exception')) or 'out of resources'} "
                    "(told once a minute)")
            return
        loop.default_exception_handler(context)

    return handler


def serve_mcp_http(service: MCPService, host: str = "127.0.0.1", port: int = MCP_DEFAULT_PORT,
                   token: str | None = None, session_idle: float = MCP_SESSION_IDLE) -> None:
    """Serve any number of clients over Streamable HTTP at http://HOST:PORT/mcp until interrupted."""
    import json
    import socket

    import anyio
    import uvicorn

    try:
        sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as exc:
        raise PMSError(f"cannot listen on {host}:{port}: {exc.strerror or exc} (choose another --port)") from None
    # Without it each answer waits for a delayed ACK (Nagle); accepted sockets inherit it.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    port = sock.getsockname()[1]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}/mcp"
    connections = _descriptor_room(int(env_number("PMS_MCP_MAX_CONNECTIONS", MCP_MAX_CONNECTIONS)))
    sessions = int(env_number("PMS_MCP_MAX_SESSIONS", MCP_MAX_SESSIONS))
    config = uvicorn.Config(mcp_http_app(service, host, token, session_idle, sessions), log_level="warning", lifespan="on",
                            http=_guarded_protocol(connections, MCP_REQUEST_TIMEOUT), timeout_keep_alive=MCP_KEEP_ALIVE,
                            # asyncio accepts up to this many connections at a time, before any is closed
                            backlog=MCP_ACCEPT_BATCH)
    server = uvicorn.Server(config)

    async def serve() -> None:
        import asyncio

        asyncio.get_running_loop().set_exception_handler(_accept_errors_once(service.say))
        await server.serve([sock])

    service.warm_up()
    if threading.current_thread() is threading.main_thread():
        import signal

        # uvicorn stops gracefully on SIGTERM, then re-raises it: exit through Python so the cleanup below runs.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    announce = mcp_server_file()

    def unannounce():
        with contextlib.suppress(OSError):
            announce.unlink()

    # uvicorn stops on SIGTERM/SIGINT by waiting for the calls in flight: a call still busy
    # after MCP_EXIT_GRACE seconds (a worker thread cannot be cancelled) must not keep it alive.
    graceful_exit = server.handle_exit

    def handle_exit(sig, frame):
        graceful_exit(sig, frame)
        threading.Thread(target=_exit_after, args=(MCP_EXIT_GRACE, unannounce), name="pms-mcp-exit", daemon=True).start()

    server.handle_exit = handle_exit  # type: ignore[method-assign]
    try:  # from the announcement on: a SIGTERM at any point withdraws it
        with contextlib.suppress(OSError):
            announce.parent.mkdir(parents=True, exist_ok=True)
            announce.write_text(json.dumps({"url": url, "search_url": url[: -len("/mcp")] + "/search", "pid": os.getpid(),
                                            "db": str(service.kb.db_path.resolve()), "version": VERSION}), encoding="utf-8")
        if not token and host not in ("127.0.0.1", "localhost", "::1"):
            service.say(f"warning: serving on {host} without --token: anyone who reaches this address can read your notes")
        service.say(f"MCP server at {url} (" + ("bearer token required; " if token else "") + "Ctrl+C stops it)")
        anyio.run(serve)
    finally:
        sock.close()
        unannounce()
    end_process(service)
