"""The command line: one KnowledgeBase call per command, and what it prints.

Owns: the argparse table, each ``cmd_*``, progress output, ``setup`` (the private
environment and the ``pms`` command) and ``main``. The only module that imports gui/
(``pms gui``).

May import: config, language, pdf, paths, filters, store, embedding, query, retrieval,
sync, clip, api, evaluation, mcp_server.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from .config import (
    ADD_COLLECTION_ARGS, DEFAULT_GLOB, SEARCH_MODES, VERSION, Hint, PMSError, _typing, argparse, checkout_dir, data_dir,
    default_db_path, display_path, error_excerpt, import_root, module_available, pms_command, private_env_dir, reason_text,
    source_path, use_private_env,
)
from .language import LANGUAGE_NAMES
from .pdf import INSTALL_PDF, PDF_NO_TEXT, PDF_PACKAGE
from .paths import path_prefix_glob
from .filters import NoteFilter, checked_number
from .store import storage_errors
from .embedding import embedding_choice_from_env
from .query import Hit, render_snippet, terminal_safe
from .retrieval import SearchResult
from .sync import SyncPlan, SyncProgress, SyncReport, duration_text
from .clip import CLIP_MAX_BYTES, CLIP_MAX_PDF_BYTES, CLIP_MAX_TIMEOUT, CLIP_TIMEOUT, one_line
from .api import MULTI_GET_MAX_BYTES, Collection, KnowledgeBase, NoteRef
from .evaluation import BENCH_MODES, format_benchmark, load_fixture, run_benchmark
from .mcp_server import (
    MCP_CALL_TIMEOUT, MCP_DEFAULT_PORT, MCP_SESSION_IDLE, MCPService, search_via_server, serve_mcp_http, serve_mcp_stdio,
)


def _human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def _pad(text: str, width: int) -> str:
    """Left-align ``text`` in ``width`` terminal columns: Chinese, Japanese and
    Korean characters (East Asian wide) take two columns each."""
    import unicodedata

    used = sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)
    return text + " " * max(0, width - used)


class ProgressPrinter:
    """Progress on stderr: a one-line bar redrawn on a terminal; elsewhere (a log, a pipe, a service) a
    plain line every LOG_EVERY seconds once a phase has run that long, and one when it ends, so a
    long embedding says how far it is and when it will be done wherever its output goes."""

    line_open = None  # the stream whose bar is drawn and not yet ended by a newline
    LOG_EVERY = 5.0  # seconds between two plain lines; a phase shorter than this prints none

    def __init__(self, stream=sys.stderr):
        self.stream = stream
        self.enabled = stream.isatty()
        self.last = 0.0
        self.phase_started: tuple[str, float] | None = None  # the phase being logged and when it began
        self.logged = False  # whether this phase printed a plain line yet

    @classmethod
    def end_line(cls) -> None:
        """Finish a bar cut short (Ctrl-C), so the next message starts on a fresh line."""
        if cls.line_open is not None:
            with contextlib.suppress(Exception):
                cls.line_open.write("\n")
                cls.line_open.flush()
            cls.line_open = None

    def __call__(self, p: SyncProgress) -> None:
        unit = "passages" if p.phase == "embed" else "files"
        if not self.enabled:
            self._log(p, unit)
            return
        if time.monotonic() - self.last < 0.1 and p.done < p.total:
            return
        self.last = time.monotonic()
        width = 24
        filled = int(width * p.done / p.total) if p.total else width
        label = "Embedding" if p.phase == "embed" else f"Indexing {p.current}".rstrip()
        ProgressPrinter.line_open = self.stream  # before the write: Ctrl-C may land right after it
        self.stream.write(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {p.done}/{p.total} {unit} "
                          f"{p.rate:.1f}/s ETA {p.eta_text}   ")
        if p.done >= p.total:
            self.stream.write("\n")
            ProgressPrinter.line_open = None
        self.stream.flush()

    def _log(self, p: SyncProgress, unit: str) -> None:
        now = time.monotonic()
        if self.phase_started is None or self.phase_started[0] != p.phase:
            self.phase_started, self.last, self.logged = (p.phase, now), now, False
        finished = p.done >= p.total
        if not (finished and self.logged) and now - self.last < self.LOG_EVERY:
            return
        self.last, self.logged = now, True
        label = "Embedding" if p.phase == "embed" else "Indexing"
        tail = f"done in {duration_text(now - self.phase_started[1])}" if finished else f"ETA {p.eta_text}"
        with contextlib.suppress(OSError, ValueError):  # a closed or broken stream never stops the sync
            self.stream.write(f"{label}: {p.done:,}/{p.total:,} {unit}, {p.rate:.1f}/s, {tail}\n")
            self.stream.flush()


def _print_hits(result: SearchResult, args) -> None:
    """A search's (or related notes') result: each hit to show with its copies on one line under it."""
    if args.json:
        _print_json([h.to_dict(explain=args.explain) for h in result])
        return
    if args.files:  # one line a result: a copy is the same text
        for h, _copies in result.groups:
            print(terminal_safe(h.abspath))
        return
    if not result:
        print("No results.")
        return
    style = "ansi" if sys.stdout.isatty() and not os.environ.get("NO_COLOR") else "plain"
    bold = (lambda s: f"\x1b[1m{s}\x1b[0m") if style == "ansi" else (lambda s: s)
    dim = (lambda s: f"\x1b[2m{s}\x1b[0m") if style == "ansi" else (lambda s: s)
    lists = _LISTS_OF_MODE[result.mode]
    for i, (h, copies) in enumerate(result.groups, 1):
        # A filter with no words lists notes by date: the date says more than a rank.
        listed = h.date and not h.score and h.bm25_rank is None and h.vector_rank is None
        rank = h.date[:10] if listed and h.date else _ranks(h, lists)
        where = f" p. {h.page}" if h.page else f":{h.start_line}-{h.end_line}"  # a PDF's page; get file.pdf:N reads it
        print(f"{i:>2}. {bold(terminal_safe(h.title))}  {dim(f'{terminal_safe(h.collection)}/{terminal_safe(h.path)}{where}  #{h.docid}  {rank}')}")
        if h.heading_path and h.heading_path != h.title:
            print(f"    {dim(terminal_safe(h.heading_path))}")
        if h.snippet:
            shown = render_snippet(h.snippet, h.marks, style)  # "plain" is the raw text: escape it here too
            print(f"    {shown if style == 'ansi' else terminal_safe(shown)}")
        if args.explain:
            print(f"    {dim(_explain(h, lists))}")
        if copies:
            print(f"    {dim(f'+{len(copies)} cop' + ('y' if len(copies) == 1 else 'ies') + ': ' + ', '.join(terminal_safe(c.path) for c in copies))}")


# Which ranked lists a search mode reads: a hit's rank in each is what the CLI shows.
_LISTS_OF_MODE = {"keyword": ("keyword",), "vector": ("meaning",), "hybrid": ("keyword", "meaning")}


def _ranks(hit: Hit, lists: Sequence[str]) -> str:
    """'keyword #2, meaning #5': the hit's place in each list ('—' when that list did not find it)."""
    places = {"keyword": hit.bm25_rank, "meaning": hit.vector_rank}
    return ", ".join(f"{name} #{places[name]}" if places[name] else f"{name} \u2014" for name in lists)


