#!/usr/bin/env python3
"""Ranking signals the two ranked lists do not carry, measured on the whole dev suite.

    PMS_MODEL_DIR=.cache/minilm .venv/bin/python bench/signals_lab.py [SET ...]            # the complete step varied
    PMS_MODEL_DIR=.cache/minilm .venv/bin/python bench/signals_lab.py --earlier [SET ...]  # the first study
    PMS_MODEL_DIR=.cache/minilm .venv/bin/python bench/signals_lab.py --titles [SET ...]   # a note's title by meaning
    PMS_MODEL_DIR=.cache/minilm .venv/bin/python bench/signals_lab.py --windows [SET ...]  # a long passage read whole

``bench/fusion_lab.py`` re-fuses the same two lists; this lab adds information:
the query's cosine to EVERY passage of every candidate note (not only the
vector top 100), every candidate's BM25 (not only the keyword top 100), a
second vector query moved towards the first results (pseudo-relevance
feedback), and note scores from more than their best passage. Per set, the
embedded index's passage vectors, each query's vector, its keyword list, its
names list and the BM25 of every passage matching any of its terms are read
once and cached (``.cache/bench/<set>/signals-<key>.pkl``); every variant is
then numpy over that cache, seconds a variant for the suite. ``before`` is RRF
with the score share (``pms.fuse``, FusionSettings()) from the same lists;
``complete top 20 ... (shipped)`` is what ``Retrieval._complete`` adds to it.
By default the lab runs ``study()``: ``real_complete`` mirrors ``_complete`` as
shipped (bench/suite.py's hybrid figures to the third decimal) and varies its
normalisation, keyword share, depth, feedback and note scores; each row is
judged against the shipped row by the rule in docs/benchmarks.md.
The lab reads the index file itself (read only, sqlite-vec loaded), as pms
exports no passage-level API; only the keyword list's column weights and the
exact-name threshold are copied from pms (FIELD_WEIGHTS, NAME_FIRST_MIN below).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO  # noqa: E402
from suite import SETS, load_set, pms  # noqa: E402

DEPTH = 100
BM25_LIMIT = 5000  # every passage matching any term, in practice
# The bm25 column weights of pms's keyword search (Retrieval.FIELD_WEIGHTS; not exported):
# used only for the BM25 of passages the keyword list did not reach.
FIELD_WEIGHTS = (3.0, 3.0, 1.0)
# pms's NAME_FIRST_MIN (not exported): a note named at least this closely comes first.
NAME_FIRST_MIN = 0.85


def open_index(path: Path):
    """The index file, read only, with sqlite-vec loaded (the lab reads passages and vectors itself)."""
    import sqlite_vec

    db = pms.sqlite_module(True).connect(f"file:{path}?mode=ro", uri=True)
    db.enable_load_extension(True)
    sqlite_vec.load(db)
    return db


def collect(name: str, workdir: Path) -> dict:
    """Per set: every passage's int8 vector and note path; per query: its vector, the
    lists pms fuses (``KnowledgeBase.ranked_lists``), the BM25 of every matching passage."""
    kb, judgments = load_set(name, workdir, pms.DEFAULT_CHUNK_CHARS, embed=True)
    # The key holds the first queries' lists too, so a change to pms's ranking (a
    # note's focus, names) makes a new cache instead of reusing stale lists.
    fingerprint = [kb.ranked_lists(j.query, DEPTH, [name]) for j in judgments[:5]]
    key = hashlib.sha1(json.dumps([pms.model_settings()[0], DEPTH, BM25_LIMIT, FIELD_WEIGHTS,
                                   [j.query for j in judgments], fingerprint]).encode()).hexdigest()[:10]
    cache = workdir / name / f"signals-{key}.pkl"
    if cache.exists():
        kb.close()
        return pickle.loads(cache.read_bytes())
    with kb:
        db = open_index(kb.index_path)
        rows = db.execute("SELECT v.chunk_id, d.path, v.embedding FROM chunk_vectors v JOIN chunks c ON c.id = v.chunk_id "
                          "JOIN documents d ON d.id = c.document_id ORDER BY v.chunk_id").fetchall()
        row_of = {cid: i for i, (cid, _, _) in enumerate(rows)}
        notes = [(c.name, p) for c in kb.collections.list() for p in c.files]
        found, _ = pms.resolve_targets({t for j in judgments for t in j.relevant}, notes)
        embedder = pms.Embedder()
        weights = ", ".join(str(w) for w in FIELD_WEIGHTS)
        queries = []
        for j in judgments:
            match = pms.parse_query(j.query).match_any()
            bm25 = db.execute(f"SELECT rowid, -bm25(chunks_fts, {weights}) AS r FROM chunks_fts WHERE chunks_fts MATCH ? "
                              "ORDER BY r DESC LIMIT ?", (match, BM25_LIMIT)).fetchall() if match else []
            gains: dict[str, float] = {}
            for target, g in j.relevant.items():
                p = found[target][1]
                gains[p] = max(g, gains.get(p, 0.0))
            lists = {n: [(path, v) for _, path, v in ranking] for n, ranking in kb.ranked_lists(j.query, DEPTH, [name]).items()}
            queries.append({"query": j.query, "gains": gains, "qvec": np.frombuffer(embedder.embed_query(j.query), dtype=np.int8),
                            "lists": lists, "bm25": [(row_of[cid], v) for cid, v in bm25 if cid in row_of]})
        db.close()
    data = {"chunk_paths": [path for _, path, _ in rows],
            "vectors": np.frombuffer(b"".join(blob for _, _, blob in rows), dtype=np.int8).reshape(len(rows), -1),
            "queries": queries}
    cache.write_bytes(pickle.dumps(data))
    return data


def title_vectors(name: str, workdir: Path) -> dict[str, np.ndarray]:
    """note path -> its title's int8 vector: the title alone (as the index stores it: frontmatter >
    first H1 > file name), embedded once by pms's Embedder like a passage, cached in
    ``.cache/bench/<set>/title-vectors-<key>.npy`` (key: the model and every path and title)."""
    kb, _ = load_set(name, workdir, pms.DEFAULT_CHUNK_CHARS, embed=True)
    with kb:
        db = open_index(kb.index_path)
        rows = db.execute("SELECT path, title FROM documents ORDER BY path").fetchall()
        db.close()
    key = hashlib.sha1(json.dumps([pms.model_settings()[0], rows]).encode()).hexdigest()[:10]
    cache = workdir / name / f"title-vectors-{key}.npy"
    if cache.exists():
        vectors = np.load(cache)
    else:
        blobs = pms.Embedder().embed_documents([title for _, title in rows])
        vectors = np.frombuffer(b"".join(blobs), dtype=np.int8).reshape(len(rows), -1)
        np.save(cache, vectors)
    return {path: vectors[i] for i, (path, _) in enumerate(rows)}


def authored_titles(name: str, workdir: Path) -> set[str]:
    """The notes whose title their author wrote (frontmatter ``title`` or a first H1), not the
    file name pms falls back on (the Rust book's ``ch09-01-unrecoverable-errors-with-panic``)."""
    kb, _ = load_set(name, workdir, pms.DEFAULT_CHUNK_CHARS, embed=True)
    with kb:
        notes = [(c.path, p) for c in kb.collections.list() for p in c.files]
    out = set()
    for folder, path in notes:
        block, body, _ = pms.split_frontmatter(pms.decode_text(pms.read_note_file(folder / path)))
        if pms.parse_frontmatter(block).get("title") or pms.first_heading(body):
            out.add(path)
    return out


# -- a long passage read whole: the tail past the model's window as extra windows ----------
WINDOW_TOKENS = 256  # the offline MiniLM's window (its tokenizer_config max_length), [CLS] and [SEP] included
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def embed_text(title: str, headings: str, body: str) -> tuple[str, str]:
    """What sync embeds for a stored passage (pms.Chunk.embed_text: the breadcrumb, then the
    body without a first H1 repeating the title), and the breadcrumb."""
    crumb = f"{title} > {headings}" if headings else title
    return pms.Chunk(0, 0, 0, crumb, body, title).embed_text, crumb


def model_tokenizer():
    """The model's own word-piece tokenizer, without truncation or padding (to count)."""
    from tokenizers import Tokenizer

    folder = Path(os.environ.get("PMS_MODEL_DIR") or REPO / ".cache" / "minilm")
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    return tok


def tail_windows(tok, text: str, crumb: str) -> list[str]:
    """The part of ``text`` past the first WINDOW_TOKENS word pieces as windows of whole
    sentences (from the sentence the window cut), each headed by the breadcrumb and
    fitting the window; [] when the passage fits. A sentence longer than a window is one
    window (the model reads its start)."""
    room = WINDOW_TOKENS - 2
    enc = tok.encode(text, add_special_tokens=False)
    if len(enc.ids) <= room:
        return []
    cut = enc.offsets[room][0]  # the first character the model never reads
    start = crumb and len(crumb) + 2
    body = text[start:]
    sentences, pos = [], 0
    for part in SENTENCE_END.split(body):
        at = body.index(part, pos)
        sentences.append((start + at, part))
        pos = at + len(part)
    tail = [part for at, part in sentences if at + len(part) > cut]  # from the sentence cut on
    head = f"{crumb}\n\n" if crumb else ""
    head_len = len(tok.encode(head, add_special_tokens=False).ids)
    counts = [len(e.ids) for e in tok.encode_batch(tail, add_special_tokens=False)] if tail else []
    out, group, used = [], [], head_len
    for part, n in zip(tail, counts):
        if group and used + n > room:
            out.append(head + " ".join(group))
            group, used = [], head_len
        group.append(part)
        used += n
    if group:
        out.append(head + " ".join(group))
    return out


def passage_windows(name: str, workdir: Path) -> tuple[np.ndarray, np.ndarray, dict]:
    """Per set: the tail windows' int8 vectors and, per window, its passage's row (collect()'s
    order, by chunk id); embedded once by pms's Embedder and cached in
    ``.cache/bench/<set>/windows-<key>.npy`` (+ ``-rows.npy``); and the counts for the report."""
    import time

    kb, _ = load_set(name, workdir, pms.DEFAULT_CHUNK_CHARS, embed=True)
    with kb:
        db = open_index(kb.index_path)
        rows = db.execute("SELECT c.id, c.title, c.headings, c.body FROM chunk_vectors v JOIN chunks c ON c.id = v.chunk_id "
                          "ORDER BY v.chunk_id").fetchall()
        db.close()
    tok = model_tokenizer()
    texts, owners, long_passages, tokens = [], [], 0, []
    for row, (_, title, headings, body) in enumerate(rows):
        text, crumb = embed_text(title, headings, body)
        tokens.append(len(tok.encode(text, add_special_tokens=False).ids) + 2)
        windows = tail_windows(tok, text, crumb)
        long_passages += bool(windows)
        texts += windows
        owners += [row] * len(windows)
    stats = {"passages": len(rows), "long": long_passages, "windows": len(texts),
             "median tokens": float(np.median(tokens)), "p90 tokens": float(np.percentile(tokens, 90)), "seconds": None}
    key = hashlib.sha1(json.dumps([pms.model_settings()[0], WINDOW_TOKENS, texts, owners]).encode()).hexdigest()[:10]
    cache = workdir / name / f"windows-{key}.npy"
    owner_cache = workdir / name / f"windows-{key}-rows.npy"
    if cache.exists() and owner_cache.exists():
        return np.load(cache), np.load(owner_cache), stats
    t0 = time.monotonic()
    blobs = pms.Embedder().embed_documents(sorted(texts, key=len)) if texts else []  # by length: less padding
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    vectors = np.zeros((len(texts), 384 if not blobs else len(blobs[0])), dtype=np.int8)
    for i, blob in zip(order, blobs):
        vectors[i] = np.frombuffer(blob, dtype=np.int8)
    stats["seconds"] = time.monotonic() - t0
    np.save(cache, vectors)
    np.save(owner_cache, np.array(owners, dtype=np.int64))
    (workdir / name / f"windows-{key}.json").write_text(json.dumps(stats))
    return vectors, np.array(owners, dtype=np.int64), stats


class Set:
    """One set's cached data as arrays, and per query the pieces every variant needs."""

    def __init__(self, name: str, data: dict, titles: dict[str, np.ndarray] | None = None,
                 authored: set[str] | None = None, windows: tuple[np.ndarray, np.ndarray] | None = None):
        self.name = name
        v = data["vectors"].astype(np.float32)
        self.vectors = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-9)  # sqlite-vec's cosine of int8 vectors
        # a long passage's tail windows (passage_windows) and how a passage's cosine uses them
        # (None: its first vector only, as shipped; see sims_of)
        self.window_mode: tuple[str, float] | None = None
        if windows is not None:
            w = windows[0].astype(np.float32)
            self.window_vectors = w / np.maximum(np.linalg.norm(w, axis=1, keepdims=True), 1e-9)
            self.window_owner = windows[1]
        self.doc_ids, self.doc_index = np.unique(np.array(data["chunk_paths"], dtype=object), return_inverse=True)
        self.chunk_doc = self.doc_ids[self.doc_index]  # note path per passage
        self.queries = [Query(self, q) for q in data["queries"]]
        if titles is not None:  # per note (doc_ids' order): its title's unit vector
            t = np.stack([titles[d] for d in self.doc_ids.tolist()]).astype(np.float32)
            self.title_vectors = t / np.maximum(np.linalg.norm(t, axis=1, keepdims=True), 1e-9)
            self.doc_row = {d: i for i, d in enumerate(self.doc_ids.tolist())}
            self.title_authored = np.array([d in (authored or ()) for d in self.doc_ids.tolist()])

    def sims_of(self, qv: np.ndarray) -> np.ndarray:
        """Every passage's cosine to ``qv``: its first vector's, or with ``window_mode``
        (how, scale) also its tail windows' (x scale): ``max`` the best of them, ``top2``
        the mean of its best two (one vector: that one), ``mean`` the mean of all."""
        first = self.vectors @ qv
        if self.window_mode is None or not len(self.window_owner):
            return first
        how, scale = self.window_mode
        win = scale * (self.window_vectors @ qv)
        if how == "max":
            out = first.copy()
            np.maximum.at(out, self.window_owner, win)
            return out
        if how == "mean":
            sums, counts = first.copy(), np.ones_like(first)
            np.add.at(sums, self.window_owner, win)
            np.add.at(counts, self.window_owner, 1.0)
            return sums / counts
        values = np.concatenate([first, win])
        owner = np.concatenate([np.arange(len(first)), self.window_owner])
        order = np.lexsort((-values, owner))
        o = owner[order]
        starts = np.flatnonzero(np.r_[True, o[1:] != o[:-1]])
        best = values[order[starts]]
        two = np.r_[starts[1:], len(o)] - starts > 1
        best[two] = (best[two] + values[order[starts[two] + 1]]) / 2
        out = np.empty_like(first)
        out[o[starts]] = best
        return out


