"""Hardening: bad file names, undecodable queries, YAML bombs, slow servers and
the small crashes of issue 15. Each test failed on the code before the fix."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import pms
from conftest import REPO, index_rows, run_cli, write


def bytes_name(folder, name: bytes, data: bytes) -> None:
    """A file whose name is raw bytes (not valid UTF-8 on purpose)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(os.path.join(os.fsencode(folder), name), "wb") as fh:
        fh.write(data)


def yaml_bomb(levels: int) -> str:
    """A few hundred bytes of frontmatter that expand to 9**levels strings."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "---\n" + "\n".join(lines) + f"\ntags: *a{levels - 1}\n---\n# Bomb\n\nboom\n"


@pytest.fixture
def env(tmp_path):
    """Environment for CLI runs: own data folder, no PMS_* leaking in."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PMS_")}
    return {**clean, "PMS_HOME": str(tmp_path / "home")}


# -- 1. file names that are not UTF-8 -------------------------------------------------------
@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="the file system must accept names that are not UTF-8")
def test_a_file_name_that_is_not_utf8_is_skipped_with_one_line_and_the_rest_indexed(kb, tmp_path):
    root = tmp_path / "names"
    write(root / "a.md", "# Alpha\n\nfirst note\n")
    bytes_name(root, b"bad\xff\xfe.md", b"# Bad name\n\nunreachable words\n")
    bytes_name(root / "sub", b"folder\xff", b"")  # a file, not a folder: harmless
    (root / b"dir\xfe".decode("utf-8", "surrogateescape")).mkdir()
    bytes_name(root / b"dir\xfe".decode("utf-8", "surrogateescape"), b"inner.md", b"# Inner\n\ninner words\n")
    for i in range(5):
        write(root / f"z{i}.md", f"# Zulu {i}\n\nlater note {i}\n")
    kb.collections.create(root, name="names")
    report = kb.sync()
    assert not report.errors
    assert sorted(kb.collections.get("names").files) == ["a.md"] + [f"z{i}.md" for i in range(5)]
    why = {path: reason for path, reason in report.skipped}
    assert why[str(root / "bad") + "\\xff\\xfe.md"] == pms.paths.BAD_NAME
    assert why[str(root / "dir") + "\\xfe"] == pms.paths.BAD_FOLDER_NAME
    assert kb.check_sync_status().pending == 0
    assert kb.sync().added == 0


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="the file system must accept names that are not UTF-8")
def test_cli_sync_with_a_bad_file_name_says_one_line_and_succeeds(tmp_path, env):
    root = tmp_path / "names"
    write(root / "good.md", "# Good\n\nfine\n")
    bytes_name(root, b"caf\xe9.md", b"# Latin-1 name\n\ntext\n")
    r = run_cli("collection", "add", root, "--name", "n", "--no-embed", env=env)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == f"pms: {root}/caf\\xe9.md: {pms.paths.BAD_NAME}"
    assert "+1 new" in r.stdout and "1 skipped" in r.stdout


# -- 2. queries that are not valid text ----------------------------------------------------------
BAD_QUERIES = ["a\udcff", "backup \udcff\udcfe files", "\ud800", "x\udfff\ud800y", "\x00\x00", "caf\udcc3\udca9", "\udcff" * 50]


@pytest.fixture(scope="module")
def embedded(tmp_path_factory, embedding_model_dir):
    root = tmp_path_factory.mktemp("vault")
    write(root / "backup.md", "# Backups\n\nrestic backup files to a disk\n")
    write(root / "cafe.md", "# Café\n\ncoffee notes\n")
    db = tmp_path_factory.mktemp("db") / "index.sqlite"
    os.environ["PMS_MODEL_DIR"] = str(embedding_model_dir)
    try:
        with pms.KnowledgeBase(db) as kb:
            kb.collections.create(root, name="v")
            assert kb.sync().embedded
    finally:
        del os.environ["PMS_MODEL_DIR"]
    return db, embedding_model_dir


