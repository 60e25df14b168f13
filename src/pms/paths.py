"""Folders and files: globs, exclusions, walking a collection, reading one file safely.

Owns: ``compile_glob`` (``**``, braces, classes; bounded), path filters, ``Exclusions``
(``--exclude``, ``.pmsignore``, Obsidian's excluded files), ``walk_markdown`` (what a
collection holds, with the reason for each file left out) and ``read_note_file``
(regular files only, within the size limit), and ``obsidian_url`` (how Obsidian opens
a note of one of its vaults).

May import: config, markdown, pdf.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import os
import re
import stat as _stat
import threading
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path

from .config import SKIP_DIRS, PMSError, display_path, error_excerpt, is_valid_utf8, max_file_bytes
from .markdown import FileTooLargeError
from .pdf import PDF_SUFFIX


# Globs are matched by hand, not as one regular expression (which backtracks on its
# stars): folder by folder, a run of '*' is one star, and the fixed pieces between a
# folder's stars are found at their leftmost places, which is always right (linear).
# The pattern's length and its {a,b} expansions are capped.
GLOB_MAX_CHARS = 512
GLOB_MAX_ALTERNATIVES = 64


class _GlobFolder:
    """One folder's part of a glob: fixed pieces (each a list of one-character
    regexes: literals, '?', classes) with a star between each two."""

    def __init__(self, pieces: list[list[str]]):
        self.pieces = [(re.compile("".join(p), re.I | re.S), len(p)) for p in pieces]
        self.starred = len(pieces) > 1
        # At most one star ("*.md", every collection's default): the whole name is one regex, which
        # with one '.*' cannot backtrack much (what the piece-by-piece match below is for).
        self.regex = ".*".join("".join(p) for p in pieces) if len(pieces) <= 2 else None

    def match(self, name: str) -> bool:
        if not self.starred:
            return self.pieces[0][0].fullmatch(name) is not None
        (first, first_len), *middle, (last, last_len) = self.pieces
        end = len(name) - last_len
        if end < first_len or not first.match(name, 0, first_len):
            return False
        pos = first_len
        for piece, _ in middle:  # leftmost is right: the next star takes up whatever is skipped
            m = piece.search(name, pos, end)
            if not m:
                return False
            pos = m.end()
        return last.fullmatch(name, end) is not None


class GlobPattern:
    """A compiled glob (``**/``, ``*``, ``?``, ``[..]``, ``[!..]``, ``{a,b}``),
    case-insensitive; ``match(path)`` is True when the whole path matches."""

    def __init__(self, pattern: str, alternatives: list[list[_GlobFolder | None]]):
        self.pattern, self.alternatives = pattern, alternatives
        # "**/X" (every collection's default "**/*.md"): X against the file name alone, what
        # _match_folders would find (a sync or status matches every file of the vault).
        self._names_only = [folders[1] for folders in alternatives if len(folders) == 2 and folders[0] is None and folders[1]]
        # ... and when each has at most one star ("**/*.md" and the PDFs' "**/*.pdf" a sync walks with),
        # one regex for them all: a sync or status asks for every file of the vault.
        sources = [folder.regex for folder in self._names_only]
        self._name_regex = (re.compile("|".join(f"(?:{source})" for source in sources), re.I | re.S)
                            if len(sources) == len(alternatives) and None not in sources else None)

    def name_matcher(self):
        """``fullmatch`` on a file's name alone, when the whole glob is a file-name glob under
        ``**/`` ("**/*.md"), else None: a walk that knows the name skips building the path."""
        return self._name_regex.fullmatch if self._name_regex is not None else None

    def match(self, path: str) -> bool:
        if self._name_regex is not None:
            return self._name_regex.fullmatch(path.rsplit("/", 1)[-1]) is not None
        if len(self._names_only) == len(self.alternatives):
            name = path.rsplit("/", 1)[-1]
            return any(folder.match(name) for folder in self._names_only)
        names = path.split("/")
        return any(_match_folders(folders, names) for folders in self.alternatives)

    def __repr__(self) -> str:
        return f"GlobPattern({self.pattern!r})"


def _match_folders(folders: list[_GlobFolder | None], names: list[str]) -> bool:
    """The glob's folders against the path's names: a set of positions in the
    glob, advanced name by name (``**`` stays or moves on): no backtracking."""
    def closure(states: set[int]) -> set[int]:
        out, todo = set(), list(states)
        while todo:
            i = todo.pop()
            if i not in out:
                out.add(i)
                if i < len(folders) and folders[i] is None:
                    todo.append(i + 1)
        return out

    states = closure({0})
    for name in names:
        nxt = set()
        for i in states:
            if i < len(folders):
                if folders[i] is None:
                    nxt.add(i)
                elif folders[i].match(name):
                    nxt.add(i + 1)
        states = closure(nxt)
        if not states:
            return False
    return len(folders) in states


class _BadGlob(ValueError):
    pass


def compile_glob(pattern: str, argument: str = "pattern") -> GlobPattern:
    """A glob as a GlobPattern; a PMSError "bad pattern for ARGUMENT: …" when it
    is malformed (``[z-a]``, ``[]``), too long or expands to too many alternatives."""
    try:
        if len(pattern) > GLOB_MAX_CHARS:
            raise _BadGlob(f"longer than {GLOB_MAX_CHARS} characters")
        alternatives = [_glob_folders(alt) for alt in _expand_braces(pattern)]
    except _BadGlob as exc:
        raise PMSError(f"bad pattern for {argument}: {error_excerpt(pattern)} ({exc})") from None
    return GlobPattern(pattern, alternatives)


def _expand_braces(pattern: str) -> list[str]:
    """``a{b,c}d`` -> ['abd', 'acd'], each pair of braces in turn (not nested)."""
    start = pattern.find("{")
    end = pattern.find("}", start + 1) if start >= 0 else -1
    if start < 0 or end < 0:
        return [pattern]
    if "{" in pattern[start + 1 : end]:
        raise _BadGlob("braces inside braces")
    out = []
    for rest in _expand_braces(pattern[end + 1 :]):
        for alt in pattern[start + 1 : end].split(","):
            out.append(pattern[:start] + alt + rest)
            if len(out) > GLOB_MAX_ALTERNATIVES:
                raise _BadGlob(f"more than {GLOB_MAX_ALTERNATIVES} alternatives in braces")
    return out


def _glob_folders(pattern: str) -> list[_GlobFolder | None]:
    """One brace-free glob as its folders; a trailing ``**`` needs at least one name."""
    tokens = _glob_tokens(pattern)
    folders: list[_GlobFolder | None] = []
    current: list[str] = []
    for token in tokens + ["/"]:
        if token != "/":
            current.append(token)
            continue
        if current == ["**"]:
            if not folders or folders[-1] is not None:  # **/**/ is one **/
                folders.append(None)
        else:
            if current[:1] == ["**"]:  # '**.md': any folders, then '*.md'
                folders.append(None)
            folders.append(_glob_folder(current))
        current = []
    if folders and folders[-1] is None:
        folders.append(_glob_folder(["*"]))  # 'journal/**' is everything inside journal, not journal itself
    return folders


def _glob_tokens(pattern: str) -> list[str]:
    """'/', '*' (a run of stars; '**' alone stays '**'), or a regex for one character."""
    tokens, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            j = i
            while j < len(pattern) and pattern[j] == "*":
                j += 1
            tokens.append("**" if j - i >= 2 else "*")
            i = j
            continue
        if c == "?":
            tokens.append(".")
        elif c == "[" and pattern.find("]", i + 1) >= 0:
            i, token = _glob_class(pattern, i)
            tokens.append(token)
        elif c == "/":
            tokens.append("/")
        else:
            tokens.append(re.escape(c))
        i += 1
    return tokens


def _glob_class(pattern: str, i: int) -> tuple[int, str]:
    """``[..]`` at ``i`` -> (index of its ']', a regex class); ranges checked."""
    j = pattern.find("]", i + 1)
    body = pattern[i + 1 : j]
    negate = body[:1] in ("!", "^")
    body = body[1:] if negate else body
    if not body:
        raise _BadGlob(f"empty class {pattern[i : j + 1]}")
    parts, k = [], 0
    while k < len(body):
        if k + 2 < len(body) and body[k + 1] == "-":
            lo, hi = body[k], body[k + 2]
            if lo > hi:
                raise _BadGlob(f"the range {lo}-{hi} is backwards")
            parts.append(f"{re.escape(lo)}-{re.escape(hi)}")
            k += 3
        else:
            parts.append(re.escape(body[k]))
            k += 1
    return j, "[" + ("^/" if negate else "") + "".join(parts) + "]"


def _glob_folder(tokens: list[str]) -> _GlobFolder:
    """A folder's tokens (a '**' inside a name is a '*') as fixed pieces around stars."""
    pieces: list[list[str]] = [[]]
    for token in tokens:
        if token not in ("*", "**"):
            pieces[-1].append(token)
        elif pieces[-1] or len(pieces) == 1:  # '*' right after '*' adds nothing
            pieces.append([])
    return _GlobFolder(pieces)