class Query:
    def __init__(self, s: Set, q: dict):
        self.s, self.text, self.gains = s, q["query"], q["gains"]
        qv = q["qvec"].astype(np.float32)
        self.qvec = qv / max(float(np.linalg.norm(qv)), 1e-9)
        self.sims = s.vectors @ self.qvec
        self.bm25_rows = q["bm25"]
        self.keyword, self.vector, self.names = q["lists"]["keyword"], q["lists"]["vector"], q["lists"]["name"]
        self._note_bm25 = None
        self._note_sims = None
        self._baseline = None

    def vector_list(self, sims: np.ndarray, depth: int = DEPTH) -> list[tuple[str, float]]:
        """The notes of the ``depth`` passages nearest (by ``sims``), each at its best passage's place."""
        top = np.argpartition(-sims, min(depth, len(sims) - 1))[:depth]
        top = top[np.argsort(-sims[top], kind="stable")]
        seen, out = set(), []
        for i in top:
            doc = self.s.chunk_doc[i]
            if doc not in seen:
                seen.add(doc)
                out.append((doc, float(sims[i])))
        return out

    def note_sims(self, sims: np.ndarray | None = None, second: float = 0.0, third: float = 0.0) -> dict[str, float]:
        """note -> its best passage's cosine (+ shares of its 2nd and 3rd best), every note."""
        plain = sims is None and not second and not third
        if plain and self._note_sims is not None:
            return self._note_sims
        sims = self.sims if sims is None else sims
        order = np.lexsort((-sims, self.s.doc_index))
        d = self.s.doc_index[order]
        starts = np.flatnonzero(np.r_[True, d[1:] != d[:-1]])
        best = sims[order[starts]].copy()
        ends = np.r_[starts[1:], len(d)]
        for share, off in ((second, 1), (third, 2)):
            if share:
                pos = starts + off
                ok = pos < ends
                best[ok] += share * sims[order[pos[ok]]]
        out = dict(zip(self.s.doc_ids[d[starts]].tolist(), best.tolist()))
        if plain:
            self._note_sims = out
        return out

    def note_bm25(self, second: float = 0.0) -> dict[str, float]:
        """note -> its best passage's BM25 over every passage matching any term (absent: 0)."""
        if self._note_bm25 is None or second:
            per: dict[str, list[float]] = {}
            for row, v in self.bm25_rows:
                per.setdefault(self.s.chunk_doc[row], []).append(v)
            out = {}
            for doc, vals in per.items():
                vals.sort(reverse=True)
                out[doc] = vals[0] + (second * vals[1] if second and len(vals) > 1 else 0.0)
            if second:
                return out
            self._note_bm25 = out
        return self._note_bm25