def _explain(hit: Hit, lists: Sequence[str]) -> str:
    """The numbers behind a hit, rounded, each named (docs/search-results.md says what they mean)."""
    parts = []
    if "keyword" in lists:
        parts.append(f"keyword #{hit.bm25_rank} (BM25 + note focus {hit.bm25_score:.2f})" if hit.bm25_rank else "keyword \u2014 (not found by words)")
    if "meaning" in lists:
        parts.append(f"meaning #{hit.vector_rank} (cosine distance {hit.vector_distance:.3f})" if hit.vector_rank
                     else "meaning \u2014 (not among the nearest passages)")
    if hit.name_rank:
        parts.append(f"name #{hit.name_rank} (the query names this note: title, alias or file name)")
    if len(lists) > 1 or hit.name_rank:
        parts.append(f"fused score {hit.score:.4f} (higher is better)")
    if hit.fusion:
        parts.append(f"fused by {hit.fusion}")
    return "; ".join(parts)


def _notice(text: str) -> None:
    print(f"pms: {text}", file=sys.stderr)


def _print_json(data, ensure_ascii: bool = False) -> None:
    """What --json prints."""
    import json

    print(json.dumps(data, indent=2, ensure_ascii=ensure_ascii))


def _share(value: float) -> str:
    """A share as a reader reads it: "3 %", "0.4 %", "under 0.1 %"."""
    percent = value * 100
    return f"{percent:.0f} %" if percent >= 1 else f"{percent:.1f} %" if percent >= 0.1 else "under 0.1 %"


def _keyword_only_notice(kb: KnowledgeBase, why: str) -> None:
    """Why search is keyword-only: said once per index and reason (status always says it)."""
    if why and kb.tell_once("keyword_only", why):
        _notice(f"keyword-only search: {why} (said once; {pms_command('status')} repeats it)")


def cmd_collection(kb: KnowledgeBase, args) -> int:
    action = args.collection_command
    if action == "add":
        col = kb.collections.create(args.path, name=args.name, glob=args.glob, description=args.description, force=args.force,
                                    exclude=args.exclude or ())
        print(f"Added collection {col.name!r}: {col.path} ({', '.join(col.patterns)})")
        if not args.no_sync:
            return _run_sync(kb, [col.name], args)
        return 0
    if action == "list":
        cols = kb.collections.list()
        if args.json:
            _print_json([c.to_dict() for c in cols], ensure_ascii=True)
        elif not cols:
            print(f"No collections yet. Add one: {pms_command(ADD_COLLECTION_ARGS)}")
        for c in cols if not args.json else []:
            notes, passages = c.counts()
            print(f"{_pad(c.name, 20)} {notes:>6} notes {passages:>7} passages  {c.path}  {', '.join(c.patterns)}")
        return 0
    if action == "show":
        c = kb.collections.get(args.name)
        d = c.to_dict()
        if args.json:
            _print_json(d, ensure_ascii=True)
        else:
            for key, value in d.items():
                if key == "exclusions":
                    for source, globs in value.items():
                        print(f"{'excluded':<12} {', '.join(globs) or '(none)'}  [{source}]")
                else:
                    print(f"{key:<12} {value}")
        return 0
    if action == "exclude":
        col = kb.collections.set_exclude(args.name, args.globs)
        print(f"Collection {col.name!r} leaves out: {', '.join(col.exclude) or 'nothing (besides .pmsignore and Obsidian)'}; "
              f"{pms_command('sync')} applies it")
        return 0
    if action == "describe":
        kb.describe_folder(args.name, args.folder or "", args.description)
        where = f"folder {args.folder!r} of {args.name!r}" if (args.folder or "").strip("/") else f"collection {args.name!r}"
        print(f"Described {where}" if args.description else f"Removed the description of {where}")
        return 0
    if action == "rename":
        kb.collections.rename(args.old, args.new)
        print(f"Renamed collection {args.old!r} to {args.new!r}")
        return 0
    if action == "remove":
        c = kb.collections.get(args.name)
        kb.collections.delete(args.name)
        print(f"Removed collection {c.name!r} from the index (the files in {c.path} are untouched)")
        return 0
    raise PMSError(f"usage: {pms_command('collection {add,list,show,exclude,describe,rename,remove}')}")


def _language_notice(kb: KnowledgeBase) -> None:
    """After a sync: the language advice, once per index and advice."""
    advice = kb.language_advice()
    if advice and kb.tell_once("language_advice", advice):
        _notice(advice)


def _run_sync(kb: KnowledgeBase, names, args, notify: bool = True) -> int:
    report = kb.sync(collections=names, embed=not getattr(args, "no_embed", False), reembed=getattr(args, "reembed", False),
                     progress=ProgressPrinter())
    _tell_problems(report)
    if report.embed_error and getattr(args, "reembed", False):
        print(report.summary())
        raise PMSError(f"cannot re-embed: {report.embed_error}")
    if report.embed_error and not getattr(args, "no_embed", False) and notify:
        _keyword_only_notice(kb, report.embed_error)
    print(report.summary())
    _language_notice(kb)
    return 1 if report.collection_errors else (130 if report.cancelled else 0)


def _tell_problems(found: SyncReport | SyncPlan) -> None:
    """What a sync (or a dry run) met, one line each: files not indexed, new or changed since
    (each said once: the index remembers them, status lists them), unreadable .pmsignore lines,
    and collections that could not be synced, the one thing that fails it."""
    for path, why in found.skipped:
        _notice(f"{path}: {why}")
    for path, why in found.errors:
        _notice(f"warning: {path}: {why}")
    for warning in found.warnings:
        _notice(f"warning: {warning}")
    for path, why in found.collection_errors:
        _notice(f"error: {path}: {why}")


def cmd_sync(kb: KnowledgeBase, args) -> int:
    if args.reembed and args.no_embed:
        raise PMSError("--reembed embeds every passage again and --no-embed embeds none: give one of them")
    names = args.collection or None
    if not kb.collections.list():
        raise PMSError(f"no collections yet (add one: {pms_command(ADD_COLLECTION_ARGS)})")
    if args.dry_run:
        plan = kb.check_sync_status(names)
        print(plan.summary())
        if args.verbose:
            for sign, items in (("+", plan.added), ("~", plan.updated), ("-", plan.deleted)):
                for col, rel in items:
                    print(f"  {sign} {col}/{rel}")
        _tell_problems(plan)
        if plan.pdfs_unread:
            _notice(f"{plan.pdfs_unread} PDFs not indexed: reading PDFs needs {PDF_PACKAGE} ({INSTALL_PDF})")
        return 1 if plan.collection_errors else 0
    return _run_sync(kb, names, args)