class _FolderPrefix:
    """A --path that is no glob: that file, or everything in or under that folder."""

    def __init__(self, prefix: str):
        self.prefix = prefix.lower()

    def match(self, path: str) -> bool:
        path = path.lower()
        return not self.prefix or path == self.prefix or path.startswith(self.prefix + "/")


@functools.lru_cache(maxsize=64)
def path_filter(pattern: str) -> GlobPattern | _FolderPrefix:
    """A --path filter: a glob, or a folder or file name meaning everything in or
    under it; a bad glob is a PMSError naming ``path``."""
    pattern = pattern.strip().replace("\\", "/").lstrip("/")
    if not re.search(r"[*?\[{]", pattern):
        return _FolderPrefix(pattern.rstrip("/"))
    return compile_glob(pattern, "path")


def path_prefix_glob(pattern: str | None) -> str | None:
    """For a --path filter that names a folder (no glob: ``src/ch04`` is everything in
    src/ch04/), the glob of the names that start with it (``src/ch04*``), which a user
    whose filter matched nothing may have meant; None for a glob or no filter."""
    if not pattern or not isinstance(path_filter(pattern), _FolderPrefix):
        return None
    return pattern.strip().rstrip("/") + "*"


def path_matches(pattern: str, path: str) -> int:
    return 1 if path_filter(pattern).match(path or "") else 0