@pytest.mark.parametrize("mode", pms.SEARCH_MODES)
def test_any_query_string_is_a_clean_query_in_every_mode(embedded, mode, monkeypatch):
    db, model = embedded
    monkeypatch.setenv("PMS_MODEL_DIR", str(model))
    with pms.KnowledgeBase(db) as kb:
        assert kb.search_mode(mode)[0] == ("hybrid" if mode == "auto" else mode)
        for query in BAD_QUERIES:
            hits = kb.search(query, mode=mode)
            assert all(isinstance(h, pms.Hit) and h.snippet is not None for h in hits)
        # undecodable bytes are taken for the UTF-8 they may be: "caf\xc3\xa9" is "café"
        assert [h.path for h in kb.search("caf\udcc3\udca9", mode="keyword")] == ["cafe.md"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX arguments are bytes")
def test_cli_search_with_invalid_utf8_bytes(embedded, env):
    db, model = embedded
    for mode in ("auto", "vector"):
        cmd = [sys.executable, str(REPO / "pms.py"), "--db", str(db), "search", "--mode", mode, b"backup \xff\xfe files"]
        r = subprocess.run(cmd, capture_output=True, env={**env, "PMS_MODEL_DIR": str(model)}, timeout=120)
        assert r.returncode == 0, r.stderr.decode()
        assert b"backup.md" in r.stdout and b"Traceback" not in r.stderr


# -- 3. YAML alias bombs ----------------------------------------------------------------------------
def test_yaml_bomb_is_refused_at_once():
    block, _, _ = pms.split_frontmatter(yaml_bomb(9))
    assert len(block) < 600
    with pytest.raises(pms.FrontmatterError, match="YAML bomb"):
        pms.parse_frontmatter(block)
    # aliases within the bound still work
    assert pms.parse_frontmatter("base: &b [x, y]\ntags: *b") == {"base": ["x", "y"], "tags": ["x", "y"]}


def test_sync_skips_a_yaml_bomb_with_one_line_and_indexes_the_next_note(kb, tmp_path):
    root = tmp_path / "bomb"
    write(root / "a-bomb.md", yaml_bomb(6))
    write(root / "b-next.md", "# Next\n\nthe following note\n")
    kb.collections.create(root, name="bomb")
    report = kb.sync()
    assert kb.collections.get("bomb").files == ["b-next.md"]
    assert len(report.skipped) == 1 and "YAML bomb" in report.skipped[0][1] and "\n" not in report.skipped[0][1]
    assert kb.search("following")[0].path == "b-next.md"


# -- 5. a slow server cannot hold a clip past --timeout ------------------------------------------------
class Trickle(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        try:
            if self.path == "/trickle":  # promises 100 kB, sends a byte every 0.25 s (for at most 20 s)
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", "100000")
                self.end_headers()
                for _ in range(80):
                    self.wfile.write(b"<")
                    self.wfile.flush()
                    time.sleep(0.25)
            elif self.path == "/to-file":
                self.send_response(302)
                self.send_header("Location", "file:///etc/passwd")
                self.send_header("Content-Length", "0")
                self.end_headers()
        except (BrokenPipeError, ConnectionResetError):
            pass


@pytest.fixture(scope="module")
def slow_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_clip_timeout_bounds_the_whole_download(slow_server):
    started = time.monotonic()
    with pytest.raises(pms.PMSError, match="did not finish downloading within 2 s"):
        pms.clip.fetch_html(f"{slow_server}/trickle", timeout=2)
    assert time.monotonic() - started < 6


def test_redirect_to_a_file_url_is_named_as_such(slow_server):
    with pytest.raises(pms.PMSError, match="redirects to 'file:///etc/passwd', which is not a web page"):
        pms.clip.fetch_html(f"{slow_server}/to-file", timeout=5)


# -- 7. smaller ones --------------------------------------------------------------------------------------
@pytest.mark.skipif(sys.platform == "win32", reason="Windows file names cannot hold a newline")
def test_get_and_files_with_a_newline_in_the_path(kb, tmp_path, env):
    root = tmp_path / "nl"
    write(root / "two\nlines.md", "# Newline name\n\nodd but legal\n")
    kb.collections.create(root, name="nl")
    kb.sync()
    doc = kb.get("nl/two\nlines.md")
    assert doc.title == "Newline name" and "odd but legal" in doc.text
    assert kb.get("nl/two\nlines.md:3:1").text == "odd but legal"
    r = run_cli("search", "odd", "--files", db=kb.db_path, env=env)
    assert r.returncode == 0 and r.stdout == f"{root}/two\\x0alines.md\n"


def test_get_of_an_empty_reference_is_an_error(vault, env):
    with pytest.raises(pms.PMSError, match="which note"):
        vault.get("")
    with pytest.raises(pms.PMSError, match="which note"):
        vault.get("  ")
    r = run_cli("get", "", db=vault.db_path, env=env)
    assert r.returncode == 1 and r.stdout == "" and r.stderr.startswith("pms: error: which note?")


def test_skipped_files_are_not_pending_after_a_sync(kb, tmp_path, env):
    root = tmp_path / "skips"
    write(root / "good.md", "# Good\n\nfine\n")
    write(root / "binary.md", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    kb.collections.create(root, name="skips")
    first = kb.sync()
    assert [os.path.basename(p) for p, _ in first.skipped] == ["binary.md"]
    plan = kb.check_sync_status()
    assert plan.summary() == "Sync status: +0 new, ~0 modified, -0 deleted"
    assert plan.skipped == [] and plan.not_indexed == 1  # said by the sync that met it; counted, not said again
    again = kb.sync()  # not read again, not said again, not counted as new
    assert again.added == 0 and again.skipped == [] and again.not_indexed == 1
    r = run_cli("status", db=kb.db_path, env=env)
    assert "Pending:     +0 new" in r.stdout and "Not indexed: 1 files cannot be indexed as they are:" in r.stdout
    assert "skips/binary.md: skipped: looks like a binary file" in r.stdout
    write(root / "binary.md", "# Fixed\n\nnow text\n")  # once fixed, it is indexed
    assert kb.sync().added == 1 and kb.search("fixed")[0].path == "binary.md"
    (root / "binary.md").unlink()
    write(root / "binary.md", b"\x00\x01")
    kb.sync()
    (root / "binary.md").unlink()
    assert kb.sync().skipped == [] and [f for f in kb.status(pending=False)["not_indexed"] if f["collection"] == "skips"] == []


def test_a_symlink_loop_is_a_warning_not_a_failure(tmp_path, env):
    root = tmp_path / "loop"
    write(root / "note.md", "# Note\n\ntext\n")
    (root / "back").symlink_to(root, target_is_directory=True)
    r = run_cli("collection", "add", root, "--name", "loop", env=env)
    assert r.returncode == 0, r.stderr
    assert "symlink loop" in r.stderr and "error" not in r.stderr
    r = run_cli("sync", env=env)
    assert r.returncode == 0 and "symlink loop" in r.stderr


@pytest.mark.parametrize("codec", ["utf-32", "utf-32-le", "utf-32-be", "utf-16"])
def test_utf32_and_utf16_with_a_bom_are_read(kb, tmp_path, codec):
    bom = {"utf-32-le": b"\xff\xfe\x00\x00", "utf-32-be": b"\x00\x00\xfe\xff"}.get(codec, b"")
    root = tmp_path / "enc"
    write(root / "wide.md", bom + "# Wide note\n\nzebra crossing ünïcode\n".encode(codec))
    kb.collections.create(root, name="enc")
    report = kb.sync()
    assert report.added == 1 and not report.skipped
    assert kb.search("zebra")[0].title == "Wide note"


# -- 6. Chinese and Japanese words are found through an index, not a scan ------------------------------
def test_cjk_words_of_any_length_are_found_through_cjk_fts(kb, tmp_path):
    root = tmp_path / "cjk"
    write(root / "zh.md", "# 壓縮工具\n\n使用 tar 壓縮檔案，然後上傳。\n")
    write(root / "ja.md", "# 日記\n\n今日はファイルを圧縮した。\n")
    write(root / "en.md", "# English\n\nno such characters here\n")
    kb.collections.create(root, name="cjk")
    kb.sync()
    assert index_rows(kb, "SELECT count(*) FROM cjk_fts") == [(2,)]  # only passages with such characters
    for word, path in [("檔", "zh.md"), ("檔案", "zh.md"), ("壓縮檔案", "zh.md"), ("日記", "ja.md"), ("圧縮", "ja.md"),
                       ("ファイル", "ja.md"), ("tar 檔案", "zh.md")]:
        assert [h.path for h in kb.search(word, mode="keyword")] == [path], word
    assert kb.search("檔日", mode="keyword") == []  # characters of two notes are not a word of either
    write(root / "zh.md", "# 新的\n\n內容已更改\n")
    kb.sync()
    assert kb.search("檔案", mode="keyword") == [] and kb.search("更改", mode="keyword")[0].path == "zh.md"
    db = kb.store.db  # internal contract: FTS5's own integrity check of the CJK index, on the connection that wrote it
    db.execute("INSERT INTO cjk_fts(cjk_fts) VALUES ('integrity-check')")
    assert db.execute("SELECT count(*) FROM cjk_fts").fetchone()[0] == 2


def test_an_index_made_before_cjk_fts_is_filled_when_opened(tmp_path, monkeypatch):
    # An index from before the CJK migration: its schema stops just before it,
    # and its passages were written by that older code (plain SQL here, since
    # today's sync writes columns that later migrations add).
    (cjk_migration,) = [m for m in pms.schema.MIGRATIONS if isinstance(m, str) and "cjk_fts" in m]
    with monkeypatch.context() as m:  # internal contract: the Store of an older PMS, its migrations cut short
        m.setattr(pms.store, "MIGRATIONS", pms.schema.MIGRATIONS[: pms.schema.MIGRATIONS.index(cjk_migration)])
        old = pms.store.Store(tmp_path / "old.sqlite", vectors=False)
        with old.transaction() as db:
            db.execute("INSERT INTO collections(id, name, path) VALUES (1, 'cjk', ?)", (str(tmp_path),))
            db.execute("INSERT INTO documents(id, collection_id, path, docid, title) VALUES (1, 1, 'zh.md', 'abc123', '筆記')")
            db.execute("INSERT INTO chunks(document_id, seq, start_line, end_line, hash, title, headings, body) "
                       "VALUES (1, 0, 1, 3, 'h', '筆記', '', '# 筆記\n\n壓縮檔案')")
        old.close()
    with pms.KnowledgeBase(tmp_path / "old.sqlite", embeddings=False) as kb:
        assert [h.path for h in kb.search("檔案", mode="keyword")] == ["zh.md"]
