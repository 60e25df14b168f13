#!/usr/bin/env python3
"""Two PMS commits timed in one run, on the same notes and indexes, interleaved.

    .venv/bin/python bench/compare.py eb0f0e5                 # that commit against this checkout
    .venv/bin/python bench/compare.py main --against HEAD~3   # two commits
    .venv/bin/python bench/compare.py eb0f0e5 --only keyword --corpora dendron --rounds 3   # a quick look

REV is checked out with ``git worktree add --detach`` under --work (default
/tmp/pms-compare; never in the repository) and run from its pms.py, so any commit
works: the single-file era's and the package era's (whose pms.py is generated and
checked in). Both sides run the same interpreter, PMS_MODEL_DIR (.cache/minilm)
and corpora from ../shared/data: Dendron's vault, tldr and the Rust book; ``--corpora
generated`` adds a generated vault (``generated_vault``, --generated-notes, 100,000 by
default: every title "Note N <word>", the scale where a search's cost meets the vault's).

Same indexes: each corpus is indexed (and, for --hybrid, embedded) once by the
side with the older schema; each side searches its own copy, which it first
migrates and syncs (an unchanged passage keeps its vector), so both search the
same notes with the same vectors. The built index is kept under --work/index.

What is timed, each case alternating the sides (A B B A ...) so a change in the
machine's load reaches both alike; medians, p95 and the ratio (this / REV):
- in-process keyword and hybrid search: one warm process per side and corpus,
  set up as the app and the MCP server are (vectors held in memory from the second
  vector search; commits before e97ba41 held them in any process), every query once per round, after a warm-up pass; how many queries return the
  same top-10 list on both sides is printed beside it;
- the cold ``pms`` command (what ``setup --command-only`` writes: cached bytecode),
  keyword on every corpus and hybrid on the --hybrid ones;
- ``python3 -S pms.py search`` (the script compiled on every run, no site-packages);
- ``collection add`` of a generated vault (--sync-notes, default 10,000: 40-160
  words a note, two notes a folder, a tag and a wikilink each; keyword only) and
  the unchanged re-sync after it.
Beside wall-clock, each case's median CPU time (the search's process_time; a command's
user + system time from wait4), which a busy machine stretches far less. The load average
is printed with each row (2 shared cores: read the ratios, not the absolute figures).
--json writes every timing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODEL_DIR = REPO / ".cache" / "minilm"
CORPORA = {"dendron": "dendron-vault.tar.gz", "tldr": "tldr.tar.gz", "rustbook": "rust-book.tar.gz"}
QUESTIONS = {  # what a person might type; the rest of each set is drawn from the notes' titles
    "dendron": ["how do I publish my vault", "schemas", "create a new note from a template", "backlinks",
                "rename a note and update links", "daily journal", "sync with git", "hierarchies", "lookup",
                "refactor hierarchy", "vault configuration dendron.yml", "note references embed"],
    "tldr": ["list files", "compress a directory", "extract tar archive", "git undo last commit", "kill process by name",
             "download file from url", "search text in files", "create symbolic link", "\"hard link\"", "ping*",
             "git rebase -merge", "how do I see which process uses a port"],
    "rustbook": ["how do I read a file into a string", "what is ownership", "borrow checker mutable reference",
                 "lifetimes in function signatures", "the question mark operator", "closures capture environment",
                 "smart pointers Box", "RefCell interior mutability", "message passing channels", "\"trait objects\"",
                 "unsafe rust raw pointers", "iter*"],
    # generated_vault's notes (--corpora generated): every title "Note N <word>", a vocabulary of
    # made-up words; a word every name holds, a typo with tens of thousands of words near it.
    "generated": ["note", "notes", "note 123", "Note 4711", "notebook", "daily note", "project plan", "rust ownership",
                  "kalomi", "kalomy sarento"],
}

# Run inside each side's process: that side's pms.py is the only `pms` on the path.
SIDE_PRELUDE = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import pms
"""
WORKER = SIDE_PRELUDE + """
kb = pms.KnowledgeBase(sys.argv[2])
if hasattr(kb, "keep_vectors_in_memory"):  # as the app and the MCP server do (older commits always did)
    kb.keep_vectors_in_memory()
mode = sys.argv[3]
for line in sys.stdin:
    queries, timed = json.loads(line)
    out = []
    for q in queries:
        t, cpu = time.perf_counter(), time.process_time()
        hits = kb.search(q, k=10, mode=mode)
        ms = [(time.perf_counter() - t) * 1000, (time.process_time() - cpu) * 1000]
        out.append(ms if timed else [f"{h.collection}/{h.path}" for h in hits])
    print(json.dumps(out), flush=True)
"""
PREPARE = SIDE_PRELUDE + """
db, folder, name, embed = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] == "1"
kb = pms.KnowledgeBase(db, embeddings=embed)
if name not in [c.name for c in kb.collections.list()]:
    kb.collections.create(folder, name=name)
report = kb.sync(embed=embed)
print(json.dumps({"migrations": len(pms.MIGRATIONS), "summary": report.summary()}))
"""
SCHEMA = SIDE_PRELUDE + "print(len(pms.MIGRATIONS))"


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def percentile(values: list[float], q: float) -> float:
    """Nearest rank, as bench/common.percentile (not imported: that imports this checkout's pms)."""
    ordered = sorted(values)
    return ordered[min(len(ordered), max(int(-(-len(ordered) * q // 1)), 1)) - 1] if ordered else 0.0


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True).stdout.strip()


def checkout(rev: str, work: Path) -> Path:
    """A worktree of ``rev`` under ``work`` (made once per commit), holding its pms.py."""
    sha = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    folder = work / f"rev-{sha[:12]}"
    if not (folder / "pms.py").exists():
        if folder.exists():
            shutil.rmtree(folder)
        subprocess.run(["git", "-C", str(REPO), "worktree", "prune"], check=True)
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(folder), sha], check=True,
                       capture_output=True)
    return folder


def shared_corpora() -> Path:
    """../shared/data/corpora beside this checkout, or beside the main checkout when this is a git worktree of it."""
    main_checkout = Path(git("rev-parse", "--path-format=absolute", "--git-common-dir")).parent
    for root in (REPO.parent, main_checkout.parent):
        if (root / "shared" / "data" / "corpora").is_dir():
            return root / "shared" / "data" / "corpora"
    return REPO.parent / "shared" / "data" / "corpora"


def extract(corpus: str, work: Path, generated_notes: int = 100_000) -> Path:
    if corpus == "generated":
        return generated_vault(work / f"vault-{generated_notes}", generated_notes)
    archive = shared_corpora() / CORPORA[corpus]
    target = work / "corpora"
    top = archive.name.split(".")[0]
    if not (target / top / ".complete").exists():
        if not archive.exists():
            raise SystemExit(f"{archive} not found (the evaluation data lives in ../shared/data; see its README)")
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            tar.extractall(target, filter="data")
        (target / top / ".complete").touch()
    return target / top


def generated_vault(folder: Path, notes: int, seed: int = 35) -> Path:
    """Notes of 40-160 words, two to a folder under 50 top folders, a tag and a wikilink each (issue 35's shape)."""
    if (folder / ".complete").exists():
        return folder
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ren", "to", "sa", "vel", "ni", "dor", "pa", "qu", "is", "an", "tre", "mo", "lu"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(5000)]
    for i in range(notes):
        sub = folder / f"area{i % 50:02d}" / f"topic{i // 100:04d}"
        sub.mkdir(parents=True, exist_ok=True)
        body = " ".join(rng.choice(words) for _ in range(rng.randint(40, 160)))
        (sub / f"note{i:06d}.md").write_text(
            f"---\ntags: [{rng.choice(words)}]\n---\n# Note {i} {rng.choice(words)}\n\n{body} [[note{rng.randrange(notes):06d}]]\n",
            encoding="utf-8")
    (folder / ".complete").touch()
    return folder


def note_titles(folder: Path) -> list[str]:
    """Each note's title as its file gives it (frontmatter title:, else the first heading), two words or more, sorted."""
    titles = set()
    for path in folder.rglob("*.md"):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()[:40]:
            if line.startswith(("title:", "# ")):
                title = line.split(":", 1)[1] if line.startswith("title:") else line[2:]
                if len(title.split()) >= 2:
                    titles.add(title.strip().strip("'\""))
                break
    return sorted(titles)


class Side:
    """One commit's pms.py, its own PMS_HOME, pms command and index copies."""

    def __init__(self, label: str, folder: Path, work: Path, python: str):
        self.label, self.folder, self.python = label, folder, python
        self.home = work / f"home-{label}"
        # A user's shell: no PMS_* settings, no PYTHONPATH, and Python allowed to cache bytecode.
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("PMS_") and k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
        self.env.update(PMS_HOME=str(self.home), PMS_MODEL_DIR=str(MODEL_DIR.resolve()))
        bin_dir = work / f"bin-{label}"
        self.run([python, str(folder / "pms.py"), "setup", "--command-only", "--bin-dir", str(bin_dir)])
        self.command = str(bin_dir / "pms")
        self.migrations = int(self.run([python, "-c", SCHEMA, str(folder)]).strip())

    def run(self, argv: list[str]) -> str:
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{self.label}: {' '.join(argv[:4])} ... failed: {done.stderr.strip()[-2000:]}")
        return done.stdout

    def prepare(self, db: Path, folder: Path, name: str, embed: bool) -> dict:
        return json.loads(self.run([self.python, "-c", PREPARE, str(self.folder), str(db), str(folder), name,
                                    "1" if embed else "0"]).splitlines()[-1])

    def worker(self, db: Path, mode: str) -> subprocess.Popen:
        return subprocess.Popen([self.python, "-c", WORKER, str(self.folder), str(db), mode], env=self.env, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def ask(worker: subprocess.Popen, queries: list[str], timed: bool) -> list:
    assert worker.stdin and worker.stdout
    worker.stdin.write(json.dumps([queries, timed]) + "\n")
    worker.stdin.flush()
    line = worker.stdout.readline()
    if not line:
        raise SystemExit(f"a search worker stopped (exit {worker.wait()})")
    return json.loads(line)


def alternating(sides: list[Side], rounds: int):
    """Each round's order of the sides: A B, B A, A B, ... so neither always goes first."""
    for i in range(rounds):
        yield from (sides if i % 2 == 0 else sides[::-1])


def summary(ms: list[float], cpu_ms: list[float]) -> dict:
    """Wall-clock median and p95, and the median CPU time (which a busy machine stretches far less)."""
    return {"n": len(ms), "median_ms": round(statistics.median(ms), 2), "p95_ms": round(percentile(ms, 0.95), 2),
            "cpu_median_ms": round(statistics.median(cpu_ms), 2)}


def in_process(sides: list[Side], dbs: dict[str, Path], mode: str, queries: list[str], rounds: int) -> dict:
    workers = {s.label: s.worker(dbs[s.label], mode) for s in sides}
    try:
        lists = {label: ask(w, queries, False) for label, w in workers.items()}  # also the warm-up pass
        times: dict[str, list[float]] = {s.label: [] for s in sides}
        cpu: dict[str, list[float]] = {s.label: [] for s in sides}
        for side in alternating(sides, rounds):
            for wall_ms, cpu_ms in ask(workers[side.label], queries, True):
                times[side.label].append(wall_ms)
                cpu[side.label].append(cpu_ms)
    finally:
        for w in workers.values():
            w.stdin.close()  # type: ignore[union-attr]
            w.wait()
    a, b = (lists[s.label] for s in sides)
    result: dict = {label: summary(ms, cpu[label]) for label, ms in times.items()}
    result["same_top10"] = f"{sum(x == y for x, y in zip(a, b))}/{len(queries)}"
    return result


def cold(sides: list[Side], argv_of, queries: list[str], runs: int) -> dict:
    """Wall time of a one-shot command per side, the next query each run; the first round only warms the file cache."""
    times: dict[str, list[float]] = {s.label: [] for s in sides}
    cpu: dict[str, list[float]] = {s.label: [] for s in sides}
    for i, side in enumerate(alternating(sides, runs + 1)):
        argv = argv_of(side, queries[(i // 2) % len(queries)])
        t = time.perf_counter()
        proc = subprocess.Popen(argv, env=side.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)  # the command's own CPU time (user + system)
        elapsed = (time.perf_counter() - t) * 1000
        if status:
            side.run(argv)  # again, to say why
            raise SystemExit(f"{side.label}: {' '.join(argv)} failed (status {status})")
        if i >= len(sides):
            times[side.label].append(elapsed)
            cpu[side.label].append((usage.ru_utime + usage.ru_stime) * 1000)
    return {label: summary(ms, cpu[label]) for label, ms in times.items()}


def print_row(case: str, result: dict, labels: list[str], extra: str = "") -> None:
    a, b = (result[label] for label in labels)
    ratio = b["median_ms"] / a["median_ms"] if a["median_ms"] else float("nan")
    cpu_ratio = b["cpu_median_ms"] / a["cpu_median_ms"] if a["cpu_median_ms"] else float("nan")
    print(f"| {case} | {a['median_ms']:.1f} / {a['p95_ms']:.1f} | {b['median_ms']:.1f} / {b['p95_ms']:.1f} | "
          f"{ratio:.2f}x | {a['cpu_median_ms']:.1f} / {b['cpu_median_ms']:.1f} ms: {cpu_ratio:.2f}x | {extra} |", flush=True)


def real_python() -> str:
    """The interpreter behind this venv (no pyenv shim), as `python3 pms.py` would run."""
    return subprocess.run([sys.executable, "-c", "import sys; print(sys._base_executable)"], capture_output=True,
                          text=True, check=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev", help="the commit to compare with (e.g. eb0f0e5, main)")
    parser.add_argument("--against", default="", help="a second commit instead of this checkout as it is")
    parser.add_argument("--work", type=Path, default=Path("/tmp/pms-compare"))
    parser.add_argument("--corpora", default="dendron,tldr,rustbook",
                        help="also: generated (--generated-notes notes of generated_vault, keyword only)")
    parser.add_argument("--generated-notes", type=int, default=100_000)
    parser.add_argument("--hybrid", default="dendron,rustbook",
                        help="corpora also embedded and searched by meaning (tldr: about 40k passages to embed once)")
    parser.add_argument("--only", default="keyword,hybrid,cold,script,sync")
    parser.add_argument("--queries", type=int, default=40, help="queries per corpus")
    parser.add_argument("--rounds", type=int, default=10, help="in-process rounds (every query once a round)")
    parser.add_argument("--runs", type=int, default=15, help="one-shot command runs per side and case")
    parser.add_argument("--sync-notes", type=int, default=10_000)
    parser.add_argument("--sync-runs", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(","))
    corpora = [c for c in args.corpora.split(",") if c]
    hybrid = [c for c in args.hybrid.split(",") if c in corpora] if {"hybrid", "cold"} & only else []
    python = sys.executable
    base = Side("base", checkout(args.rev, work), work, python)
    this = Side("this", checkout(args.against, work) if args.against else REPO, work, python)
    sides = [base, this]
    labels = [s.label for s in sides]
    names = {"base": f"{args.rev} ({git('rev-parse', '--short', args.rev)})",
             "this": args.against or f"this checkout ({git('rev-parse', '--short', 'HEAD')}"
                                     f"{', modified' if git('status', '--porcelain', '--untracked-files=no') else ''})"}
    builder = min(sides, key=lambda s: s.migrations)  # an older PMS cannot open a newer index; a newer one migrates it
    print(f"base = {names['base']}, this = {names['this']}; python {sys.version.split()[0]}; load average {load_average()}")
    results: dict = {"base": names["base"], "this": names["this"], "load_average_start": os.getloadavg()}
    print("\n| case | base median / p95 ms | this median / p95 ms | this/base | CPU median base / this | |\n"
          "| --- | --- | --- | --- | --- | --- |")
    dbs: dict[str, dict[str, Path]] = {}
    queries: dict[str, list[str]] = {}
    for corpus in corpora:
        folder = extract(corpus, work, args.generated_notes)
        embed = corpus in hybrid
        size = f"-{args.generated_notes}" if corpus == "generated" else ""
        built = work / "index" / f"{corpus}{size}-{'hybrid' if embed else 'keyword'}-{builder.folder.name}.sqlite"
        if not built.exists():
            print(f"  (indexing {corpus} with {builder.label}{', embedding' if embed else ''}: once, kept in {built.parent})",
                  file=sys.stderr, flush=True)
            built.parent.mkdir(parents=True, exist_ok=True)
            partial = built.with_suffix(".partial")
            partial.unlink(missing_ok=True)
            builder.prepare(partial, folder, corpus, embed)
            partial.rename(built)
        dbs[corpus] = {}
        for side in sides:
            db = work / "run" / f"{corpus}-{side.label}.sqlite"
            db.parent.mkdir(parents=True, exist_ok=True)
            for suffix in ("", "-wal", "-shm"):
                Path(f"{db}{suffix}").unlink(missing_ok=True)
            shutil.copyfile(built, db)
            side.prepare(db, folder, corpus, embed)
            dbs[corpus][side.label] = db
        titles = note_titles(folder)
        rng = random.Random(7)
        queries[corpus] = (QUESTIONS[corpus] + rng.sample(titles, min(len(titles), args.queries)))[: args.queries]
    for mode in ("keyword", "hybrid"):
        if mode not in only:
            continue
        for corpus in corpora if mode == "keyword" else hybrid:
            r = in_process(sides, dbs[corpus], mode, queries[corpus], args.rounds)
            results[f"in-process {mode}: {corpus}"] = r
            print_row(f"in-process {mode}: {corpus} ({len(queries[corpus])} queries x {args.rounds})", r, labels,
                      f"same top 10: {r['same_top10']}; load {load_average()}")
    if "cold" in only:
        for corpus in corpora:
            for mode in ("keyword", "hybrid") if corpus in hybrid else ("keyword",):
                r = cold(sides, lambda s, q, c=corpus, m=mode: [s.command, "--db", str(dbs[c][s.label]), "search",
                                                                "--mode", m, q], queries[corpus], args.runs)
                results[f"pms search --mode {mode}: {corpus}"] = r
                print_row(f"cold `pms search --mode {mode}`: {corpus}", r, labels, f"load {load_average()}")
    if "script" in only:
        interpreter = real_python()
        for corpus in corpora:
            r = cold(sides, lambda s, q, c=corpus: [interpreter, "-S", str(s.folder / "pms.py"), "--db", str(dbs[c][s.label]),
                                                    "search", q], queries[corpus], args.runs)
            results[f"python3 -S pms.py search: {corpus}"] = r
            print_row(f"`python3 -S pms.py search`: {corpus}", r, labels, f"load {load_average()}")
    if "sync" in only:
        vault = generated_vault(work / f"vault-{args.sync_notes}", args.sync_notes)
        interpreter = real_python()
        add: dict[str, list[tuple[float, float]]] = {s.label: [] for s in sides}
        resync: dict[str, list[tuple[float, float]]] = {s.label: [] for s in sides}
        for side in alternating(sides, args.sync_runs):
            db = work / "run" / f"sync-{side.label}.sqlite"
            for suffix in ("", "-wal", "-shm"):
                Path(f"{db}{suffix}").unlink(missing_ok=True)
            script = [interpreter, "-S", str(side.folder / "pms.py"), "--db", str(db)]
            for times, argv in ((add, [*script, "collection", "add", str(vault), "--name", "vault", "--no-embed"]),
                                (resync, [*script, "sync", "--no-embed"])):
                t = time.perf_counter()
                proc = subprocess.Popen(argv, env=side.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                _, status, usage = os.wait4(proc.pid, 0)  # its parsing workers' CPU too, once they are waited for
                if status:
                    side.run(argv)
                    raise SystemExit(f"{side.label}: {' '.join(argv)} failed (status {status})")
                times[side.label].append(((time.perf_counter() - t) * 1000, (usage.ru_utime + usage.ru_stime) * 1000))
        for case, times in ((f"`collection add` of {args.sync_notes:,} notes (python3 -S)", add),
                            (f"unchanged re-sync of {args.sync_notes:,} notes", resync)):
            r = {label: summary([w for w, _ in pairs], [c for _, c in pairs]) for label, pairs in times.items()}
            results[case] = r
            rate = ", ".join(f"{label} {args.sync_notes / (r[label]['median_ms'] / 1000):,.0f} notes/s" for label in labels)
            print_row(case, r, labels, (rate + "; " if "add" in case else "") + f"load {load_average()}")
    print(f"\nload average at the end: {load_average()}")
    results["load_average_end"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
