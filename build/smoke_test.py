#!/usr/bin/env python3
"""Smoke-test a packaged PMS build with the network unreachable.

    python3 build/smoke_test.py [APP]     # APP: build/out/pms (default) or build/out/PMS.app
    python3 build/build.py --smoke        # build, then this

The programs run in a throwaway home folder (so the index must land in the
platform data folder there, never in the app), with no PMS_* settings, an
empty temp folder (no fastembed cache to fall back on) and no network:
`unshare -n` where it works (Linux), plus a dead proxy everywhere.

Checks, in order (the first failure exits 1):
 1. pms --version names the version of pms.py
 2. pms collection add <copy of sample-notes>: indexes and embeds with the bundled model
 3. pms status: hybrid search, every passage embedded, index in the data folder
 4. pms search --mode hybrid: the expected note comes first
 5. pms demo: the sample notes bundled in the app
 6. pms clip page.html --url ...: trafilatura and its data files, then the note is found
 7. pms mcp: a real MCP client (the official SDK, over stdio) lists the tools and
    searches the index (skipped, with a line saying so, where the SDK is not installed)
 8. pms-gui --quit-after-show (offscreen): the window shows and the app exits 0
 9. nothing was written inside the app folder
Then prints the cold-start timings and writes them to build/out/smoke-report.json.
"""
from __future__ import annotations

import builtins
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUILD = Path(__file__).resolve().parent
ROOT = BUILD.parent
EXE = ".exe" if sys.platform == "win32" else ""
# A query that needs meaning as well as words: the recipe never says "spicy" or "sauce".
QUERY, EXPECTED = "eggs in spicy tomato sauce", "home/shakshuka-recipe.md"
DEMO_QUERY, DEMO_EXPECTED = "replace my ssh key after losing a laptop", "ssh-key-rotation.md"
DEAD_PROXY = "http://127.0.0.1:9"  # the discard port: connections fail at once
CLIPPED_PAGE = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<title>Growing basil on a windowsill</title><meta name="author" content="Ada Gardener">
<meta property="article:published_time" content="2024-05-02"></head><body>
<nav><a href="/">Home</a> <a href="/about">About</a></nav>
<article><h1>Growing basil on a windowsill</h1>
<p>Basil wants six hours of sun a day, so a south-facing windowsill is the best spot in a flat.
Water it from below when the top centimetre of soil is dry, and never let the pot stand in water.</p>
<h2>Harvesting</h2>
<p>Pinch off the top pair of leaves just above a node every week; the plant branches and keeps
growing instead of flowering. Once it flowers, the leaves turn bitter and the plant slows down.</p>
<p>Cuttings root in a glass of water within ten days and make new plants for free.</p>
</article><footer>Copyright 2024 Example Gardens</footer></body></html>
"""


class SmokeFailure(Exception):
    pass


def programs(app: Path) -> tuple[Path, Path]:
    folder = app / "Contents" / "MacOS" if app.suffix == ".app" else app
    return folder / f"pms{EXE}", folder / f"pms-gui{EXE}"


def offline_prefix() -> list[str]:
    """`unshare -n` (root) or `unshare -rn` (user namespaces) when either works here."""
    if not shutil.which("unshare"):
        return []
    for prefix in (["unshare", "-n"], ["unshare", "-rn"]):
        try:
            if subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0:
                return prefix
        except (OSError, subprocess.TimeoutExpired):
            pass
    return []


def clean_env(home: Path) -> dict:
    """The user's environment minus anything that could point PMS at a model, cache or index."""
    env = {k: v for k, v in os.environ.items()
           if not k.upper().startswith(("PMS_", "HF_", "FASTEMBED", "XDG_", "HUGGINGFACE"))}
    temp = home / "tmp"
    temp.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), USERPROFILE=str(home), LOCALAPPDATA=str(home / "AppData" / "Local"),
               APPDATA=str(home / "AppData" / "Roaming"), TMPDIR=str(temp), TEMP=str(temp), TMP=str(temp),
               QT_QPA_PLATFORM="offscreen", PYTHONDONTWRITEBYTECODE="1")
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[name] = DEAD_PROXY
    env["no_proxy"] = env["NO_PROXY"] = ""
    return env