def ndcg10(q: Query, docs: list[str]) -> float:
    return pms.query_metrics([q.gains.get(p, 0.0) for p in docs[:10]], list(q.gains.values()))["ndcg@10"]


SHIPPED = pms.FusionSettings()


def fused(q: Query, lists: dict, settings: pms.FusionSettings = SHIPPED) -> list[str]:
    lists = {n: l for n, l in lists.items() if l}
    return [e.unit for e in pms.fuse(lists, settings, {n: w for n, w in settings.weights().items() if n in lists})]


def baseline(q: Query) -> list[str]:
    if q._baseline is None:
        q._baseline = fused(q, {"keyword": q.keyword, "vector": q.vector, "name": q.names})
    return q._baseline


# -- 1. full information: every candidate's cosine and BM25 ---------------------------------
def candidates(q: Query) -> set[str]:
    return {d for lst in (q.keyword, q.vector, q.names) for d, _ in lst}


def completed(q: Query, extra: int = DEPTH, vec_sims: dict | None = None, bm25: dict | None = None) -> dict:
    """The keyword and vector lists, each followed by the other candidates it missed,
    ordered by their exact value there (BM25 0: not appended)."""
    cands = candidates(q)
    vec_sims = vec_sims or q.note_sims()
    bm25 = bm25 or q.note_bm25()
    kw_in, vec_in = {d for d, _ in q.keyword}, {d for d, _ in q.vector}
    kw_more = sorted(((d, bm25[d]) for d in cands - kw_in if bm25.get(d, 0) > 0), key=lambda x: -x[1])[:extra]
    vec_more = sorted(((d, vec_sims[d]) for d in cands - vec_in), key=lambda x: -x[1])[:extra]
    return {"keyword": q.keyword + kw_more, "vector": q.vector + vec_more, "name": q.names}