def is_skipped_folder(name: str) -> bool:
    """Folders never indexed (nor watched): hidden ones and SKIP_DIRS."""
    return name.startswith(".") or name in SKIP_DIRS


class Exclusions:
    """Which notes of a collection are never indexed: its own ``--exclude`` globs, the
    lines of a ``.pmsignore`` file at its root, and Obsidian's "Excluded files"
    (``.obsidian/app.json``, ``userIgnoreFilters``). A glob without '/' matches a
    file or folder name at any depth (``drafts``, ``*.tmp.md``); with '/', a path
    from the collection's root (``archive/2019/**``); a trailing '/' only folders.
    Obsidian's filters are path prefixes (``Templates/``), as Obsidian reads them."""

    IGNORE_FILE_MAX_LINES = 1000  # patterns read from .pmsignore (a generated file of more is no ignore list)
    IGNORE_FILE_MAX_BYTES = 1 << 20  # and bytes: reading is bounded
    WARNINGS_MAX = 10  # lines that cannot be read, named one by one

    def __init__(self, root: Path, own: Sequence[str] = ()):
        self.sources: dict[str, list[str]] = {"exclude": [g for g in own if g.strip()]}
        # One line each for what cannot be read (file and line named): a bad line
        # excludes nothing and never stops a sync; sync and status show these.
        self.warnings: list[str] = []
        self._globs: list[tuple[GlobPattern, bool]] = []
        for glob in self.sources["exclude"]:  # checked when set: never a warning
            with contextlib.suppress(PMSError):
                self._add(glob)
        ignore = root / ".pmsignore"
        data: bytes | None = None
        try:
            with open(ignore, "rb") as handle:
                data = handle.read(self.IGNORE_FILE_MAX_BYTES)
        except FileNotFoundError:
            pass
        except OSError as exc:
            self.warnings.append(f"{display_path(ignore)}: cannot read ({exc.strerror or exc}); nothing is excluded by it")
        patterns: list[str] = []
        for number, raw in enumerate((data or b"").split(b"\n"), 1):
            try:
                line: str | None = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                line = None
            if line is not None and (not line or line.startswith("#")):
                continue
            where = f"{display_path(ignore)}:{number}"
            if len(self.warnings) == self.WARNINGS_MAX:
                self.warnings.append(f"{display_path(ignore)}: more lines cannot be read; only the first {self.WARNINGS_MAX} are named")
                break
            if len(patterns) == self.IGNORE_FILE_MAX_LINES:
                self.warnings.append(f"{where}: only the first {self.IGNORE_FILE_MAX_LINES} patterns are read; this line and those below are ignored")
                break
            if line is None:
                self.warnings.append(f"{where}: not valid UTF-8; the line is ignored")
            elif line.startswith("!"):
                self.warnings.append(f"{where}: {error_excerpt(line)}: '!' (include again) is not supported; the line is ignored")
            else:
                try:
                    self._add(line, ".pmsignore")
                    patterns.append(line)
                except PMSError as exc:
                    self.warnings.append(f"{where}: {exc}; the line is ignored")
        if data is not None:
            self.sources[".pmsignore"] = patterns
        settings = root / ".obsidian" / "app.json"
        try:
            import json

            filters = json.loads(settings.read_text(encoding="utf-8")).get("userIgnoreFilters")
            if isinstance(filters, list):
                self.sources["obsidian"] = [f for f in filters if isinstance(f, str) and f.strip()][: self.IGNORE_FILE_MAX_LINES]
        except FileNotFoundError:
            pass
        except OSError as exc:
            self.warnings.append(f"{display_path(settings)}: cannot read ({exc.strerror or exc}); Obsidian's excluded files are not applied")
        except (ValueError, AttributeError):
            self.warnings.append(f"{display_path(settings)}: not a JSON object; Obsidian's excluded files are not applied")
        self._prefixes = tuple(f.strip().lstrip("/").lower() for f in self.sources.get("obsidian", []))

    def _add(self, glob: str, source: str = "exclude") -> None:
        """One exclusion glob; a PMSError for a malformed one."""
        glob = glob.strip()
        folders_only = glob.endswith("/")
        glob = glob.strip("/")
        if glob:
            try:
                compiled = compile_glob(glob if "/" in glob else "**/" + glob, source)
            except PMSError:
                compile_glob(glob, source)  # a bad one named as written, not as '**/glob'
                raise
            self._globs.append((compiled, folders_only))

    def __bool__(self) -> bool:
        return bool(self._globs or self._prefixes)

    def folder(self, rel: str) -> bool:
        """Is the folder ``rel`` ('a/b', no trailing '/') left out?"""
        low = rel.lower() + "/"
        return (any(regex.match(rel) for regex, _ in self._globs)
                or any(low.startswith(p if p.endswith("/") else p + "/") or low.startswith(p) for p in self._prefixes))

    def file(self, rel: str) -> bool:
        """Is the note ``rel`` left out (by a glob on it, or on a folder above it)?"""
        if any(regex.match(rel) for regex, folders_only in self._globs if not folders_only):
            return True
        low = rel.lower()
        if any(low.startswith(p) for p in self._prefixes):
            return True
        parts = rel.split("/")[:-1]
        return any(self.folder("/".join(parts[: i + 1])) for i in range(len(parts)))