def cmd_status(kb: KnowledgeBase, args) -> int:
    info = kb.status()
    if args.json:
        _print_json(info, ensure_ascii=True)
        return 0
    print(f"Index:       {info['index']} ({_human_bytes(info['index_bytes'])}, schema {info['schema_version']})")
    print(f"Notes:       {info['notes']} notes, {info['passages']} passages, {info['embedded']} embedded")
    mode, to_embed = info["search_mode"], info["to_embed"]
    if info["read_only"]:
        print(f"Read-only:   {info['read_only']} (search, get and status work; sync cannot write)")
    partial = f" (partial: {info['embedded']} of {info['passages']} passages embedded)" if mode != "keyword" and to_embed else ""
    hint = Hint(**info["search_mode_hint"]) if info["search_mode_hint"] else None
    print(f"Search mode: {mode}{partial}" + (f" - {reason_text(info['search_mode_reason'], hint)}" if info["search_mode_reason"] else "")
          + (f", model {info['model']}" if mode != "keyword" else ""))
    if info["vectors_from"]:
        print(f"Vectors:     from {info['vectors_from']}")
    failed = info["embedding_last_failure"]
    if failed and failed["error"] != info["search_mode_reason"]:
        print(f"Last failure: {failed['at'] or 'at the last sync'}: {failed['error']}")
    if info["languages"]:
        print("Languages:   " + ", ".join(f"{LANGUAGE_NAMES.get(lang, lang)} {n}" for lang, n in list(info["languages"].items())[:8]))
    if info["language_advice"]:
        print(f"Advice:      {info['language_advice']}")
    p = info["pending"]
    todo = f"+{p['added']} new, ~{p['updated']} modified, -{p['deleted']} deleted" + (f", {to_embed} passages to embed" if to_embed else "")
    if info["sync_running"]:
        advice = "  (a sync is running now)"
    elif info["read_only"]:
        advice = ""
    else:
        advice = f"  (run: {pms_command('sync')})" if sum(p.values()) or to_embed else ""
    print(f"Pending:     {todo}{advice}")
    if info["embedding"]:
        e = info["embedding"]
        eta = SyncProgress("embed", e["done"], e["total"], e["rate"], e["eta_s"]).eta_text
        print(f"Embedding:   {e['done']:,} of {e['total']:,} passages, {e['rate']:.0f}/s, {eta} left (newest notes first)")
    listed = [f for f in info["not_indexed"] if f["reason"] != PDF_NO_TEXT]  # those have their own line below
    if listed or info.get("skipped"):
        print(f"Not indexed: {info['skipped']} files cannot be indexed as they are"
              + (f" ({pms_command('sync')} says why)" if not listed else ":"))
    for f in listed[:10]:
        print(f"  {terminal_safe(f['collection'])}/{terminal_safe(f['path'])}: {terminal_safe(f['reason'])}")
    if len(listed) > 10:
        print(f"  ... and {len(listed) - 10} more (status --json lists them all)")
    if info.get("pdfs_without_text"):
        print(f"PDFs:        {info['pdfs_without_text']} PDFs have no text (scans? run OCR on them to make them searchable)")
    if info.get("pdfs_unread"):
        print(f"PDFs:        {info['pdfs_unread']} PDFs not indexed: reading PDFs needs {PDF_PACKAGE} ({INSTALL_PDF})")
    for warning in info["warnings"]:
        print(f"Warning:     {terminal_safe(warning)}")
    print("Collections:" + ("" if info["collections_detail"] else f" none (add one: {pms_command('collection add PATH')})"))
    for c in info["collections_detail"]:
        print(f"  {_pad(c['name'], 18)} {c['notes']:>6} notes {c['passages']:>7} passages  {c['path']}  last sync {c['last_sync'] or 'never'}")
    broken = info.get("unresolved_links", [])
    if broken:
        print(f"Unresolved links: {len(broken)} (a renamed or deleted note, or a typo)")
        for r in broken[:10]:
            print(f"  {r['collection']}/{r['path']}:{r['line']} -> {r['target']}")
        if len(broken) > 10:
            print(f"  ... and {len(broken) - 10} more (status --json lists them all)")
    if info["notes_to_reread"]:
        print(f"Upgrade:     {info['notes_to_reread']} notes lack tags, dates, links and languages until the next sync "
              f"(run: {pms_command('sync')})")
    return 0


def cmd_search(kb: KnowledgeBase, args) -> int:
    if not kb.collections.list():
        raise PMSError(f"no collections yet, so nothing to search (add your notes: {pms_command(ADD_COLLECTION_ARGS)})")
    note_filter = NoteFilter.build(**_filter_fields(args))
    search = dict(query=args.query, k=args.n, mode=args.mode, collections=args.collection or None, passages=args.passages,
                  note_filter=note_filter, min_score=args.min_score, intent=args.intent, queries=args.also or ())
    # A running `pms.py mcp --http` on this index has the model loaded: a third of a second saved per
    # hybrid search (docs/decisions.md). A keyword search is faster here than a request is.
    result = search_via_server(kb, search) if args.mode != "keyword" else None
    if result is None:
        result = kb.search(**search)
    if args.mode == "auto" and not args.json:
        _keyword_only_notice(kb, reason_text(result.reason, result.hint))
    _print_hits(result, args)
    if not result and not args.json and path_prefix_glob(note_filter.path):
        _notice(f"--path {note_filter.path} is a folder; --path '{path_prefix_glob(note_filter.path)}' matches names that start with it")
    if result.embedded is not None and not args.json:
        _notice(f"{result.mode} search on a partly embedded index: {_share(result.embedded)} of passages have vectors; notes "
                f"without one are ranked by their words and names until a sync embeds them (run: {pms_command('sync')})")
    if result.weak and result.best_relevance is not None and not args.json:
        _notice(f"nothing looks clearly relevant (best relevance {result.best_relevance:.2f} of 1): your notes may not cover this")
    stale = kb.changed_on_disk(result.hits)
    if stale:
        _notice(f"{len(stale)} of these notes changed on disk since they were indexed "
                f"(run: {pms_command('sync')}, or keep it fresh: {pms_command('watch')})")
    return 0


def _filter_fields(args) -> dict:
    """The search flags that make its NoteFilter, as NoteFilter.build takes them (their dest is the field's name)."""
    return {name: getattr(args, name) for name in NoteFilter._fields}


def cmd_tags(kb: KnowledgeBase, args) -> int:
    counts = kb.tags(args.collection or None)
    if args.json:
        _print_json([{"tag": t, "notes": n} for t, n in counts])
    elif not counts:
        print("No tags yet (frontmatter tags: and inline #tags are indexed by sync).")
    for tag, n in counts if not args.json else []:
        print(f"{n:>6}  #{tag}")
    return 0


def cmd_bench(kb: KnowledgeBase, args) -> int:
    judgments = load_fixture(args.fixture)
    result = run_benchmark(kb, judgments, modes=args.mode or BENCH_MODES, collections=args.collection or None)
    if args.json:
        _print_json(result)
    else:
        print(f"{result['queries']} queries over {result['notes']} notes in {', '.join(result['collections'])}")
        print(format_benchmark(result))
    return 0


def _print_refs(refs: list[NoteRef], args, empty: str) -> None:
    if args.json:
        _print_json([r.to_dict() for r in refs])
        return
    if not refs:
        print(empty)
    for r in refs:
        if r.resolved:
            print(f"{r.title}  {r.collection}/{r.path}  #{r.docid}")
        else:
            print(f"{r.target}  (unresolved: no such note; line {r.line})")


def cmd_links(kb: KnowledgeBase, args) -> int:
    """``links`` and ``backlinks``."""
    if args.command == "backlinks":
        _print_refs(kb.backlinks(args.note), args, "No note links here.")
    else:
        _print_refs(kb.links(args.note), args, "No links in this note.")
    return 0


def cmd_related(kb: KnowledgeBase, args) -> int:
    args.files = False
    _print_hits(kb.related(args.note, k=args.n, collections=args.collection or None), args)
    return 0


def _note_text_out(text: str) -> str:
    """A note's text as printed: exact into a pipe or file, control characters
    escaped on a terminal (tabs and newlines kept)."""
    return terminal_safe(text, keep="\t\n") if sys.stdout.isatty() else text


def cmd_get(kb: KnowledgeBase, args) -> int:
    doc = kb.get(args.ref, max_bytes=args.max_bytes)
    if doc.truncated:
        _notice(f"stopped at --max-bytes {args.max_bytes}: lines {doc.from_line}-{doc.to_line} of {doc.total_lines} "
                f"(the rest: {pms_command('get ' + repr(doc.rest()))})")
    if args.json:
        _print_json(doc.to_dict())
    else:
        print(_note_text_out(doc.numbered() if args.line_numbers else doc.text))
    return 0