def full_rrf(extra=DEPTH, settings=SHIPPED):
    return lambda q: fused(q, completed(q, extra), settings)


def full_convex(alpha: float, norm: str = "tm", name_w: float = 0.0):
    """alpha * BM25 + (1 - alpha) * cosine over every candidate, each normalised over the candidates."""
    def ranker(q: Query) -> list[str]:
        cands = sorted(candidates(q))
        sims, bm25 = q.note_sims(), q.note_bm25()
        v = np.array([sims[d] for d in cands])
        b = np.array([bm25.get(d, 0.0) for d in cands])
        def normed(x):
            if norm == "tm":
                return x / x.max() if x.max() > 0 else x
            lo, hi = x.min(), x.max()
            return (x - lo) / (hi - lo) if hi > lo else np.ones_like(x)
        score = alpha * normed(b) + (1 - alpha) * normed(v)
        names = dict(q.names)
        score = score + name_w * np.array([names.get(d, 0.0) for d in cands])
        order = np.argsort(-score, kind="stable")
        c = list(cands)
        return [c[i] for i in order]
    return ranker


def rrf_plus_full_share(share: float, kw_share: float = 0.6, extra=DEPTH):
    """Shipped RRF (no score share) over completed lists, plus share x the complete convex score."""
    settings = pms.FusionSettings(score_share=share, score_keyword_share=kw_share)
    return lambda q: fused(q, completed(q, extra), settings)


# -- 2. vector pseudo-relevance feedback -----------------------------------------------------
def moved_sims(q: Query, m: int, beta: float, source: str = "hybrid", passages: str = "best") -> np.ndarray:
    """Every passage's cosine to q' = q + beta x the mean of the top m notes' passage
    vectors (each note's passage nearest q, or the mean of all its passages)."""
    if not beta:
        return q.sims
    first = baseline(q) if source == "hybrid" else [d for d, _ in q.vector]
    s, feedback = q.s, []
    for doc in first[:m]:
        rows = np.flatnonzero(s.chunk_doc == doc)
        if len(rows):
            feedback.append(s.vectors[rows[np.argmax(q.sims[rows])]] if passages == "best" else s.vectors[rows].mean(axis=0))
    if not feedback:
        return q.sims
    q2 = q.qvec + beta * np.mean(feedback, axis=0)
    return s.vectors @ (q2 / np.linalg.norm(q2))


def prf(m: int = 3, beta: float = 0.5, source: str = "hybrid", passages: str = "best", second_list: str = "replace",
        gamma: float = 0.0):
    """q' = q + beta * mean of the top m notes' passage vectors (best passage for q, or
    all of a note's passages), normalised; the vector list is recomputed with q' and
    fused again (``replace``: instead of the first one; ``add``: as a third list)."""
    def ranker(q: Query) -> list[str]:
        s = q.s
        sims2 = moved_sims(q, m, beta, source, passages)
        vec2 = q.vector_list(sims2)
        if second_list == "replace":
            return fused(q, {"keyword": q.keyword, "vector": vec2, "name": q.names})
        if second_list == "full":
            return fused(q, completed_with(q, vec2, sims2))
        lists = {"keyword": q.keyword, "vector": q.vector, "name": q.names, "prf": vec2}
        st = pms.FusionSettings()
        w = {**st.weights(), "prf": gamma or 1.0}
        return [e.unit for e in pms.fuse(lists, st, w)]
    return ranker


def completed_with(q: Query, vec: list, sims: np.ndarray) -> dict:
    saved = q.vector
    q.vector = vec
    try:
        return completed(q, vec_sims=q.note_sims(sims))
    finally:
        q.vector = saved


# -- 3. a note's score from more than its best passage --------------------------------------
def multi_passage(second: float, third: float = 0.0, keyword_second: float = 0.0):
    """The vector list re-ranked by best + second x 2nd best + third x 3rd best passage cosine
    (over the same candidate notes, extended with keyword candidates)."""
    def ranker(q: Query) -> list[str]:
        sims = q.note_sims(second=second, third=third)
        cands = {d for d, _ in q.vector}
        vec = sorted(((d, sims[d]) for d in cands), key=lambda x: -x[1])
        kw = q.keyword
        if keyword_second:
            b = q.note_bm25(second=keyword_second)
            kw = sorted(((d, b.get(d, v)) for d, v in q.keyword), key=lambda x: -x[1])
        return fused(q, {"keyword": kw, "vector": vec, "name": q.names})
    return ranker


# -- 1 + 2: what pms ships (Retrieval._complete) --------------------------------------------
def complete(alpha: float = 0.5, beta: float = 0.5, m: int = 3, depth: int | None = 20, name_w: float = 0.0,
             source: str = "hybrid"):
    """The first fusion's top ``depth`` notes (None: every candidate) re-scored by
    alpha x BM25 / best + (1 - alpha) x cosine to q' / best (+ name_w x name similarity),
    every value from all of a note's passages; the rest follow in the first order."""
    def ranker(q: Query) -> list[str]:
        first = baseline(q)
        head = first[:depth] if depth else sorted(candidates(q))
        sims, bm25, names = q.note_sims(moved_sims(q, m, beta, source)), q.note_bm25(), dict(q.names)
        v = np.array([sims[d] for d in head])
        b = np.array([bm25.get(d, 0.0) for d in head])
        score = alpha * (b / b.max() if b.max() > 0 else b) + (1 - alpha) * (v / v.max() if v.max() > 0 else v)
        score = score + name_w * np.array([names.get(d, 0.0) for d in head])
        rescored = [head[i] for i in np.argsort(-score, kind="stable")]
        return rescored + [d for d in first if d not in set(head)]
    return ranker


