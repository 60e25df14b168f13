"""Web clipper: URL / saved page / stdin -> Markdown note in a collection, indexed at once.

Real pages from ../shared/data/html are served by a local http.server on
127.0.0.1; the failure cases (timeouts, redirects, PDFs, huge pages...) come
from the same server. No network beyond localhost.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, SHARED_HTML, Handler, article, model_dir, run_cli  # noqa: F401  (server: a fixture in conftest)

import pms

pytest.importorskip("trafilatura", reason="clipping needs trafilatura (bash scripts/test.sh installs it)")



@pytest.fixture
def shared_html():
    if not SHARED_HTML.is_dir():
        pytest.skip(f"saved web pages not found at {SHARED_HTML} (evaluation data ships with the project's CI, not with a clone)")
    return SHARED_HTML


@pytest.fixture
def clips(kb, tmp_path):
    """An empty collection named 'clips' in a keyword-only index."""
    folder = tmp_path / "clips"
    folder.mkdir()
    return kb.collections.create(folder, name="clips")


def md_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def fences(markdown: str) -> list[tuple[str, str]]:
    """(info string, code) of each fenced block."""
    return [(m.group(2), m.group(3)) for m in re.finditer(r"^(`{3,})([^\n`]*)\n(.*?)\n\1$", markdown, re.M | re.S)]


def frontmatter(note: Path) -> tuple[dict, dict, str]:
    """(PyYAML's reading, the engine's own reading, body) of a note."""
    yaml = pytest.importorskip("yaml")
    block, body, _ = pms.split_frontmatter(note.read_text(encoding="utf-8"))
    return yaml.safe_load(block), pms.parse_frontmatter(block), body


# -- file names ---------------------------------------------------------------------------
HOSTILE_TITLES = ["../../../etc/passwd", "..\\..\\Windows\\System32\\drivers", "CON", "nul", "com1", "LPT9", "aux.txt",
                  "  trailing dots...  ", "...", "..", "/", "a/b\\c:d*e?f\"g<h>i|j", "\x00\x1f\x7f control", "x" * 300,
                  "Ünïcödé naïve café — déjà vu", "Подольски завершил карьеру", "中文标题", "😀 emoji 🚀 title", "",
                  "-leading-dash", "~/home", "$HOME %APPDATA%", "name.md", "CON.md"]


@pytest.mark.parametrize("title", HOSTILE_TITLES)
def test_slug_is_safe_on_every_os(title):
    slug = pms.clip.clip_slug(title)
    assert re.fullmatch(r"([a-z0-9]+(-[a-z0-9]+)*)?", slug), slug
    assert len(slug) <= pms.clip.CLIP_SLUG_CHARS
    assert slug not in pms.clip.WINDOWS_RESERVED_NAMES
    name = pms.clip_filename(title, "https://example.org/2024/some-post.html")
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}-[a-z0-9]+(-[a-z0-9]+)*\.md", name), name


def test_slug_folds_to_ascii_and_falls_back_on_the_url():
    assert pms.clip.clip_slug("Ünïcödé naïve café — déjà vu") == "unicode-naive-cafe-deja-vu"
    assert pms.clip_filename("Подольски", "https://football.ua/germany/311510-podolski.html").endswith("-311510-podolski.md")
    assert pms.clip_filename("中文", "https://news.qq.com/").endswith("-news-qq-com.md")
    assert pms.clip_filename("中文").endswith("-clipped-page.md")
    long = pms.clip.clip_slug("word " * 40)
    assert len(long) <= 80 and long.endswith("word")  # cut at a word boundary


@pytest.mark.parametrize("title", ["../../../outside", "..\\..\\outside", "CON", "/etc/cron.d/x", "a/../../b"])
def test_hostile_title_never_writes_outside_the_collection(kb, clips, tmp_path, title):
    note = clips.clip("https://example.org/post", html=article(title))
    assert note.path.parent == clips.path
    assert note.path.resolve().is_relative_to(clips.path.resolve())
    assert [p.parent for p in tmp_path.rglob("*.md")] == [clips.path]
    assert not Path("/etc/cron.d/x.md").exists() and not (tmp_path.parent / "outside.md").exists()


# -- the note -----------------------------------------------------------------------------
NASTY = ["It's: a \"quoted\" #title", "- starts like a list", "null", "yes", "2020-01-01", "@at & *star {brace} [x] %pct",
         "line one\nline two\ttab", "back\\slash \\n not a newline", "émoji 😀 and ünïcode", "\x07bell\u200bzero-width\ufeff",
         "ends with colon:", "'single'", "''", " spaced  out "]


@pytest.mark.parametrize("value", NASTY)
def test_frontmatter_parses_the_same_with_pyyaml_and_the_engine(value):
    page = pms.ExtractedPage(content="# T\n\nBody text.\n", title=value, author=value, description=value,
                             site="Site", published="2020-01-01", lang="en")
    text = pms.clip.render_clip_note(page, "https://example.org/a?b=1&c='2'#frag", clipped="2026-01-02T03:04:05+00:00")
    yaml = pytest.importorskip("yaml")
    block, body, _ = pms.split_frontmatter(text)
    by_yaml, by_engine = yaml.safe_load(block), pms.parse_frontmatter(block)
    assert by_yaml == by_engine
    assert by_yaml["title"] == pms.clip.one_line(value)
    assert "\n" not in by_yaml["title"] and all(ch.isprintable() for ch in by_yaml["title"])
    assert by_yaml["source"] == "https://example.org/a?b=1&c='2'#frag"
    assert by_yaml["published"] == "2020-01-01" and by_yaml["clipped"] == "2026-01-02T03:04:05+00:00"
    assert by_yaml["sha256"] == hashlib.sha256(body.encode()).hexdigest()
    # an empty title is not written, so the note's H1 names it
    assert pms.notes.parse_note(text, "fallback").title == (pms.clip.one_line(value) or "T")


def test_code_blocks_become_fences_with_their_lines():
    body = ("<p>Install it:</p><pre class='language-bash'><code>pip install x\n\ncd x &amp;&amp; make</code></pre>"
            "<div class='highlight-python'><div class='highlight'><pre>def f():\n    return '```'\n</pre></div></div>"
            "<ul><li>In a list:<pre>a = 1\nb = 2</pre></li></ul>"
            "<table class='code'><tr><td class='gutter'><pre>1\n2\n3</pre></td><td><pre class='brush: js;'>let a = 1;\n"
            "let b = 2;\nlet c = 3;</pre></td></tr></table><p>After the code, the article goes on for a while.</p>")
    page = pms.extract_from_html(article("Code", body), url="https://example.org/code")
    blocks = fences(page.content)
    assert ("bash", "pip install x\n\ncd x && make") in blocks
    assert ("python", "def f():\n    return '```'") in blocks  # longer fence around backticks: see below
    assert ("", "a = 1\nb = 2") in blocks
    assert ("js", "let a = 1;\nlet b = 2;\nlet c = 3;") in blocks  # syntax-highlighter table: code without the gutter
    assert "PMSCODE" not in page.content
    assert "After the code" in page.content


def test_fence_is_longer_than_backticks_in_the_code():
    assert pms.clip._fence("md", "```\ninner\n```").startswith("````md\n")


# -- real pages, served over HTTP ---------------------------------------------------------
EXPECTED_AUTHOR = {"002": True, "aclu": True, "dropbox-blog": True, "guardian-1": True, "toc-missing": True,
                   "lazy-image-1": True, "keep-images": True, "schema-org-context-object": True, "theverge": False,
                   "heise": False, "lemonde-1": False, "bbc-1": False}


def collapse(text) -> str:
    return " ".join(str(text or "").split())


@pytest.mark.parametrize("name", sorted(EXPECTED_AUTHOR))
def test_title_and_author_match_the_expected_metadata(shared_html, server, name):
    expected = json.loads((shared_html / name / "expected-metadata.json").read_text(encoding="utf-8"))
    page = pms.extract_from_url(f"{server}/html/{name}/source.html")
    if name != "theverge":  # its <title> differs from the headline Readability picks
        assert collapse(page.title) == collapse(expected["title"])
    if EXPECTED_AUTHOR[name]:
        names = lambda s: {n.strip() for n in re.split(r"[;,]", collapse(s)) if n.strip()}  # noqa: E731
        assert names(page.author) == names(expected["byline"])
    if expected.get("lang"):
        assert (page.lang or "").lower() == expected["lang"].lower()
    assert page.content.startswith("# ")


@pytest.mark.parametrize("name", ["v8-blog", "dropbox-blog", "toc-missing", "mercurial", "002", "lazy-image-1"])
def test_code_blocks_of_real_pages_survive_as_fences(shared_html, server, name):
    from lxml import html as lxml_html

    tree = lxml_html.fromstring((shared_html / name / "source.html").read_bytes())
    for br in tree.iter("br"):
        br.tail = "\n" + (br.tail or "")
    wanted = [pre.text_content().strip("\n").rstrip() for pre in tree.iter("pre")]
    wanted = [code for code in wanted if code.strip() and not re.fullmatch(r"[\d\s]+", code)]  # not line-number gutters
    assert wanted, "the page should have code blocks"
    page = pms.extract_from_url(f"{server}/html/{name}/source.html")
    bodies = [code for _, code in fences(page.content)]
    kept = [code for code in wanted if any(code in body for body in bodies)]
    assert len(kept) == len(wanted), f"{len(wanted) - len(kept)} code blocks lost or flattened"
    # Outside fences no line is indented like code (it would render as a code block).
    outside = re.sub(r"^(`{3,}).*?^\1$", "", page.content, flags=re.M | re.S)
    assert not re.search(r"^ {4,}(?![-*+] |\d+[.)] )\S", outside, re.M)


@pytest.mark.parametrize("name, cell", [("keep-tabular-data", "| Load map |"), ("links-in-tables", "| 71.1 MB |")])
def test_tables_survive(shared_html, server, name, cell):
    page = pms.extract_from_url(f"{server}/html/{name}/source.html")
    lines = page.content.split("\n")
    row = next(i for i, line in enumerate(lines) if cell in line)
    start = row
    while lines[start - 1].startswith("|"):
        start -= 1
    assert re.fullmatch(r"\|(---\|)+", lines[start + 1]) or re.match(r"\|-", lines[start + 1]), "a table needs its |---| rule"
    assert lines[start].count("|") == lines[row].count("|")


def test_boilerplate_is_dropped_and_text_kept(shared_html, server):
    name = "football.ua.podolski"
    (entry,) = json.loads((shared_html / name / "evaldata.json").read_text(encoding="utf-8")).values()
    page = pms.extract_from_url(f"{server}/html/{name}/source.html")
    for snippet in entry["with"]:
        assert collapse(snippet) in collapse(page.content)
    for snippet in entry["without"]:
        assert collapse(snippet) not in collapse(page.content)
    assert page.title == entry["title"] and page.published == entry["date"]


def test_clipped_note_is_searchable_at_once_and_embedded(shared_html, server, hybrid_kb, tmp_path):
    folder = tmp_path / "agents"
    folder.mkdir()
    col = hybrid_kb.collections.create(folder, name="agents")
    note = col.clip(f"{server}/html/v8-blog/source.html")
    assert note.path.is_file() and note.index_error is None
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}-outside-the-web-standalone-webassembly-binaries-using-emscripten\.md", note.path.name)
    assert note.title == "Outside the web: standalone WebAssembly binaries using Emscripten"
    hits = hybrid_kb.search("standalone WebAssembly binaries Emscripten", k=3, mode="hybrid")
    assert hits and hits[0].path == note.relpath and hits[0].docid == note.docid
    assert hybrid_kb.search("compile C code to run without a JavaScript runtime", k=3, mode="vector")[0].path == note.relpath
    status = hybrid_kb.status(pending=False)
    assert status["embedded"] == status["passages"] > 0
    by_yaml, by_engine, body = frontmatter(note.path)
    assert by_yaml == by_engine
    assert by_yaml["source"] == f"{server}/html/v8-blog/source.html" and by_yaml["published"] == "2019-11-21"
    assert by_yaml["sha256"] == hashlib.sha256(body.encode()).hexdigest()
    assert {"title", "source", "clipped", "published", "site", "description", "lang", "sha256"} <= set(by_yaml)


def test_redirects_are_followed_up_to_the_limit(server):
    page = pms.extract_from_url(f"{server}/hops/3")
    assert page.title == "Arrived after hops" and page.url == f"{server}/hops/0"
    with pytest.raises(pms.PMSError, match="too many redirects"):
        pms.extract_from_url(f"{server}/hops/{pms.clip.CLIP_MAX_REDIRECTS + 1}")


# -- never overwrite ----------------------------------------------------------------------
def test_duplicate_url_is_refused_unless_forced(kb, clips, server):
    Handler.pages["dup"] = article("Duplicate me")
    first = clips.clip(f"{server}/page/dup")
    before = {p: p.read_bytes() for p in md_files(clips.path)}
    with pytest.raises(pms.AlreadyClipped, match="already clipped.*--force") as err:
        clips.clip(f"{server}/page/dup#another-fragment")
    assert err.value.path == first.path
    with pytest.raises(pms.AlreadyClipped):  # a saved copy of the same URL too
        clips.clip(f"{server}/page/dup", html=article("Duplicate me"))
    assert {p: p.read_bytes() for p in md_files(clips.path)} == before
    again = clips.clip(f"{server}/page/dup", force=True)
    assert again.path.name == first.path.name.replace(".md", "-2.md")
    assert first.path.read_bytes() == before[first.path]


def test_name_clash_gets_a_suffix_and_the_old_file_is_untouched(kb, clips):
    name = pms.clip_filename("Clash")
    (clips.path / name).write_text("# mine\n\nhand-written, keep me\n")
    (clips.path / name.replace(".md", "-2.md")).write_text("# mine too\n")
    note = clips.clip("https://example.org/clash", html=article("Clash"))
    assert note.path.name == name.replace(".md", "-3.md")
    assert (clips.path / name).read_text() == "# mine\n\nhand-written, keep me\n"
    assert not [p for p in clips.path.iterdir() if p.name.startswith(".pms-clip-")]  # no temp file left


def test_subfolder_is_created_and_cannot_escape(kb, clips):
    note = clips.clip("https://example.org/sub", html=article("In a subfolder"), subfolder="web/2026")
    assert note.relpath.startswith("web/2026/") and note.docid
    for bad in ("../outside", "/tmp", "web/../../x", ".hidden"):
        with pytest.raises(pms.PMSError, match="subfolder"):
            clips.clip("https://example.org/bad", html=article("Bad"), subfolder=bad)


def test_missing_collection_folder_is_an_error(kb, clips):
    shutil.rmtree(clips.path)
    with pytest.raises(pms.PMSError, match="folder of collection 'clips' is missing"):
        clips.clip("https://example.org/x", html=article("Nowhere"))


@pytest.fixture
def read_only(clips):
    """The collection folder made read-only: chmod, or (root ignores modes) the immutable flag."""
    folder = clips.path
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    if not shutil.which("chattr") or subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode:
        pytest.skip("running as root and cannot set the immutable flag, so a read-only folder cannot be simulated")
    try:
        yield folder
    finally:
        subprocess.run(["chattr", "-i", str(folder)], capture_output=True)


def test_read_only_collection_folder_is_an_error_and_writes_nothing(kb, clips, read_only):
    with pytest.raises(pms.PMSError, match="cannot write"):
        clips.clip("https://example.org/x", html=article("Read only"))
    assert md_files(read_only) == []


# -- the command line ---------------------------------------------------------------------
@pytest.fixture
def cli_env(tmp_path):
    """A collection 'agents' in a fresh index; PMS_HOME isolated (no private venv)."""
    folder = tmp_path / "agents"
    folder.mkdir()
    db = tmp_path / "index.sqlite"
    env = {"PMS_HOME": str(tmp_path / "home"), "PMS_MODEL_DIR": str(model_dir()), "PMS_DB": str(db)}
    with pms.KnowledgeBase(db, embeddings=False) as kb:
        kb.collections.create(folder, name="agents")
    return folder, env


@pytest.mark.slow
def test_cli_clips_a_url_a_saved_page_and_stdin(cli_env, server, shared_html):
    folder, env = cli_env
    Handler.pages["cli"] = article("Quokka husbandry notes", "<p>The quokka eats leaves and grasses.</p>")
    saved = shared_html / "heise" / "source.html"
    runs = [run_cli("clip", f"{server}/page/cli", "-c", "agents", env=env),  # embedded (the real model)
            run_cli("clip", saved, "-c", "agents", "--url", "https://www.heise.de/mac-and-i/1password", "--no-embed", env=env),
            run_cli("clip", "-", "--json", "--no-embed", env=env, input=article("Piped from stdin"))]
    for r in runs:
        assert r.returncode == 0, r.stderr
        assert "Traceback" not in r.stderr
    paths = [Path(runs[0].stdout.strip()), Path(runs[1].stdout.strip()), Path(json.loads(runs[2].stdout)["path"])]
    assert all(p.is_file() and p.parent == folder for p in paths)
    assert frontmatter(paths[0])[0]["source"] == f"{server}/page/cli"
    assert frontmatter(paths[1])[0]["source"] == "https://www.heise.de/mac-and-i/1password"
    assert frontmatter(paths[1])[0]["title"] == "1Password für Mac generiert Einmal-Passwörter"
    assert "source" not in frontmatter(paths[2])[0]  # stdin, no --url and no canonical link: no source
    found = run_cli("search", "quokka", "--files", "--mode", "keyword", "-c", "agents", env=env)
    assert found.stdout.split("\n")[0] == str(paths[0])
    dup = run_cli("clip", saved, "--url", "https://www.heise.de/mac-and-i/1password/", env=env)
    assert dup.returncode == 1 and "already clipped" in dup.stderr and len(md_files(folder)) == 3


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


FAILURES = [  # (source, extra args, what the one-line message must say)
    ("http://pms-clip-test.invalid/page", [], "cannot find the server"),
    ("http://127.0.0.1:{closed}/page", [], "connection refused"),
    ("{server}/sleep", ["--timeout", "0.5"], "no answer from 127.0.0.1 within 0.5 s"),
    ("{server}/status/404", [], "HTTP 404"),
    ("{server}/status/500", [], "HTTP 500"),
    ("{server}/status/403", [], "HTTP 403"),
    ("{server}/loop", [], "too many redirects"),
    ("{server}/hops/9", [], "too many redirects"),
    ("{server}/to-ftp", [], "not a web page"),
    ("{server}/kind/pdf", [], "cannot read this PDF"),  # says it is a PDF, is not one
    ("{server}/kind/png", [], "an image (image/png)"),
    ("{server}/kind/json", [], "JSON data (application/json)"),
    ("{server}/huge", [], "too large"),
    ("{server}/huge-declared", [], "too large"),
    ("{server}/html/apache-httpd-it-works/source.html", [], "nothing to clip"),
    ("{server}/html/create-react-app-shell/source.html", [], "nothing to clip"),
    ("{server}/html/business-punk.com.fitness/source.html", [], "nothing to clip"),
    ("file:///etc/passwd", [], "file: address, not a web page"),
    ("javascript:alert(1)", [], "javascript: address"),
    ("ftp://127.0.0.1/file.html", [], "ftp: address"),
    ("http://", [], "not a valid URL"),
    ("http://127.0.0.1:99999/", [], "not a valid URL"),
    ("no-such-file.html", [], "neither a URL nor a saved page"),
    ("{server}/page/x", ["-c", "nope"], "no collection named 'nope'"),
    ("{server}/page/x", ["--timeout", "0"], "--timeout must be"),
]


@pytest.mark.parametrize("source, extra, message", FAILURES, ids=[f[2][:30] for f in FAILURES])
def test_cli_failures_are_one_line_and_write_nothing(cli_env, server, pms_main, source, extra, message):
    if "html/" in source and not SHARED_HTML.is_dir():
        pytest.skip(f"saved web pages not found at {SHARED_HTML}")
    folder, env = cli_env
    r = pms_main("clip", source.format(server=server, closed=closed_port()), *extra, db=Path(env["PMS_DB"]))
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.strip().split("\n")
    assert len(lines) == 1 and lines[0].startswith("pms: error: ") and message in lines[0], r.stderr
    assert md_files(folder) == []


@pytest.mark.stdlib
def test_cli_without_trafilatura_says_how_to_install(cli_env, tmp_path):
    folder, env = cli_env
    page = tmp_path / "page.html"
    page.write_text(article("Offline"))
    r = run_cli("clip", page, "-c", "agents", python_flags=("-S",), env=env)  # -S: no site-packages
    assert r.returncode == 1
    assert "pip install trafilatura lxml_html_clean" in r.stderr and "python3 pms.py setup" in r.stderr
    assert "Traceback" not in r.stderr and md_files(folder) == []
    assert run_cli("search", "anything", python_flags=("-S",), env=env).returncode == 0  # the rest still works


def test_extract_from_url_needs_no_database(server, tmp_path, monkeypatch):
    monkeypatch.setenv("PMS_HOME", str(tmp_path / "home"))
    Handler.pages["api"] = article("API page", "<p>By the way, <a href='/rel'>a relative link</a>.</p>",
                                   head="<meta name='author' content='Ada Lovelace'>")
    from pms import extract_from_url

    doc = extract_from_url(f"{server}/page/api")
    assert doc.title == "API page" and doc.author == "Ada Lovelace" and doc.lang == "en"
    assert f"[a relative link]({server}/rel)" in doc.content
    assert "Copyright footer" not in doc.content and "About" not in doc.content
    assert not (tmp_path / "home").exists()