def cmd_open(kb: KnowledgeBase, args) -> int:
    """Open a note in Obsidian when it is in an Obsidian vault (--no-obsidian: never), else in
    the system's app for its kind; --print prints what would be opened instead."""
    import shutil
    import subprocess

    doc = kb.get(args.ref, count=1)
    target = doc.obsidian_url if doc.obsidian_url and not args.no_obsidian else Path(doc.abspath).as_uri()
    if args.print:
        print(target)
        return 0
    opener = (["open"] if sys.platform == "darwin" else [] if sys.platform == "win32" else ["xdg-open"])
    try:
        if not opener:
            os.startfile(target)  # type: ignore[attr-defined]  # Windows only
        elif not shutil.which(opener[0]):
            raise OSError(f"{opener[0]} is not installed")
        else:
            subprocess.run([*opener, target], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=OPEN_TIMEOUT, check=True)
    except subprocess.CalledProcessError as exc:
        detail = (exc.stderr or b"").decode("utf-8", "replace").strip().splitlines()
        raise PMSError(f"cannot open {doc.ref}: {opener[0]} failed ({detail[-1] if detail else f'exit {exc.returncode}'}); "
                       f"the file is {doc.abspath}") from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PMSError(f"cannot open {doc.ref} ({exc}); the file is {doc.abspath}") from None
    return 0


OPEN_TIMEOUT = 10.0  # seconds the system's opener may take to hand the note over (xdg-open returns at once)
SKIPPED_SHOWN = 10  # multi-get names this many notes it skipped, then counts the rest


def cmd_multi_get(kb: KnowledgeBase, args) -> int:
    notes, skipped = kb.multi_get(args.pattern, max_bytes=args.max_bytes)
    if args.json:
        _print_json({"documents": [d.to_dict() for d in notes], "skipped": [{"ref": ref, "reason": why} for ref, why in skipped]})
        return 0
    for d in notes:
        print(f"==> {terminal_safe(d.collection)}/{terminal_safe(d.path)} <==\n{_note_text_out(d.text.rstrip())}\n")
    for ref, why in skipped[:SKIPPED_SHOWN]:
        _notice(f"skipped {terminal_safe(ref)}: {terminal_safe(why)}")
    if len(skipped) > SKIPPED_SHOWN:
        _notice(f"skipped {len(skipped) - SKIPPED_SHOWN:,} more (--json lists every one and why)")
    return 0 if notes or not skipped else 1


def cmd_watch(kb: KnowledgeBase, args) -> int:
    """Sync now, then again whenever notes change (until Ctrl+C)."""
    names = args.collection or None
    watched = [c.name for c in kb.collections.list() if names is None or c.name in names]
    if not watched:
        raise PMSError(f"no collections to watch (add one: {pms_command('collection add FOLDER')})")
    _notice(f"watching {', '.join(watched)}: notes are synced a second after they change (Ctrl+C stops)")

    def synced(report: SyncReport) -> None:
        if report.added or report.updated or report.deleted or report.errors or report.embedded:
            print(f"{time.strftime('%H:%M:%S')} {report.summary()}", flush=True)

    kb.watch(names, on_sync=synced, on_error=lambda text: _notice(f"sync failed: {text}"))
    return 0


def cmd_mcp(kb: KnowledgeBase, args) -> int:
    """Serve the notes to AI assistants over MCP (stdio, or Streamable HTTP with --http)."""
    if not module_available("mcp"):
        if getattr(sys, "frozen", False):
            raise PMSError("this packaged app has no MCP server (run the pms.py script, with the mcp package, instead)")
        raise PMSError("the MCP server needs the mcp package: pip install mcp", Hint(command="setup"))
    if args.timeout is not None and not args.timeout > 0:
        raise PMSError(f"--timeout wants a number of seconds above 0, not {args.timeout:g}")
    kb.keep_vectors_in_memory()  # a long-running server: warm vector searches
    service = MCPService(kb, allow_sync=args.allow_sync, call_timeout=args.timeout)
    if args.watch if args.watch is not None else args.http:  # on by default for the long-lived HTTP server
        service.watch()
    if args.http:
        serve_mcp_http(service, host=args.host, port=args.port, token=args.token or os.environ.get("PMS_MCP_TOKEN"),
                       session_idle=args.session_idle)
    else:
        serve_mcp_stdio(service)
    return 0


def _clip_target(kb: KnowledgeBase, name: str | None) -> Collection:
    if name:
        return kb.collections.get(name)
    cols = kb.collections.list()
    if len(cols) == 1:
        return cols[0]
    if not cols:
        raise PMSError(f"no collections yet (add one: {pms_command(ADD_COLLECTION_ARGS)})")
    raise PMSError(f"which collection? add -c NAME (collections: {', '.join(c.name for c in cols)})")


def _read_saved_page(stream, what: str, limit: int = CLIP_MAX_BYTES) -> bytes:
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise PMSError(f"{what} is too large to clip (more than {limit // 1048576} MB)")
    return data


def cmd_clip(kb: KnowledgeBase, args) -> int:
    """Clip a URL, a saved page or standard input into a collection; print the new note's path."""
    checked_number(args.timeout, "--timeout", minimum=0.001, maximum=CLIP_MAX_TIMEOUT, whole=False)
    collection = _clip_target(kb, args.collection)
    html, pdf, source = None, None, args.url
    if args.source == "-":
        html = _read_saved_page(sys.stdin.buffer, "standard input", CLIP_MAX_PDF_BYTES)
    elif Path(args.source).expanduser().is_file():
        try:
            with open(Path(args.source).expanduser(), "rb") as fh:
                html = _read_saved_page(fh, args.source, CLIP_MAX_PDF_BYTES)
        except OSError as exc:
            raise PMSError(f"cannot read {args.source}: {exc.strerror or exc}") from None
        if html.startswith(b"%PDF-"):  # a PDF file: its path is its source unless --url says otherwise
            source = source or str(Path(args.source).expanduser().resolve())
    elif re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:", args.source):  # a URL (check_clip_url explains bad schemes)
        if args.url:
            raise PMSError("--url is for a saved page or standard input; to clip a URL, give only the URL")
        source = args.source
    else:
        raise PMSError(f"{args.source!r} is neither a URL nor a saved page (no such file); URLs start with https://")
    if html is not None and html.startswith(b"%PDF-"):
        html, pdf = None, html
    elif html is not None and len(html) > CLIP_MAX_BYTES:
        raise PMSError(f"{args.source} is too large to clip (more than {CLIP_MAX_BYTES // 1048576} MB)")
    note = collection.clip(source, html=html, pdf=pdf, subfolder=args.subfolder, force=args.force,
                           timeout=args.timeout, embed=not args.no_embed, keep_original=args.keep_pdf)
    if note.index_error:
        _notice(f"the note was saved but not indexed: {note.index_error} (run: {pms_command('sync')})")
    if args.keep_pdf and not note.original and not args.json:
        _notice("--keep-pdf: the page was not a PDF, so there is no original to keep")
    if not note.source and not args.json:
        _notice("the page names no URL of its own, so the note has no source (pass --url to record it)")
    if args.json:
        _print_json(note.to_dict())
    else:
        print(note.path)
    return 0


def sample_notes_dir() -> Path:
    base = getattr(sys, "_MEIPASS", None)
    return Path(base) / "sample-notes" if base else checkout_dir() / "sample-notes"


DEMO_QUERIES = ["sync notes across devices", "rust ownership borrow", '"3-2-1" backup -docker', "what should I pack for a trip"]