# -- the complete step as pms ships it, with its normalisation and note scores varied -------
def normalise(x: np.ndarray, how: str) -> np.ndarray:
    """Scores over the re-scored notes mapped for a convex combination (Bruch et al. 2023):
    ``max`` x / best (theoretical minimum 0: shipped); ``minmax`` (x - worst) / (best - worst);
    ``z`` (x - mean) / standard deviation; ``kthN`` (x - the N-th best) / (best - the N-th best);
    ``tmN`` (x - N/10) / (best - N/10), a fixed floor (MiniLM's cosines rarely go below 0.2)."""
    if not len(x):
        return x
    hi = float(x.max())
    if how == "max":
        return x / hi if hi > 0 else x
    if how == "z":
        sd = float(x.std())
        return (x - x.mean()) / sd if sd > 0 else np.zeros_like(x)
    if how == "minmax":
        lo = float(x.min())
    elif how.startswith("kth"):
        lo = float(np.sort(x)[::-1][min(int(how[3:]), len(x)) - 1])
    elif how.startswith("tm"):
        lo = int(how[2:]) / 10
    else:
        raise ValueError(how)
    return (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)


def note_mean_sims(q: Query, qvec: np.ndarray) -> tuple[np.ndarray, dict[str, int]]:
    """note -> cosine of ``qvec`` to the mean of its passages' unit vectors (a note-level vector)."""
    s = q.s
    if not hasattr(s, "note_means"):
        sums = np.zeros((len(s.doc_ids), s.vectors.shape[1]), dtype=np.float32)
        np.add.at(sums, s.doc_index, s.vectors)
        s.note_means = sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-9)
        s.note_row = {d: i for i, d in enumerate(s.doc_ids.tolist())}
    return s.note_means @ qvec, s.note_row


def toward(q: Query, docs: list[str], beta: float) -> np.ndarray:
    """q + beta x the mean of these notes' passages nearest q, as a unit vector (Rocchio)."""
    s, feedback = q.s, []
    for doc in docs if beta else ():
        rows = np.flatnonzero(s.chunk_doc == doc)
        if len(rows):
            feedback.append(s.vectors[rows[np.argmax(q.sims[rows])]])
    if not feedback:
        return q.qvec
    q2 = q.qvec + beta * np.mean(feedback, axis=0)
    return q2 / np.linalg.norm(q2)


def vector_focus(q: Query, top: int = DEPTH, power: float = 0.75) -> dict[str, float]:
    """note -> (its passages' cosines among the vector list's ``top`` passages, summed) /
    its passage count ** power: the keyword list's note focus (pms ``_focused``) for cosines."""
    s = q.s
    if not hasattr(s, "passage_counts"):
        s.passage_counts = np.bincount(s.doc_index).astype(float)
    t = min(top, len(q.sims))
    idx = np.argpartition(-q.sims, t - 1)[:t]
    sums = np.bincount(s.doc_index[idx], weights=q.sims[idx], minlength=len(s.doc_ids)) / s.passage_counts ** power
    return dict(zip(s.doc_ids.tolist(), sums.tolist()))


def real_complete(alpha: float = 0.5, beta: float = 0.5, m: int = 1, depth: int = 20, norm: str = "max",
                  vnorm: str | None = None, vec_second: float = 0.0, kw_second: float = 0.0, mean_w: float = 0.0,
                  feedback_from: str = "first", own_cosine_plain: bool = False, prior: float = 0.0,
                  length_penalty: float = 0.0, focus_w: float = 0.0, top_bonus: float = 0.0,
                  feedback_alpha: float | None = None, title_w: float = 0.0, title_form: str = "term",
                  title_norm: str | None = None, title_query: str = "q", title_scope: str = "all"):
    """``Retrieval._complete`` as shipped (defaults) and varied, then ``_fused``'s exact-name
    rule: the first fusion's top ``depth`` notes, each note's BM25 its value in the keyword list (BM25 + the note's
    focus) or, for notes the list missed, its best passage's raw BM25; its cosine its
    best passage's to q' (feedback from the top ``m`` notes x ``beta``). Ranked by
    alpha x norm(BM25) + (1 - alpha) x vnorm(cosine). Variations:
    ``vec_second`` / ``kw_second`` add that share of a note's 2nd best passage; ``mean_w``
    adds the cosine to the note's mean vector; ``feedback_from`` ``complete``: the top
    notes of this step without feedback (two passes), ``both``: those and the first
    fusion's; ``own_cosine_plain``: the feedback note keeps its cosine to q; ``prior``
    adds prior / (first fusion rank), ``top_bonus`` that to the first fusion's #1 only;
    ``length_penalty`` subtracts that x ln(passages) from a note's cosine; ``focus_w`` adds
    that x ``vector_focus``; ``feedback_alpha``: the keyword share of the pass without
    feedback that picks the feedback notes (``complete``, ``both``).
    The note's TITLE embedded alone (``title_query`` ``q``: its cosine to the query;
    ``q2``: to q' with feedback), by ``title_form``: ``term`` (1 - title_w) x the score
    + title_w x title_norm(title cosine); ``max`` the cosine term uses max(best passage,
    title); ``bonus`` + title_w x (title cosine - best passage cosine) where positive;
    ``title_scope`` ``authored``: a note whose title is its file name counts its best
    passage's cosine as its title's."""
    vnorm = vnorm or norm
    tnorm = title_norm or vnorm

    def scored(q: Query, head: list[str], qv: np.ndarray, alpha: float = alpha) -> np.ndarray:
        sims = q.note_sims(q.s.sims_of(qv), second=vec_second)
        listed = dict(reversed(q.keyword))  # a note's first place in the list
        raw = q.note_bm25()
        b = np.array([listed[d] if d in listed else raw.get(d, 0.0) for d in head])
        if kw_second:
            extra = q.note_bm25(second=1.0)
            b = b + kw_second * np.array([extra.get(d, 0.0) - raw.get(d, 0.0) for d in head])
        b = np.maximum(b, 0.0)  # the real path leaves BM25 <= 0 out (0 from that list)
        v = np.array([sims[d] for d in head])
        if own_cosine_plain and qv is not q.qvec:
            v[0] = q.note_sims()[head[0]]
        if length_penalty:
            if not hasattr(q.s, "passage_counts"):
                q.s.passage_counts = np.bincount(q.s.doc_index).astype(float)
            row = {d: i for i, d in enumerate(q.s.doc_ids.tolist())}
            v = v - length_penalty * np.log([q.s.passage_counts[row[d]] for d in head])
        if focus_w:
            focus = vector_focus(q)
            v = v + focus_w * np.array([focus[d] for d in head])
        if title_w or title_form == "max":
            rows = [q.s.doc_row[d] for d in head]
            t = q.s.title_vectors[rows] @ (q.qvec if title_query == "q" else qv)
            if title_scope == "authored":
                t = np.where(q.s.title_authored[rows], t, v)
            if title_form == "max":
                v = np.maximum(v, t)
            elif title_form == "bonus":
                bonus = title_w * np.maximum(t - v, 0.0)
        score = alpha * normalise(b, norm) + (1 - alpha) * normalise(v, vnorm)
        if title_w and title_form == "term":
            score = (1 - title_w) * score + title_w * normalise(t, tnorm)
        elif title_w and title_form == "bonus":
            score = score + bonus
        if mean_w:
            means, row = note_mean_sims(q, qv)
            score = score + mean_w * normalise(np.array([means[row[d]] for d in head]), vnorm)
        score = score + prior / np.arange(1, len(head) + 1)
        score[:1] += top_bonus
        return score

    def ordered(head: list[str], score: np.ndarray) -> list[str]:
        # ties: the first fusion's order (fuse breaks them by the best rank in any list)
        return [head[i] for i in sorted(range(len(head)), key=lambda i: (-score[i], i))]

    def ranker(q: Query) -> list[str]:
        first = baseline(q)
        head = first[:depth]
        feedback = first[:m]
        if feedback_from != "first":
            plain = ordered(head, scored(q, head, q.qvec, feedback_alpha or alpha))[:m]
            feedback = plain + [d for d in feedback if d not in plain] if feedback_from == "both" else plain
        ranked = ordered(head, scored(q, head, toward(q, feedback, beta))) + first[depth:]
        # as Retrieval._fused then does: of the first 2 x k (k = 10), a note named almost exactly comes first
        names = dict(q.names)
        return sorted(ranked[:20], key=lambda d: -names[d] if names.get(d, 0.0) >= NAME_FIRST_MIN else 0.0) + ranked[20:]
    return ranker