def expected_data_dir(home: Path) -> Path:
    """Where pms.data_dir() must put the index for this home folder."""
    if sys.platform == "win32":
        return home / "AppData" / "Local" / "PMS"
    if sys.platform == "darwin":
        return home / "Library" / "Application Support" / "PMS"
    return home / ".local" / "share" / "pms"


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}


class Runner:
    def __init__(self, prefix: list[str], env: dict, cwd: Path):
        self.prefix, self.env, self.cwd = prefix, env, cwd
        self.timings: dict[str, float] = {}

    def run(self, label: str, command: list, timeout: float = 600, stdin: str | None = None) -> str:
        started = time.perf_counter()
        try:
            result = subprocess.run([*self.prefix, *map(str, command)], env=self.env, cwd=self.cwd, input=stdin,
                                    capture_output=True, text=True, encoding="utf-8", errors="replace", timeout=timeout)
        except subprocess.TimeoutExpired:
            raise SmokeFailure(f"{label}: still running after {timeout:.0f} s") from None
        self.timings[label] = round(time.perf_counter() - started, 2)
        if result.returncode != 0:
            raise SmokeFailure(f"{label}: exit code {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
        if "Traceback (most recent call last)" in result.stderr:
            raise SmokeFailure(f"{label}: a traceback on stderr\n{result.stderr[-3000:]}")
        print(f"ok  {label} ({self.timings[label]:.2f} s)")
        return result.stdout


def check(condition: bool, message: str) -> None:
    if not condition:
        raise SmokeFailure(message)


def first_hit(output: str) -> dict:
    hits = json.loads(output)
    check(bool(hits), "the search found nothing")
    return hits[0]


def mcp_search(run: Runner, pms_exe: Path) -> None:
    """`pms mcp` as an assistant starts it: the MCP SDK's stdio client launches the
    packaged program (offline, like the others), lists its tools and searches."""
    try:
        import anyio
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client
    except ImportError:
        print("--  no MCP SDK in this Python (pip install mcp): pms mcp not checked")
        return
    command = [*run.prefix, str(pms_exe), "mcp"]
    server = StdioServerParameters(command=command[0], args=command[1:], env=run.env, cwd=str(run.cwd))

    async def session() -> tuple[set[str], dict]:
        with anyio.fail_after(180):
            async with stdio_client(server) as (read, write), ClientSession(read, write) as client:
                await client.initialize()
                tools = {tool.name for tool in (await client.list_tools()).tools}
                result = await client.call_tool("search", {"query": QUERY, "mode": "hybrid"})
                return tools, {"error": result.is_error, "text": "".join(getattr(c, "text", "") for c in result.content)}

    started = time.perf_counter()
    try:
        tools, result = anyio.run(session)
    except Exception as exc:  # the SDK raises several kinds: any is a failed check
        while isinstance(exc, getattr(builtins, "BaseExceptionGroup", ())) and len(exc.exceptions) == 1:  # anyio wraps it in task groups
            exc = exc.exceptions[0]
        raise SmokeFailure(f"pms mcp: {type(exc).__name__}: {exc}") from None
    run.timings["pms mcp: connect, list tools, search"] = round(time.perf_counter() - started, 2)
    check({"search", "get", "status"} <= tools, f"pms mcp offers {sorted(tools)}")
    check(not result["error"] and EXPECTED in result["text"], f"pms mcp search {QUERY!r}: {result['text'][:500]}")
    print(f"ok  pms mcp: connect, list tools, search ({run.timings['pms mcp: connect, list tools, search']:.2f} s)")


def smoke(app: Path) -> dict:
    pms_exe, gui_exe = programs(app)
    check(pms_exe.exists(), f"{pms_exe} does not exist (build first: python3 build/build.py)")
    sys.path.insert(0, str(ROOT))
    import pms

    prefix = offline_prefix()
    print(f"network: {'unshare ' + prefix[1] if prefix else 'dead proxy only (no unshare here)'} + {DEAD_PROXY}")
    before = snapshot(app)
    with tempfile.TemporaryDirectory(prefix="pms-smoke-") as tmp:
        home = Path(tmp)
        notes = home / "notes"
        shutil.copytree(ROOT / "sample-notes", notes)
        run = Runner(prefix, clean_env(home), cwd=home)

        out = run.run("pms --version", [pms_exe, "--version"])
        check(out.strip() == f"pms {pms.VERSION}", f"pms --version printed {out.strip()!r}, expected pms {pms.VERSION}")

        run.run("collection add + sync (embed)", [pms_exe, "collection", "add", notes, "--name", "notes"])
        status = json.loads(run.run("pms status", [pms_exe, "status", "--json"]))
        check(status["search_mode"] == "hybrid", f"search mode is {status['search_mode']}: {status.get('search_mode_reason')}")
        check(status["chunks"] > 0 and status["embedded"] == status["chunks"],
              f"{status['embedded']} of {status['chunks']} passages embedded")
        index = Path(status["index"])
        check(index.parent.resolve() == expected_data_dir(home).resolve() and index.exists(),
              f"the index is at {index}, expected in {expected_data_dir(home)}")

        hit = first_hit(run.run("pms search --mode hybrid (cold start)",
                                [pms_exe, "search", "--mode", "hybrid", "--json", QUERY]))
        check(hit["path"] == EXPECTED, f"{QUERY!r}: first hit {hit['path']}, expected {EXPECTED}")

        out = run.run("pms demo (bundled sample notes)", [pms_exe, "demo", "--mode", "hybrid", DEMO_QUERY])
        check(DEMO_EXPECTED in out, f"pms demo {DEMO_QUERY!r} did not list {DEMO_EXPECTED}:\n{out}")

        page = home / "page.html"
        page.write_text(CLIPPED_PAGE, encoding="utf-8")
        clipped = json.loads(run.run("pms clip (saved page)", [pms_exe, "clip", page, "-c", "notes", "--url",
                                                               "https://example.org/x", "--json"]))
        check("basil" in json.dumps(clipped).lower(), f"pms clip returned {clipped}")
        hit = first_hit(run.run("pms search the clipped note", [pms_exe, "search", "--json", "basil windowsill"]))
        check("basil" in hit["path"], f"the clipped note is not the first hit: {hit['path']}")

        mcp_search(run, pms_exe)

        if gui_exe.exists():
            out = run.run("pms-gui --quit-after-show (window)", [gui_exe, "--quit-after-show"], timeout=120)
            if "window-shown" in out:  # the GUI prints when its window is up (not on Windows' windowed programs)
                shown, started = (float(x) for x in out.split()[1::2][:2])
                run.timings["gui window shown after app start"] = round(shown - started, 2)
        else:
            print(f"--  no {gui_exe.name} in this build: GUI not checked")

    after = snapshot(app)
    changed = sorted(set(after) ^ set(before) | {p for p in after if p in before and after[p] != before[p]})
    check(not changed, f"the app folder changed while running: {changed[:10]}")
    print("ok  nothing written inside the app folder")
    return run.timings


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    app = Path(argv[0]) if argv else BUILD / "out" / "pms"
    try:
        timings = smoke(app.resolve())
    except SmokeFailure as exc:
        print(f"FAIL {exc}", file=sys.stderr)
        return 1
    report = BUILD / "out" / "smoke-report.json"
    report.parent.mkdir(parents=True, exist_ok=True)  # a build smoke-tested from elsewhere
    report.write_text(json.dumps(timings, indent=2) + "\n")
    print(f"smoke test passed; timings in {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