def cmd_demo(kb: KnowledgeBase, args) -> int:
    import json
    folder = sample_notes_dir()
    if not folder.is_dir():
        raise PMSError(f"the sample notes folder {folder} is missing (run the demo from a PMS checkout)")
    if not any(c.name == "sample-notes" for c in kb.collections.list()):
        kb.collections.create(folder, name="sample-notes", description="Sample notes shipped with PMS")
    print(f"Index: {kb.db_path}")
    code = _run_sync(kb, ["sample-notes"], args, notify=False)
    used = kb.search_mode()
    mode, why = used.mode, reason_text(used.reason, used.hint)
    print(f"Search mode: {mode}" + (f" - {why}" if why else ""))
    kb.tell_once("keyword_only", why)  # said here; later searches need not repeat it
    for q in args.queries or DEMO_QUERIES:
        print(f"\n$ {pms_command('search')} {json.dumps(q)}")
        args.query = q
        _print_hits(kb.search(q, k=3, mode=args.mode), args)
    print("\nThe sample notes are now a collection named 'sample-notes' in your index. Next:\n"
          f"  add your own notes:     {pms_command(ADD_COLLECTION_ARGS)}\n"
          f"  search everything:      {pms_command('search')} \"what you remember\"\n"
          f"  remove the samples:     {pms_command('collection remove sample-notes')}   (the files stay)")
    return code


SETUP_PIP = "pip>=24.2"
# What `setup` installs, pinned (as requirements.txt): a newer sqlite-vec may lay out its
# tables otherwise, a newer fastembed may embed differently from the vectors stored.
SETUP_PACKAGES = ["fastembed==0.9.1", "sqlite-vec==0.1.9", "sqlean-py==3.50.4.5", "trafilatura==2.3.1",
                  "lxml_html_clean==0.4.6", "mcp==2.3.0", f"{PDF_PACKAGE}==5.15.2"]
# The desktop app's, as requirements-dev.txt (PySide6 6.12 aborts on Python < 3.12).
SETUP_GUI_PACKAGES = ["PySide6-Essentials==6.11.3", "markdown-it-py==4.3.0", "mdit-py-plugins==0.7.0"]


def default_bin_dir() -> Path:
    """Where ``setup`` puts the ``pms`` command: ~/.local/bin (on the PATH of most
    Linux and macOS shells); on Windows the data folder, which the user adds to PATH."""
    if sys.platform == "win32":
        return data_dir() / "bin"
    return Path.home() / ".local" / "bin"


# The pms command: a few lines that import pms (the one file or the package) as a module, so Python loads its cached bytecode.
PMS_COMMAND_SCRIPT = """\
# The pms command, written by `pms.py setup`: {source}, started from its cached bytecode.
import gc
import sys

# Only as the command: a worker process (PDFs are read in one) runs this file again, as __mp_main__.
if __name__ == "__main__":
    gc.disable()  # while pms loads: reading its bytecode set off the collector in vain (about 2 ms)
    sys.path.insert(0, {folder!r})
    sys.argv[0] = "pms"  # messages then name `pms ...` (pms_command)
    try:
        from pms import main_and_exit
    except ModuleNotFoundError as exc:
        if exc.name != "pms":
            raise
        sys.exit("pms: " + {source!r} + " is gone (moved or deleted?); where it is now, run its setup --command-only")
    gc.enable()
    main_and_exit()
"""


def install_command(bin_dir: Path) -> Path:
    """Write the ``pms`` command into ``bin_dir`` and cache the bytecode of what runs now (pms.py,
    or the package's modules): Python never caches a script's, so ``pms`` imports it as a module,
    with this Python."""
    import importlib.util
    import py_compile

    source = source_path()
    try:
        for module in sorted(source.glob("*.py")) if source.is_dir() else [source]:
            py_compile.compile(str(module), cfile=importlib.util.cache_from_source(str(module)), doraise=True)
        # In pms.py the engine is a string that its last lines compile and cache (scripts/amalgamate.py): cached
        # here even where Python writes no bytecode (-B, PYTHONDONTWRITEBYTECODE), as py_compile does.
        engine_code = globals().get("_engine_code")
        if engine_code:
            engine_code(write=True)
    except (OSError, py_compile.PyCompileError) as exc:
        print(f"pms: cannot cache the bytecode of {source} ({exc}); the pms command works, compiling it on every run",
              file=sys.stderr)
    launcher = PMS_COMMAND_SCRIPT.format(source=str(source), folder=str(import_root()))
    try:
        bin_dir.mkdir(parents=True, exist_ok=True)
        if sys.platform == "win32":  # a batch file runs the script (its short compile is the price on Windows)
            (bin_dir / "pms-command.py").write_text(launcher, encoding="utf-8")
            command = bin_dir / "pms.cmd"
            command.write_text(f'@"{sys.executable}" "%~dp0pms-command.py" %*\r\n', encoding="utf-8")
        else:
            command = bin_dir / "pms"
            command.write_text(f"#!{sys.executable}\n{launcher}", encoding="utf-8")
            command.chmod(0o755)
    except OSError as exc:
        raise PMSError(f"cannot write the pms command into {bin_dir}: {exc.strerror or exc} (pass --bin-dir with a folder you can write)") from None
    return command


def _setup_command(bin_dir: Path | None) -> None:
    command = install_command(bin_dir or default_bin_dir())
    on_path = any(Path(folder).expanduser() == command.parent for folder in os.environ.get("PATH", "").split(os.pathsep) if folder)
    print(f"Installed the pms command: {command} (`pms search ...` runs {source_path()}, starting faster)"
          + ("" if on_path else f"; add {command.parent} to your PATH to type just `pms`"))


def setup_done_line(gui: bool) -> str:
    """What setup says at the end: what the packages bring, and how to start the app it installed."""
    brings = "hybrid search, clipping, PDFs, the MCP server" + (", the desktop app" if gui else "")
    start = f"; start the app with: {pms_command('gui')}" if gui else ""
    return f"Done: PMS now uses these packages ({brings}){start}. Remove the folder to undo."


def cmd_setup(args) -> int:
    """Create the private virtual environment with the optional extras, and the ``pms`` command."""
    import subprocess
    import venv

    if getattr(sys, "frozen", False):
        print("This packaged app already includes every extra (hybrid search, clipping, the desktop app).")
        return 0
    if args.command_only:
        _setup_command(args.bin_dir)
        return 0

    target = private_env_dir()
    packages = SETUP_PACKAGES + (SETUP_GUI_PACKAGES if args.gui else [])
    print(f"Setting up {target} with: {' '.join(packages)}")
    if not (target / ("Scripts" if sys.platform == "win32" else "bin")).exists():
        venv.EnvBuilder(with_pip=True).create(target)
    python = target / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    # The pip venv bundles on Python 3.11 does not match extra names as PEP 685 says: a newer one first.
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, SETUP_PIP], stdout=subprocess.DEVNULL)
    result = subprocess.run([*pip, *packages])
    if result.returncode != 0:
        raise PMSError(f"pip could not install the extras into {target} (see pip's message above)")
    (target / "pms-python-version.txt").write_text(f"python{sys.version_info.major}.{sys.version_info.minor}")
    print(setup_done_line(args.gui))
    _setup_command(args.bin_dir)
    return 0


def cmd_gui(kb: KnowledgeBase, args) -> int:
    """The desktop app (gui/app.py), over this same KnowledgeBase."""
    if not (module_available("PySide6") and module_available("markdown_it") and module_available("mdit_py_plugins")):
        raise PMSError("the desktop app needs PySide6 and markdown-it-py (pip install PySide6-Essentials "
                       f"markdown-it-py mdit-py-plugins, or run: {pms_command('setup --gui')})")
    sys.modules.setdefault("pms", sys.modules[__name__])  # run as a script, pms.py is __main__: the GUI's "import pms" must find it
    root = str(checkout_dir())
    if root not in sys.path:
        sys.path.insert(0, root)
    from gui.app import run

    return run(kb)


def _count_arg(text: str) -> int:
    """-n: a whole number of results, at least 1."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def _terminal_columns() -> int:
    """shutil.get_terminal_size().columns, without importing shutil (see build_parser)."""
    with contextlib.suppress(KeyError, ValueError):
        return int(os.environ["COLUMNS"])
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 80


class _UnusedCommand:
    """Stands in for the parser of a command that is not running: it accepts
    every add_argument() and builds nothing (see build_parser)."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: self