def study() -> dict:
    """The variants of issue 9's complete-step study (docs/benchmarks.md, "Normalising the complete step")."""
    v: dict = {"shipped: complete top 20, max-normalised, a.5, feedback top 1 x.5": real_complete()}
    for norm in ("max", "minmax", "z", "kth10", "tm2", "tm3"):
        for alpha in (0.3, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7):
            v[f"{norm} a{alpha}"] = real_complete(alpha, norm=norm)
    for vnorm in ("minmax", "z", "tm2", "tm3"):
        for alpha in (0.4, 0.5, 0.6):
            v[f"bm25 max, cosine {vnorm}, a{alpha}"] = real_complete(alpha, norm="max", vnorm=vnorm)
    for norm in ("max", "minmax", "z"):
        for depth in (10, 30, 50):
            v[f"{norm} a0.5 depth {depth}"] = real_complete(norm=norm, depth=depth)
        for beta in (0.0, 0.3, 0.7):
            v[f"{norm} a0.5 feedback x{beta}"] = real_complete(beta=beta, norm=norm)
        for lam in (0.1, 0.2, 0.3):
            v[f"{norm} a0.5 cosine +{lam} x 2nd"] = real_complete(norm=norm, vec_second=lam)
            v[f"{norm} a0.5 bm25 +{lam} x 2nd"] = real_complete(norm=norm, kw_second=lam)
        for w in (0.1, 0.2, 0.3):
            v[f"{norm} a0.5 + {w} x note mean vector"] = real_complete(norm=norm, mean_w=w)
    # Where the Rust book's gain from feedback comes from, and what else could give it
    v["feedback note keeps its cosine to q"] = real_complete(own_cosine_plain=True)
    for p in (0.1, 0.2, 0.3, 0.5):
        v[f"no feedback, + {p} / first fusion rank"] = real_complete(beta=0.0, prior=p)
    for beta in (0.0, 0.3, 0.5):
        for g in (0.005, 0.01, 0.02, 0.03):
            v[f"feedback x{beta}, cosine - {g} ln(passages)"] = real_complete(beta=beta, length_penalty=g)
        for w in (0.25, 0.5, 1.0):
            v[f"feedback x{beta}, cosine + {w} x vector focus"] = real_complete(beta=beta, focus_w=w)
    for beta in (0.3, 0.5, 0.7):
        v[f"two passes: feedback from this step's top x{beta}"] = real_complete(beta=beta, feedback_from="complete")
    for alpha in (0.45, 0.55):
        v[f"two passes x0.5, a{alpha}"] = real_complete(alpha, feedback_from="complete")
    v["two passes x0.5, top 2"] = real_complete(m=2, feedback_from="complete")
    v["two passes x0.5, depth 30"] = real_complete(depth=30, feedback_from="complete")
    for p in (0.05, 0.1, 0.2):
        v[f"two passes x0.5, + {p} / first fusion rank"] = real_complete(prior=p, feedback_from="complete")
    for beta in (0.5, 0.7, 1.0):
        v[f"feedback from both tops x{beta}"] = real_complete(beta=beta, feedback_from="both")
    v["both tops x0.7, + 0.05 / first fusion rank"] = real_complete(beta=0.7, prior=0.05, feedback_from="both")
    for b in (0.02, 0.05, 0.1, 0.15):
        v[f"two passes x0.5, + {b} for the first fusion's #1"] = real_complete(top_bonus=b, feedback_from="complete")
        v[f"no feedback, + {b} for the first fusion's #1"] = real_complete(beta=0.0, top_bonus=b)
    for a in (0.6, 0.7, 0.8):
        v[f"two passes x0.5, feedback note picked at a{a}"] = real_complete(feedback_alpha=a, feedback_from="complete")
    return v