def inside(path: str | os.PathLike, real_root: str) -> bool:
    """Does ``path``, symlinks resolved, stay inside the folder ``real_root`` (itself resolved)?"""
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


OUTSIDE = "skipped: a symlink that leads outside the collection's folder"
BAD_NAME = "skipped: its name is not valid UTF-8 (rename it to index it)"
NOT_REGULAR_FILE = "not a regular file (a named pipe, device or socket)"
NOT_REGULAR = f"skipped: {NOT_REGULAR_FILE}"
BAD_FOLDER_NAME = "skipped: the folder's name is not valid UTF-8 (rename it to index its notes)"


_UNKNOWN = object()  # ObsidianVaults: no fresh answer kept


class ObsidianVaults:
    """Which Obsidian vault a file is in: the nearest folder above it that holds ``.obsidian``
    (Obsidian makes it when it opens a folder as a vault), whether that folder is a
    collection's root, above it (a collection of a vault's subfolder) or below it (a
    collection of several vaults). What a folder holds is looked at once per ``KEPT_SECONDS``
    (a search's hits share their folders; a vault opened later is seen that much later)."""

    KEPT_SECONDS = 30.0
    KEPT_FOLDERS = 4096  # more, and the answers are dropped and looked at again
    MAX_DEPTH = 64  # folders above a file looked at, at most

    def __init__(self) -> None:
        self._holds_vault: dict[str, tuple[float, bool]] = {}  # folder -> (when looked, holds .obsidian)
        self._vault_of: dict[str, tuple[float, str | None]] = {}  # a file's folder -> (when found, its vault)
        self._lock = threading.Lock()

    def _kept(self, table: dict, key: str, now: float):
        """``table``'s answer for ``key`` while it is fresh, else ``_UNKNOWN``."""
        known = table.get(key)
        return known[1] if known is not None and now - known[0] < self.KEPT_SECONDS else _UNKNOWN

    def _keep(self, table: dict, key: str, now: float, answer):
        with self._lock:
            if len(table) >= self.KEPT_FOLDERS:
                table.clear()
            table[key] = (now, answer)
        return answer

    def _is_vault(self, folder: str, now: float) -> bool:
        known = self._kept(self._holds_vault, folder, now)
        if known is _UNKNOWN:
            return self._keep(self._holds_vault, folder, now, os.path.isdir(os.path.join(folder, ".obsidian")))
        return known

    def vault_of(self, path: str) -> str | None:
        """The vault folder ``path`` (an absolute file path) is in, or None."""
        now = time.monotonic()
        start = os.path.dirname(path)
        known = self._kept(self._vault_of, start, now)  # a search's hits: one look each, the folders above them once
        return self._keep(self._vault_of, start, now, self._find_vault(start, now)) if known is _UNKNOWN else known

    def _find_vault(self, folder: str, now: float) -> str | None:
        for _ in range(self.MAX_DEPTH):
            if self._is_vault(folder, now):
                return folder
            parent = os.path.dirname(folder)
            if parent == folder:
                return None
            folder = parent
        return None

    def url(self, path: str) -> str:
        """``obsidian://open?path=…`` for a file in a vault (Obsidian finds the vault by the path
        and opens the note, or a PDF, in it); "" for a file in none."""
        return "obsidian://open?path=" + urllib.parse.quote(path, safe="") if self.vault_of(path) else ""