class _OnlyCommand:
    """The subparsers of build_parser(only=NAME): add_parser() builds NAME's parser alone."""

    def __init__(self, subparsers, only: str):
        self.subparsers, self.only = subparsers, only

    def add_parser(self, name: str, **kwargs):
        return self.subparsers.add_parser(name, **kwargs) if name == self.only else _UnusedCommand()


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser. ``only``: a command name whose parser alone is built, as when it runs
    (building them all is a cost at every start); else the full tree (``--help``, a typo)."""
    import argparse

    # Told the width, argparse's help formatter does not import shutil to ask for it.
    width: dict[str, _typing.Any] = {"width": _terminal_columns() - 2}
    raw_description = functools.partial(argparse.RawDescriptionHelpFormatter, **width)
    p = argparse.ArgumentParser(
        prog=pms_command("").strip(), formatter_class=raw_description,
        description="PMS: private, local search for folders of Markdown notes (keyword + meaning, offline).",
        epilog=f"Start: {pms_command(ADD_COLLECTION_ARGS)}; {pms_command('search')} \"what I remember\". "
               "Each command has --help. The index lives in the data folder unless --db or PMS_DB says otherwise.")
    p.add_argument("--db", help="index file (default: $PMS_DB or the platform data folder)")
    emb = p.add_argument_group("embedding server (instead of the built-in model; the index remembers it)")
    emb.add_argument("--embed-url", metavar="URL", help="an OpenAI-compatible or Ollama server, e.g. http://127.0.0.1:11434 ($PMS_EMBED_URL)")
    emb.add_argument("--embed-model", metavar="NAME", help="the model the server embeds with ($PMS_EMBED_MODEL)")
    emb.add_argument("--embed-api", choices=("openai", "ollama"), help="/v1/embeddings (default) or Ollama's /api/embed")
    emb.add_argument("--embed-key-env", metavar="VAR", help="environment variable holding the server's API key")
    emb.add_argument("--allow-remote-embedding", action="store_true",
                     help="allow a server off this machine: your notes' text is sent to it")
    p.add_argument("--version", action="version", version=f"pms {VERSION}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=functools.partial(  # type: ignore[call-overload]
        argparse.ArgumentParser, formatter_class=functools.partial(argparse.HelpFormatter, **width)))
    if only in COMMANDS or only == "setup":
        sub = _OnlyCommand(sub, only)

    col = sub.add_parser("collection", help="add, list, show, rename or remove collections (named folders of notes)",
                         description="Collections map a name to a folder and a glob. Removing one never touches its files.")
    csub = col.add_subparsers(dest="collection_command", metavar="ACTION")
    add = csub.add_parser("add", help="add a folder as a collection and index it")
    add.add_argument("path", help="the folder of notes")
    add.add_argument("--name", help="collection name (default: the folder's name)")
    add.add_argument("--glob", default=DEFAULT_GLOB, help=f"which files to index (default: {DEFAULT_GLOB})")
    add.add_argument("--description", default="", help="a note on what the collection holds")
    add.add_argument("--no-sync", action="store_true", help=f"only register it; index later with {pms_command('sync')}")
    add.add_argument("--no-embed", action="store_true", help="index for keyword search only, for now")
    add.add_argument("--exclude", action="append", metavar="GLOB",
                     help="never index these notes or folders (repeatable): 'drafts', '*.tmp.md', 'archive/2019/**'")
    add.add_argument("--force", action="store_true", help="add it even if another collection has this folder (or one around or inside it)")
    ls = csub.add_parser("list", help="list collections")
    ls.add_argument("--json", action="store_true")
    exc = csub.add_parser("exclude", help="set the globs of notes and folders a collection never indexes",
                          description="Replaces the collection's own list (none: no GLOB). A .pmsignore file at its root "
                                      "and Obsidian's excluded files apply as well.")
    exc.add_argument("name")
    exc.add_argument("globs", nargs="*", metavar="GLOB")
    show = csub.add_parser("show", help="details of one collection")
    show.add_argument("name")
    show.add_argument("--json", action="store_true")
    desc = csub.add_parser("describe", help="say what a collection (or one of its folders) holds; returned with every hit",
                           description="The description travels with every search hit (--json, MCP), so an agent knows "
                                       "that work/ is the team wiki and clips/ are saved web pages. An empty text removes it.")
    desc.add_argument("name", help="the collection")
    desc.add_argument("description", help="what it holds, in a few words")
    desc.add_argument("--folder", help="a folder inside the collection (default: the whole collection)")
    ren = csub.add_parser("rename", help="rename a collection")
    ren.add_argument("old")
    ren.add_argument("new")
    rm = csub.add_parser("remove", help="remove a collection from the index (files are untouched)")
    rm.add_argument("name")

    sy = sub.add_parser("sync", help="index new and changed notes, drop deleted ones, embed new passages",
                        description="Incremental: unchanged files are skipped by size and time, then by SHA-256.")
    sy.add_argument("-c", "--collection", action="append", help="only this collection (repeatable)")
    sy.add_argument("--dry-run", action="store_true", help="only say what would change")
    sy.add_argument("-v", "--verbose", action="store_true", help="with --dry-run: list the files")
    sy.add_argument("--no-embed", action="store_true", help="skip embeddings (keyword index only)")
    sy.add_argument("--reembed", action="store_true", help="drop all vectors and embed everything again (after a model change)")

    wa = sub.add_parser("watch", help="keep the index fresh: sync whenever notes change, until Ctrl+C",
                        description="Syncs now, then a second after notes are added, changed or deleted.")
    wa.add_argument("-c", "--collection", action="append", help="only this collection (repeatable)")

    st = sub.add_parser("status", help="collections, counts, pending changes, search mode, index path and size")
    st.add_argument("--json", action="store_true")

    se = sub.add_parser("search", help="search your notes", formatter_class=raw_description, description=(
        "Type words, not syntax: \"exact phrase\", -excluded, prefix*. Notes with every word rank first.\n"
        "Hybrid (keyword + meaning) when embeddings are available, keyword otherwise.\n\n"
        "Filters narrow any mode and still return -n results when that many notes match;\n"
        "with no words, the matching notes are listed newest first:\n"
        "  pms search rotate keys --tag work --tag security      both tags (#work/infra counts as #work)\n"
        "  pms search meeting --no-tag archive --path 'projects/**'\n"
        "  pms search --after 2024-01-01 --before 2024-03-31      notes dated in Q1 (frontmatter date, else mtime)\n"
        "  pms search --after 2w                                   the last two weeks (7d, 3m, 1y, today, yesterday)\n"
        "  pms search --after 2023 --before 2023-06               a year or month: its first or last day\n"
        "  pms search budget --where status=draft --where 'owner!=me' --where due\n"
        "  pms search --tag todo                                   every #todo note, newest first"))
    se.add_argument("query", nargs="*", help="what to look for (words starting with - exclude)")
    se.set_defaults(usage_error=se.error)  # nothing to search: usage, exit 2
    # -k as the API and MCP call it: typed here it would otherwise become "-k", an excluded word.
    se.add_argument("-n", "-k", type=_count_arg, default=10, help="number of results (default 10)")
    se.add_argument("-c", "--collection", action="append", help="only this collection (repeatable)")
    se.add_argument("--mode", choices=SEARCH_MODES, default="auto", help="auto (default): hybrid when available")
    out = se.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="machine-readable results")
    out.add_argument("--files", action="store_true", help="only the matching files' paths")
    se.add_argument("--passages", "--chunks", action="store_true", help="return passages, not one result per note (--chunks: the old name)")
    se.add_argument("--explain", action="store_true", help="show each hit's rank in the keyword, vector and name lists, and how they were fused")
    se.add_argument("--also", action="append", metavar="QUERY",
                    help="another phrasing searched in the same call, the lists fused (repeatable, up to 4)")
    se.add_argument("--intent", metavar="TEXT", default="", help="what you are after, in words: context for the meaning search")
    se.add_argument("--min-score", type=float, metavar="R",
                    help="only hits at least this relevant (0-1: the larger of meaning similarity and share of words held)")
    flt = se.add_argument_group("filters (all must hold)")
    # Each filter flag's dest is the NoteFilter field it sets (_filter_fields).
    flt.add_argument("--tag", action="append", dest="tags", metavar="TAG", help="notes with this tag, frontmatter or inline (repeatable: all of them)")
    flt.add_argument("--no-tag", action="append", dest="exclude_tags", metavar="TAG", help="leave out notes with this tag (repeatable)")
    flt.add_argument("--path", metavar="GLOB", help="a folder or glob inside the collection: projects, 'projects/**/*.md'")
    flt.add_argument("--after", metavar="DATE", help="notes dated on or after this day: YYYY-MM-DD, YYYY-MM, YYYY, today, 7d, 2w, 3m, 1y")
    flt.add_argument("--before", metavar="DATE", help="notes dated on or before this day (a month or year: its last day)")
    flt.add_argument("--where", action="append", metavar="KEY=VALUE",
                     help="frontmatter: KEY=VALUE, KEY!=VALUE, or KEY (has the field); repeatable")

    tg = sub.add_parser("tags", help="list tags (frontmatter and inline #tags) with their note counts")
    tg.add_argument("-c", "--collection", action="append", help="only this collection (repeatable)")
    tg.add_argument("--json", action="store_true")

    for name, what in (("links", "the notes NOTE links to ([[wikilinks]] and Markdown links), unresolved ones marked"),
                       ("backlinks", "the notes that link to NOTE")):
        lk = sub.add_parser(name, help=what)
        lk.add_argument("note", help="collection/path.md or #docid")
        lk.add_argument("--json", action="store_true", help="a list of {path, collection, title, ...}")

    rel = sub.add_parser("related", help="the notes closest in meaning to NOTE, with the passage that relates them",
                         description="From the note's passage vectors; without embeddings, from the rare terms notes share.")
    rel.add_argument("note", help="collection/path.md or #docid")
    rel.add_argument("-n", type=int, default=10, help="number of notes (default 10)")
    rel.add_argument("-c", "--collection", action="append", help="only in this collection (repeatable)")
    rel.add_argument("--json", action="store_true", help="machine-readable results (the search hit format)")
    rel.add_argument("--explain", action="store_true", help="show the scores")

    b = sub.add_parser("bench", help="measure search quality on judged queries: Hit@k, MRR, nDCG, recall, latency", description=(
        'FIXTURE is JSON: {"queries": [{"query": "...", "expected_files": ["a.md"], "expected_in_top_k": 3}]} '
        "(qmd's format) or graded, with relevant_paths (full credit) and partial_paths (half credit). "
        "Paths are collection-relative; a file name or stem is enough when only one note has it."))
    b.add_argument("fixture", help="the judged queries (JSON)")
    b.add_argument("-c", "--collection", action="append", help="only this collection (repeatable)")
    b.add_argument("--mode", action="append", choices=BENCH_MODES, help="only this mode (repeatable; default: all three)")
    b.add_argument("--json", action="store_true", help="metrics per mode and per query as JSON")

    g = sub.add_parser("get", help="print a note: collection/path.md[:FROM[:COUNT]] or #docid")
    g.add_argument("ref")
    g.add_argument("--json", action="store_true")
    g.add_argument("-l", "--line-numbers", action="store_true")
    g.add_argument("--max-bytes", type=int, metavar="N", help="print at most N bytes (whole lines), then say how to read on")

    op = sub.add_parser("open", help="open a note: in Obsidian when it is in an Obsidian vault, else in the system's app",
                        description="REF as get takes it: collection/path.md, #docid, or the file name alone. A note in a "
                                    "folder Obsidian opened as a vault (it holds .obsidian) opens in Obsidian.")
    op.add_argument("ref")
    op.add_argument("--no-obsidian", action="store_true", help="open it in the system's app even in an Obsidian vault")
    op.add_argument("--print", action="store_true", help="print the address that would be opened (obsidian:// or file://)")

    mg = sub.add_parser("multi-get", help="print several notes: a glob over collection/path.md or a comma list")
    mg.add_argument("pattern", help="e.g. 'notes/journal/2024-*.md' or 'notes/a.md,#3afed6'")
    mg.add_argument("--max-bytes", type=int, default=MULTI_GET_MAX_BYTES,
                    help=f"at most this many bytes in all; notes that do not fit are skipped (default {MULTI_GET_MAX_BYTES})")
    mg.add_argument("--json", action="store_true")

    d = sub.add_parser("demo", help="index the sample notes shipped with PMS and run a few searches",
                       description="Adds the sample notes to your index as the collection 'sample-notes' "
                                   "(remove it with: pms collection remove sample-notes).")
    d.add_argument("queries", nargs="*", help="queries to run instead of the built-in ones")
    d.add_argument("--mode", choices=SEARCH_MODES, default="auto")
    d.set_defaults(json=False, files=False, explain=False)

    cl = sub.add_parser("clip", help="save a web page or a PDF as a Markdown note in a collection (URL, saved page, PDF or -)",
                        description="Fetches the page (or reads a saved one), keeps the article as Markdown with "
                                    "YAML frontmatter, writes YYYY-MM-DD-<slug>.md and indexes it. A PDF (URL or file) "
                                    "becomes a note of its text, a section per page. Never overwrites.")
    cl.add_argument("source", help="an http(s) URL, a saved .html file, a .pdf file, or - for standard input")
    cl.add_argument("-c", "--collection", help="the collection to clip into (needed when there are several)")
    cl.add_argument("--url", help="the page's address, for a saved page or standard input")
    cl.add_argument("--subfolder", help="a folder inside the collection for the note (created if needed)")
    cl.add_argument("--force", action="store_true", help="clip even if the URL is already in the collection")
    cl.add_argument("--timeout", type=float, default=CLIP_TIMEOUT, help=f"seconds to wait for the site (default {CLIP_TIMEOUT:g})")
    cl.add_argument("--no-embed", action="store_true", help="index it for keyword search only, for now")
    cl.add_argument("--keep-pdf", action="store_true", help="a PDF: save the original beside its note as well")
    cl.add_argument("--json", action="store_true", help="print the new note's path and metadata as JSON")

    s = sub.add_parser("setup", help="install the optional extras (hybrid search, clipping) into a private environment, "
                                     "and the pms command", description=(
        "Installs fastembed, sqlite-vec, sqlean-py, trafilatura and mcp into a venv in the data folder, which later "
        "runs use by themselves, and writes the pms command (this file started from cached bytecode: a keyword "
        "search starts in half the time the script takes)."))
    s.add_argument("--gui", action="store_true", help="also install PySide6 and markdown-it-py for the desktop app")
    s.add_argument("--command-only", action="store_true", help="only write the pms command (no download)")
    s.add_argument("--bin-dir", type=Path, help="where to write the pms command (default: ~/.local/bin; Windows: the data folder's bin)")

    m = sub.add_parser("mcp", help="serve your notes to AI assistants (Claude, Cursor, VS Code) over MCP",
                       description="Stdio by default (what assistants launch); --http serves several clients at "
                                   "http://127.0.0.1:PORT/mcp. The model stays loaded, so searches are warm. "
                                   f"Needs the mcp package (pip install mcp, or: {pms_command('setup')}).")
    m.add_argument("--http", action="store_true", help="serve Streamable HTTP instead of stdio")
    m.add_argument("--port", type=int, default=MCP_DEFAULT_PORT, help=f"HTTP port (default {MCP_DEFAULT_PORT})")
    m.add_argument("--host", default="127.0.0.1", help="HTTP address to bind (default 127.0.0.1: this machine only)")
    m.add_argument("--token", help="HTTP: require 'Authorization: Bearer TOKEN' (or set PMS_MCP_TOKEN)")
    m.add_argument("--allow-sync", action="store_true", help="let clients re-index with the sync tool")
    m.add_argument("--session-idle", type=float, default=MCP_SESSION_IDLE, metavar="SECONDS",
                   help=f"HTTP: end a client's session after this long unused (default {MCP_SESSION_IDLE:g})")
    m.add_argument("--watch", action=argparse.BooleanOptionalAction, default=None,
                   help="sync when notes change on disk (default: on with --http, off for stdio)")
    m.add_argument("--timeout", type=float, default=MCP_CALL_TIMEOUT, metavar="SECONDS",
                   help=f"stop any tool call (but sync) after this long (default {MCP_CALL_TIMEOUT:g})")

    sub.add_parser("gui", help="open the desktop app: search as you type, read, clip by drag and drop",
                   description=f"Needs PySide6 (pip install PySide6-Essentials, or: {pms_command('setup --gui')}).")
    return p


COMMANDS = {"collection": cmd_collection, "sync": cmd_sync, "status": cmd_status, "search": cmd_search,
            "get": cmd_get, "open": cmd_open, "demo": cmd_demo, "clip": cmd_clip, "bench": cmd_bench,
            "gui": cmd_gui, "tags": cmd_tags, "links": cmd_links, "backlinks": cmd_links, "related": cmd_related,
            "multi-get": cmd_multi_get, "mcp": cmd_mcp, "watch": cmd_watch}


# Options of ``search`` that take a value: the value is never a "-word" exclusion.
SEARCH_VALUE_OPTIONS = {"-n", "-k", "-c", "--collection", "--mode", "--tag", "--no-tag", "--path", "--after", "--before", "--where", "--also", "--intent", "--min-score"}


GLOBAL_VALUE_OPTIONS = {"--db", "--embed-url", "--embed-model", "--embed-api", "--embed-key-env"}


def _embedding_choice(args) -> dict | None:
    """The embedding server the command line chooses for this index (None: as remembered, or the default)."""
    if not getattr(args, "embed_url", None):
        if getattr(args, "embed_model", None) or getattr(args, "embed_api", None):
            raise PMSError("--embed-model and --embed-api go with --embed-url (the embedding server's address)")
        return None
    env = embedding_choice_from_env() or {}
    return {"kind": args.embed_api, "url": args.embed_url, "model": args.embed_model or env.get("model") or "",
            "api_key_env": args.embed_key_env or env.get("api_key_env"),
            "allow_remote": bool(args.allow_remote_embedding or env.get("allow_remote"))}


def _command_position(argv: Sequence[str]) -> int | None:
    """Where the command word is: the first argument that is neither an option
    before it (--db PATH, --version) nor that option's value."""
    i = 0
    while i < len(argv):
        if argv[i] in GLOBAL_VALUE_OPTIONS:
            i += 2
        elif argv[i].startswith("-"):
            i += 1
        else:
            return i
    return None