def title_study() -> dict:
    """A note's title, embedded alone, as a signal of the complete step (docs/benchmarks.md,
    "A note's title by meaning"): a third term, the cosine's max, or a bonus."""
    v: dict = {"shipped: complete top 20, max-normalised, a.5, feedback top 1 x.5": real_complete()}
    for query in ("q", "q2"):
        for tnorm in ("max", "tm2"):
            for c in (0.1, 0.2, 0.3):
                v[f"title term c{c}, {tnorm}, cosine to {query}"] = real_complete(title_w=c, title_norm=tnorm, title_query=query)
        v[f"cosine = max(passage, title), title to {query}"] = real_complete(title_form="max", title_query=query)
        for w in (0.25, 0.5, 1.0, 2.0):
            v[f"bonus {w} x (title - passage) > 0, title to {query}"] = real_complete(title_w=w, title_form="bonus",
                                                                                     title_query=query)
    v["(diagnostic) the top 20 by title cosine alone"] = real_complete(title_w=1.0)
    v["(diagnostic) the top 20 by passage cosine alone"] = real_complete(0.0)
    for query in ("q", "q2"):
        for c in (0.05, 0.1, 0.2, 0.3):
            v[f"authored titles only: term c{c}, max, to {query}"] = real_complete(title_w=c, title_query=query,
                                                                                 title_scope="authored")
        v[f"authored titles only: cosine = max(passage, title), to {query}"] = real_complete(
            title_form="max", title_query=query, title_scope="authored")
        for w in (0.5, 1.0):
            v[f"authored titles only: bonus {w}, to {query}"] = real_complete(title_w=w, title_form="bonus",
                                                                            title_query=query, title_scope="authored")
    # the smallest share that passed, at a plateau's edges and with the complete-step
    # variants that passed in the earlier study
    authored = dict(title_query="q", title_scope="authored")
    v["combined: authored term c0.03, to q"] = real_complete(title_w=0.03, **authored)
    v["combined: authored term c0.05, all titles"] = real_complete(title_w=0.05)
    v["combined: authored term c0.05 + cosine (x - 0.3) / (best - 0.3)"] = real_complete(title_w=0.05, vnorm="tm3", **authored)
    v["combined: authored term c0.05 + cosine +0.2 x 2nd"] = real_complete(title_w=0.05, vec_second=0.2, **authored)
    v["combined: authored term c0.05 + depth 30"] = real_complete(title_w=0.05, depth=30, **authored)
    v["combined: authored term c0.05 + feedback x0.3"] = real_complete(title_w=0.05, beta=0.3, **authored)
    v["combined: authored term c0.05 + no feedback"] = real_complete(title_w=0.05, beta=0.0, **authored)
    v["combined: authored bonus 0.75, to q2"] = real_complete(title_w=0.75, title_form="bonus", title_query="q2",
                                                             title_scope="authored")
    v["combined: authored bonus 1.0, to q2"] = real_complete(title_w=1.0, title_form="bonus", title_query="q2",
                                                            title_scope="authored")
    for alpha in (0.4, 0.6):
        for c in (0.1, 0.2):
            v[f"title term c{c}, max, to q, a{alpha}"] = real_complete(alpha, title_w=c)
    for beta in (0.0, 0.3):
        for c in (0.1, 0.2):
            v[f"title term c{c}, max, to q, feedback x{beta}"] = real_complete(beta=beta, title_w=c)
    return v


def with_windows(how: str | None, scale: float, ranker, scope: str = "both"):
    """``ranker`` with every passage's cosine from ``Set.sims_of`` in this window mode: the
    vector list recomputed from it (the notes of the top DEPTH passages), then the first
    fusion and the complete step (its cosine to q' too; the feedback passage is the note's
    passage nearest q by it, its FIRST vector moves q). ``scope`` ``list``: the vector list
    only (the complete step reads first vectors); ``complete``: the complete step only."""
    def wrapped(q: Query) -> list[str]:
        s = q.s
        saved = (s.window_mode, q.sims, q.vector, q._baseline, q._note_sims)
        s.window_mode = (how, scale) if how else None
        if scope != "complete":
            q.vector = q.vector_list(s.sims_of(q.qvec))
        if scope == "list":
            s.window_mode = None
        q.sims = s.sims_of(q.qvec)
        q._baseline = q._note_sims = None
        try:
            return ranker(q)
        finally:
            s.window_mode, q.sims, q.vector, q._baseline, q._note_sims = saved
    return wrapped


def windows_study() -> dict:
    """label -> (window mode, scale, scope, ranker) of docs/benchmarks.md, "Reading a long
    passage whole (windows)"; ranker None: the complete step as shipped."""
    v: dict = {"first vector only, vector list recomputed (= shipped)": (None, 1.0, "both", None)}
    for how in ("max", "top2", "mean"):
        for scale in (1.0, 0.95, 0.9, 0.85):
            if how != "mean" or scale == 1.0:
                v[f"{how} over first + windows, windows x{scale}"] = (how, scale, "both", None)
    for scale in (1.0, 0.9):
        v[f"max x{scale}, the vector list only"] = ("max", scale, "list", None)
        v[f"max x{scale}, the complete step only"] = ("max", scale, "complete", None)
    v["(diagnostic) first fusion only, first vector"] = (None, 1.0, "both", baseline)
    for scale in (1.0, 0.9):
        v[f"(diagnostic) first fusion only, max x{scale}"] = ("max", scale, "both", baseline)
    return v


def windows_report(sets: dict[str, Set], out=sys.stdout) -> None:
    """Per window mode: vector mode (the recomputed vector list) and hybrid (shipped fusion and
    complete step over it) nDCG@10 per set; PASS by issue 9's rule against shipped hybrid,
    the better half being the larger of bench/suite.py's and this mode's vector list."""
    names = list(sets)
    shipped = real_complete()
    base = {s: float(np.mean([ndcg10(q, shipped(q)) for q in S.queries])) for s, S in sets.items()}
    print(f"{'window mode':<52}{'list':>7}" + "".join(f"{s:>9}" for s in names) + f"{'mean':>8}{'margin':>8}  rule", file=out)
    print(f"{'shipped (cached lists)':<52}{'hybrid':>7}" + "".join(f"{base[s]:9.4f}" for s in names)
          + f"{np.mean(list(base.values())):8.4f}", file=out)
    for label, (how, scale, scope, ranker) in windows_study().items():
        vec = {s: float(np.mean([ndcg10(q, with_windows(how, scale, lambda q: [d for d, _ in q.vector], scope)(q))
                                 for q in S.queries])) for s, S in sets.items()}
        hyb = {s: float(np.mean([ndcg10(q, with_windows(how, scale, ranker or shipped, scope)(q)) for q in S.queries]))
               for s, S in sets.items()}
        margin = min(hyb[s] - max(BETTER_HALF.get(s, 0.0), vec[s]) for s in names)
        ok = (np.mean(list(hyb.values())) > np.mean(list(base.values())) and all(hyb[s] >= base[s] - 0.003 for s in names)
              and margin >= 0.01)
        print(f"{label:<52}{'vector':>7}" + "".join(f"{vec[s]:9.4f}" for s in names) + f"{np.mean(list(vec.values())):8.4f}",
              file=out)
        print(f"{'':<52}{'hybrid':>7}" + "".join(f"{hyb[s]:9.4f}" for s in names) + f"{np.mean(list(hyb.values())):8.4f}"
              f"{margin:+8.3f}  {'PASS' if ok else ''}", file=out)
        out.flush()