obsidian_vaults = ObsidianVaults()  # one per process: every KnowledgeBase's hits share what it has seen


def pdf_glob(pattern: str) -> str:
    """Which PDFs a collection holds: its glob with the file extension made .pdf
    (``**/*.md`` -> ``**/*.pdf``); a glob without one (``**/*``) already names them."""
    return re.sub(r"\.(\{[^{}/]*\}|[^./*?{}\[\]]+)\Z", PDF_SUFFIX, pattern)


_entry_name = operator.attrgetter("name")


def walk_markdown(root: Path, pattern: str, errors: list | None = None,
                  skipped: list | None = None, exclude: Exclusions | None = None,
                  also: str | None = None) -> Iterator[tuple[str, str, os.stat_result]]:
    """Yield (relative posix path, absolute path, stat) of files matching ``pattern``
    (or the glob ``also``: a collection's PDFs); paths are plain strings (speed).

    Skips hidden folders, SKIP_DIRS and what ``exclude`` leaves out; follows
    symlinks that stay inside ``root``, never loops (each real folder is visited
    once). Unreadable folders go to ``errors``; symlink loops, symlinks leading
    outside ``root`` and names that are not UTF-8 (which the index cannot store)
    go to ``skipped``, as (path, why).
    """
    errors = [] if errors is None else errors
    skipped = errors if skipped is None else skipped
    regex = compile_glob(pattern, "--glob")
    if also and also != pattern:
        regex = GlobPattern(f"{pattern} or {also}", regex.alternatives + compile_glob(also, "--glob").alternatives)
    real_root = os.path.realpath(root)
    # os.scandir by hand, not os.walk: each entry's kind comes with the listing, its path is built
    # once and relative paths grow a folder at a time (no relpath, join or islink per folder); a
    # vault of 50,000 folders is walked in half the time. Folders are visited in os.walk's order
    # (a folder's files, then its subfolders, depth first, names sorted), from a stack: no recursion limit.
    # A folder is known by its inode, which the listing gives without a system call (a folder
    # reached by a symlink is stat'ed); two folders with one inode are the same folder (a loop)
    # only if samefile says so: another device may reuse the number.
    excluding = bool(exclude)
    match_name = regex.name_matcher()
    seen: dict[int, list[str]] = {}
    try:
        root_inode = os.stat(root).st_ino
    except OSError:
        return
    # (folder, its path from root + '/', reached by a symlink, its inode or None: _listed_inode)
    stack: list[tuple[str, str, bool, int | None]] = [(str(root), "", False, root_inode)]
    while stack:
        folder, rel_dir, via_link, inode = stack.pop()
        if inode is None:
            try:
                inode = os.stat(folder).st_ino
            except OSError:
                continue
        same_inode = seen.setdefault(inode, [])
        # A link to a folder that holds it is a loop whatever the inodes say (a listing's
        # numbers may differ from stat's, as on overlayfs).
        if (via_link and inside(os.path.dirname(folder), os.path.realpath(folder))) or (
                same_inode and any(_same_folder(other, folder) for other in same_inode)):
            skipped.append((display_path(folder), "symlink loop: folder already indexed, skipped"))
            continue
        same_inode.append(folder)
        if via_link and not inside(folder, real_root):
            skipped.append((display_path(folder), OUTSIDE))
            continue
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except FileNotFoundError:
            continue  # gone since its parent was listed
        except OSError as exc:
            errors.append((getattr(exc, "filename", None) or folder, f"cannot read folder: {exc.strerror or exc}"))
            continue
        entries.sort(key=_entry_name)  # os.walk's order: names sorted
        folders: list[os.DirEntry] = []
        for entry in entries:
            name = entry.name
            try:
                if entry.is_dir():  # a symlink to a folder too, as os.walk(followlinks=True); no system call
                    folders.append(entry)
                    continue
            except OSError:
                pass
            # The per-file steps below run for every file of the vault at every sync: each test is
            # the cheapest first (a file-name glob matched on the name, no path built for a miss).
            if name[0] == "." or (match_name(name) is None if match_name else not regex.match(rel_dir + name)):
                continue
            rel = rel_dir + name
            if excluding and exclude.file(rel):  # type: ignore[union-attr]
                continue
            if not name.isascii() and not is_valid_utf8(name):
                skipped.append((display_path(entry.path), BAD_NAME))
                continue
            try:
                st = entry.stat(follow_symlinks=False)
                if _stat.S_ISLNK(st.st_mode):
                    full = entry.path
                    if not inside(full, real_root):
                        skipped.append((display_path(full), OUTSIDE))
                        continue
                    st = os.stat(full)
            except OSError as exc:
                errors.append((entry.path, f"cannot read: {exc.strerror or exc}"))
                continue
            if not _stat.S_ISREG(st.st_mode):
                skipped.append((display_path(entry.path), NOT_REGULAR))
                continue
            yield rel, entry.path, st
        folders = [e for e in folders if not is_skipped_folder(e.name)]
        if not all(e.name.isascii() or is_valid_utf8(e.name) for e in folders):
            skipped.extend((display_path(e.path), BAD_FOLDER_NAME) for e in folders if not is_valid_utf8(e.name))
            folders = [e for e in folders if is_valid_utf8(e.name)]
        if excluding:
            folders = [e for e in folders if not exclude.folder(rel_dir + e.name)]  # type: ignore[union-attr]
        stack.extend((e.path, f"{rel_dir}{e.name}/", e.is_symlink(), _listed_inode(e)) for e in reversed(folders))