# API arguments as the CLI spells them, for errors about them.
CLI_FLAGS = {"after": "--after", "before": "--before", "where": "--where", "tags": "--tag", "exclude_tags": "--no-tag",
             "path": "--path", "min_score": "--min-score", "max_bytes": "--max-bytes", "exclude": "--exclude"}


def cli_error(exc: PMSError) -> str:
    """An engine error worded for the command line: the argument it names becomes its flag."""
    text = str(exc)
    argument = getattr(exc, "argument", None) or ""
    flag = CLI_FLAGS.get(argument)
    if flag and text.startswith(argument):
        text = flag + text[len(argument):].removeprefix(":")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    use_private_env()
    argv = list(sys.argv[1:] if argv is None else argv)
    excluded = []
    at = _command_position(argv)
    asks_help = at is not None and ({"-h", "--help"} & set(argv[:at]))  # `pms --help search`: the whole list
    parser = build_parser(only=argv[at] if at is not None and not asks_help else None)
    if at is not None and argv[at] == "search":
        # "-word" in a query excludes a word; argparse would read -conflict as "-c onflict".
        known = {"-n", "-k", "-c", "-h"}
        keep = argv[: at + 1]
        for i, token in enumerate(argv[at + 1 :]):
            previous = argv[at + i] if i or at else ""
            if re.match(r"^-[^-\d]", token) and token not in known and previous not in SEARCH_VALUE_OPTIONS:
                excluded.append(token)
            else:
                keep.append(token)
        argv = keep
    args, extra = parser.parse_known_args(argv)
    extra = excluded + extra
    if args.command == "search":
        # "-word" excludes a word; argparse would take it for an option.
        args.query = " ".join([*args.query, *extra])
        if not args.query.strip() and not any(_filter_fields(args).values()):
            args.usage_error("nothing to search: give words, or a filter (--tag, --path, --after, --before, --where)")
    elif extra:
        parser.error(f"unrecognized arguments: {terminal_safe(' '.join(extra))}")
    if not args.command:
        parser.print_help()
        return 0
    if args.command == "collection" and not args.collection_command:
        parser.parse_args(["collection", "--help"])
    try:
        if args.command == "setup":
            return cmd_setup(args)
        # Opening the index reads it too: a damaged one is one line from the first query on.
        with storage_errors(Path(args.db).expanduser() if args.db else default_db_path()), \
                KnowledgeBase(args.db, notice=_notice, embedding=_embedding_choice(args),
                              chosen_by="--embed-url and --embed-model") as kb:
            return COMMANDS[args.command](kb, args)
    except PMSError as exc:
        print(f"pms: error: {cli_error(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        ProgressPrinter.end_line()
        indexing = args.command in ("sync", "collection", "demo", "watch")
        print("pms: interrupted" + (f" (what was done is kept; run: {pms_command('sync')} to finish)" if indexing else ""),
              file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:  # the file system refused something no check above words (a name too long, say)
        where = f": {error_excerpt(display_path(exc.filename), 200)}" if exc.filename else ""
        print(f"pms: error: {exc.strerror or one_line(exc) or type(exc).__name__}{where}", file=sys.stderr)
        return 1
    except Exception as exc:  # a bug: one line, not a traceback (PMS_DEBUG=1 shows it)
        if os.environ.get("PMS_DEBUG"):
            raise
        print(f"pms: internal error (a bug in PMS: please report it; PMS_DEBUG=1 shows where): {type(exc).__name__}: "
              f"{(one_line(exc) or '')[:300]}", file=sys.stderr)
        return 2


# Commands that run until stopped, and whose libraries (Qt, the MCP server) clean up at exit.
LONG_RUNNING_COMMANDS = {"gui", "mcp"}


def main_and_exit(argv: Sequence[str] | None = None) -> _typing.NoReturn:
    """``main()``, then end the process at once, output flushed: Python's own teardown is a
    cost on every command. A long-running command, or one that left a thread, exits the usual way."""
    argv = list(sys.argv[1:] if argv is None else argv)
    at = _command_position(argv)
    code = main(argv)  # argparse's SystemExit (--help, a usage error) exits the usual way
    if (at is not None and argv[at] in LONG_RUNNING_COMMANDS) or threading.active_count() > 1:
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe (| head) has nothing more to receive
            stream.flush()
    os._exit(code)