VARIANTS = {
    "before: rrf + score share (fuse as shipped)": baseline,
    "vector only": lambda q: [d for d, _ in q.vector],
    "keyword only": lambda q: [d for d, _ in q.keyword],
    # 1. complete information, no feedback
    "full rrf (lists completed, shipped fusion)": full_rrf(),
    "full rrf, share .02": rrf_plus_full_share(0.02),
    "full rrf, share .05": rrf_plus_full_share(0.05),
    "full convex tm .5": full_convex(0.5),
    "full convex tm .4": full_convex(0.4),
    "full convex tm .6": full_convex(0.6),
    "full convex minmax .5": full_convex(0.5, "minmax"),
    # 2. feedback alone: a second vector list from q'
    "prf m3 b.5, replaces the vector list": prf(3, 0.5),
    "prf m3 b1": prf(3, 1.0),
    "prf m5 b.5": prf(5, 0.5),
    "prf m3 b.25": prf(3, 0.25),
    "prf m3 b.5, passages' mean": prf(3, 0.5, passages="all"),
    "prf m3 b.5, from the vector list": prf(3, 0.5, source="vector"),
    "prf m3 b.5, as a 3rd list": prf(3, 0.5, second_list="add"),
    # 3. a note from more than its best passage
    "multi-passage vec +.1 2nd": multi_passage(0.1),
    "multi-passage vec +.2 2nd +.1 3rd": multi_passage(0.2, 0.1),
    "multi-passage vec +.1, kw +.1": multi_passage(0.1, 0, 0.1),
    # 1 + 2: complete scores with q'
    "complete all candidates a.5 b.5 m3": complete(depth=None),
    "complete all, a.45": complete(0.45, depth=None),
    "complete all, a.55": complete(0.55, depth=None),
    "complete all, b.3": complete(beta=0.3, depth=None),
    "complete all, b.7": complete(beta=0.7, depth=None),
    "complete all, m2": complete(m=2, depth=None),
    "complete all, m5": complete(m=5, depth=None),
    "complete all, names .1": complete(name_w=0.1, depth=None),
    "complete top 20, no feedback": complete(beta=0.0),
    "complete top 20 a.5 b.5 m3 (shipped)": complete(),
    "complete top 30": complete(depth=30),
    "complete top 50": complete(depth=50),
    "complete top 20, b.7": complete(beta=0.7),
    "complete top 20, a.55": complete(0.55),
}


# nDCG@10 of the better of keyword and vector mode on the real search path (bench/suite.py,
# docs/benchmarks.md "Dev suite"): keyword mode adds names x3 to the keyword list, so the
# lab's bare lists are not it. "margin" is a variant's smallest lead over these.
BETTER_HALF = {"scifact": 0.689, "nfcorpus": 0.323, "rustbook": 0.949, "sample": 0.813, "tldr": 0.636}


def report(sets: dict[str, Set], variants: dict, out=sys.stdout, reference=baseline, margin_rule: bool = False) -> None:
    """One row per variant; PASS: mean above ``reference``'s, no set down > 0.003, and either the
    worst set not below (the first study) or, with ``margin_rule``, a lead of at least 0.01
    over the better half on every set (issue 9's rule)."""
    names = list(sets)
    base = {s: np.mean([ndcg10(q, reference(q)) for q in S.queries]) for s, S in sets.items()}
    halves = {s: BETTER_HALF.get(s) or max(np.mean([ndcg10(q, [d for d, _ in q.keyword]) for q in S.queries]),
                                           np.mean([ndcg10(q, [d for d, _ in q.vector]) for q in S.queries])) for s in names}
    print(f"{'variant':<44}" + "".join(f"{s:>9}" for s in names) + f"{'mean':>8}{'worst':>8}{'margin':>8}  rule", file=out)
    bmean, bworst = np.mean(list(base.values())), min(base.values())  # the rule: against "before"
    for label, ranker in variants.items():
        row = {s: float(np.mean([ndcg10(q, ranker(q)) for q in S.queries])) for s, S in sets.items()}
        mean, worst = np.mean(list(row.values())), min(row.values())
        margin = min(row[s] - halves[s] for s in names)
        ok = mean > bmean and all(row[s] >= base[s] - 0.003 for s in names) and (margin >= 0.01 if margin_rule else worst >= bworst)
        print(f"{label:<44}" + "".join(f"{row[s]:9.4f}" for s in names) + f"{mean:8.4f}{worst:8.4f}{margin:+8.3f}  {'PASS' if ok else ''}",
              file=out)
        out.flush()
    print("better half per set: " + ", ".join(f"{s} {halves[s]:.3f}" for s in names), file=out)


def main() -> int:
    workdir = REPO / ".cache" / "bench"
    wanted = [a for a in sys.argv[1:] if a in SETS] or list(SETS)
    titles = "--titles" in sys.argv
    if "--windows" in sys.argv:  # a long passage's tail embedded as extra windows
        sets = {}
        for s in wanted:
            vectors, owners, stats = passage_windows(s, workdir)
            print(f"{s}: " + ", ".join(f"{k} {v:.0f}" if isinstance(v, float) else f"{k} {v}" for k, v in stats.items()), flush=True)
            sets[s] = Set(s, collect(s, workdir), windows=(vectors, owners))
        windows_report(sets)
        return 0
    sets = {s: Set(s, collect(s, workdir), *((title_vectors(s, workdir), authored_titles(s, workdir)) if titles else ()))
            for s in wanted}
    if titles:  # a note's title, embedded alone, in the complete step
        only = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--only=")]  # rows whose label holds this
        variants = {k: f for i, (k, f) in enumerate(title_study().items()) if not i or not only or only[0] in k}
        report(sets, variants, reference=real_complete(), margin_rule=True)
    elif "--earlier" in sys.argv:  # the first study's variants, against plain fusion
        report(sets, VARIANTS)
    else:  # the complete step's normalisation and note scores, against what is shipped
        report(sets, study(), reference=real_complete(), margin_rule=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