def _listed_inode(entry: os.DirEntry) -> int | None:
    """A listed folder's inode, as the listing gives it (POSIX: no system call); None for a
    symlink (the link's own inode, not its folder's) or when it cannot be read: then stat'ed."""
    try:
        return None if entry.is_symlink() else entry.inode()
    except OSError:
        return None


def _same_folder(one: str, other: str) -> bool:
    try:
        return os.path.samefile(one, other)
    except OSError:
        return False


# SQLite's INTEGER is 64-bit signed: a file dated past 2262 (mtime in ns) does not fit.
SQLITE_INT_MAX = 2**63 - 1


def file_state(st: os.stat_result) -> tuple[int, int, int]:
    """(size, mtime_ns, ctime_ns) of a file, clamped to what SQLite can store."""
    size, mtime, ctime = st.st_size, st.st_mtime_ns, st.st_ctime_ns
    if size <= SQLITE_INT_MAX and -SQLITE_INT_MAX <= mtime <= SQLITE_INT_MAX and -SQLITE_INT_MAX <= ctime <= SQLITE_INT_MAX:
        return size, mtime, ctime  # every file of this century: no clamping to do (a re-sync asks for each)
    return (max(-SQLITE_INT_MAX, min(SQLITE_INT_MAX, size)), max(-SQLITE_INT_MAX, min(SQLITE_INT_MAX, mtime)),
            max(-SQLITE_INT_MAX, min(SQLITE_INT_MAX, ctime)))


class NotRegularFileError(PMSError, OSError):
    """A named pipe, device or socket where a note was: never read (it could block forever)."""


def open_regular_file(path: Path):
    """``open(path, "rb")`` that never blocks: opened non-blocking and checked
    with fstat, a named pipe (or device, socket) is a NotRegularFileError."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        if not _stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFileError(NOT_REGULAR_FILE)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_note_file(path: Path, limit: int | None = None) -> bytes:
    """Read a note's bytes, refusing files over the size limit (PMS_MAX_FILE_MB)
    and anything but a regular file: opened without blocking, checked with fstat."""
    limit = limit or max_file_bytes()
    with open_regular_file(path) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise FileTooLargeError(f"skipped: larger than {limit // (1024 * 1024)} MB (raise PMS_MAX_FILE_MB to index it)")
    return data
