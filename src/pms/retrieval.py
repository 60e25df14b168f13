"""A search: request -> candidate lists -> ranking -> result.

Owns: ``SearchMode`` (the mode that runs, and why not hybrid), ``SearchRequest`` (complete
before the search runs, frozen), ``Retrieval`` (the keyword, vector and name lists from the
store, the ranking step, snippets for what is shown) and ``SearchResult`` (what every front
end shows: hits, copy groups, the query's words and their highlighting, the mode and why).

May import: config, markdown, language, filters, schema, store, vector_memory, embedding, query, ranking.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
import time
from collections.abc import Iterator, Sequence

from .config import SEARCH_MODES, VECTOR_FORMAT, Factory, Hint, PMSError, Record, TupleFields, clean_query, named_tuple
from .markdown import passage_display_text, unlabelled_link_targets
from .language import language_script, note_language, written_in_script_of
from .filters import NoteFilter, checked_number
from .schema import has_unspaced_chars, namesake_keys, spaced_cjk
from .store import PassageInfo, IndexVersion, Store, prints_of
from .vector_memory import VectorMemory
from .embedding import (
    Embedder, EmbeddingProvider, EmbeddingUnavailable, is_multilingual_model, model_mismatch, model_reads,
)
from .query import (
    MARK_OPEN, MAX_CJK_WORDS, STOPWORDS, WORD_TOKEN, Hit, ParsedQuery, Term, VectorStatus, copy_groups, folder_description,
    highlight_pattern, mark_terms, parse_query, snippet_spans, snippet_with_lead, with_folded_suffixes, without_heading_line,
)
from .ranking import (
    Evidence, RankingSettings, copy_key, first_results, holds_most_of, holds_phrase, mark_copies, name_similarity,
    has_words_of_its_own, name_trigrams, non_increasing, note_kind, order_by_note_prior, order_copies, rank,
    words_within,
)


@named_tuple
class SearchMode(TupleFields):
    """The mode a search will use; when hybrid is not available, why (a
    sentence) and a stable code from VECTOR_UNAVAILABLE."""

    mode: str
    reason: str = ""
    code: str = ""
    hint: Hint | None = None  # what makes hybrid run (a command)


class SearchRequest(Record, frozen=True):
    """One search, parsed and resolved before it runs (Retrieval.request), never changed
    after: every stage reads it, none parses again. ``query`` is clean (clean_query);
    ``mode`` is what was asked, ``used`` the mode that runs, ``reason`` why it is not
    hybrid and ``hint`` what makes hybrid run. A filter without words lists notes
    (``used`` keyword)."""

    query: str
    parsed: ParsedQuery
    note_filter: NoteFilter | None = None
    collections: tuple[str, ...] = ()
    collection_ids: list[int] | None = None
    k: int = 10
    passages: bool = False
    prefix_last: bool = False
    mode: str = "auto"
    used: str = "keyword"
    reason: str = ""
    hint: Hint | None = None  # what makes hybrid run, when it does not
    min_score: float | None = None  # leave out hits whose relevance is below this (0-1)
    intent: str = ""  # what the searcher is after, said in words: context for the vector list only
    # As the index was when the request was made (one search: made, then run): how many passages
    # hold each of the query's words (index terms), and the index's version (Store.index_version).
    term_passages: dict[str, int] = Factory(dict)
    index_version: IndexVersion | None = None

    @property
    def meaning(self) -> str:
        """What the vector list embeds: the query without its exclusions, after the intent."""
        return f"{self.intent}: {self.parsed.text}" if self.intent and self.parsed.text.strip() else self.parsed.text

    @property
    def lists_notes(self) -> bool:
        """A filter without words: the notes it matches, newest first (Retrieval.listing)."""
        return bool(self.note_filter) and not self.parsed.terms


class SearchResult(Record):
    """A search's hits (it is also their list) and what front ends show with them:
    the query as searched and its ``words`` (marked with ``highlight``), the mode it ran
    in and why not hybrid, the copies grouped under their originals (``groups``), each
    stage's time in ms, and how ranking was done (--explain)."""

    hits: list[Hit]
    mode: str = "keyword"
    reason: str = ""
    hint: Hint | None = None
    timings: dict[str, float] = Factory(dict)
    explain: str = ""
    weak: bool = False  # no hit reaches RankingSettings.relevance_floor: the notes may not cover the query
    best_relevance: float | None = None  # before min_score left hits out
    # The share of passages with a vector when a hybrid or vector search ran on an index not
    # wholly embedded (embedding under way or stopped): notes without one are ranked by their words.
    embedded: float | None = None
    query: str = ""  # as searched (clean_query)
    words: list[str] = Factory(list)  # the query's words (ParsedQuery.words; of every phrasing searched)

    @property
    def groups(self) -> list[tuple[Hit, list[Hit]]]:
        """Each hit to show, best first, with the hits that copy it (copy_groups)."""
        return copy_groups(self.hits)

    @property
    def highlight(self) -> re.Pattern | None:
        """What marks the query's words in a note's text (highlight_pattern, as the snippets' marks)."""
        return highlight_pattern(self.words)

    def to_dict(self, explain: bool = False) -> dict:
        """As JSON: every field, each hit's as Hit.to_dict."""
        return {**self.replace(hits=[]).as_dict(), "hits": [hit.to_dict(explain) for hit in self.hits]}

    @classmethod
    def from_dict(cls, data: dict) -> SearchResult:
        """A result as to_dict wrote it (a field this version does not know is left out)."""
        known = set(Hit._fields)
        fields = {key: value for key, value in data.items() if key in cls._fields}
        fields["hits"] = [Hit(**{key: value for key, value in hit.items() if key in known}) for hit in data["hits"]]
        fields["hint"] = Hint(**data["hint"]) if data.get("hint") else None
        return cls(**fields)

    def __iter__(self) -> Iterator[Hit]:
        return iter(self.hits)

    def __len__(self) -> int:
        return len(self.hits)

    def __getitem__(self, index: int) -> Hit:
        return self.hits[index]

    def __bool__(self) -> bool:
        return bool(self.hits)

    def __eq__(self, other):
        return self.hits == other if isinstance(other, list) else Record.__eq__(self, other)


def checked_min_score(value) -> float | None:
    """A search's min_score checked at the boundary: None, or a relevance from 0 to 1."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PMSError(f"min_score wants a number from 0 to 1, not {value!r}", argument="min_score") from None
    if not 0.0 <= number <= 1.0:
        raise PMSError(f"min_score wants a number from 0 to 1, not {number:g}", argument="min_score")
    return number


class Retrieval:
    """The search pipeline over a Store: ``request`` -> candidate stages (keyword,
    names, vector) -> ``rank`` -> ``SearchResult``. Stateless apart from caches."""

    def __init__(self, store: Store, embedder: EmbeddingProvider | None = None, settings: RankingSettings | None = None):
        self.store = store
        # Where vector calls go: the Store (SQL), or the VectorMemory a long-running process made.
        self.vectors: Store | VectorMemory = store
        self.embedder = embedder
        self.settings = settings or RankingSettings()
        self._pool = None
        self._query_vectors: dict[tuple[str, str], bytes] = {}  # (model, query) -> vector, newest last
        self._query_vectors_lock = threading.Lock()
        # (content hash, path) -> (note_kind for self.settings, the file names it links to, whether it has words of its own)
        self._kinds: dict[tuple[str, str], tuple[str, set[str] | None, bool]] = {}
        # (the index's version, (title, path) -> whether another note shares its title or file name)
        self._namesakes: tuple[IndexVersion | None, dict[tuple[str, str], bool]] = (None, {})
        # (the index's version, (stem, edits, alternatives) -> the vault's words a typo stands for): typing
        # on after a typo ("notebok l", "notebok la") looks its words up once, not at every keystroke.
        self._typo_fixes: tuple[IndexVersion | None, dict[tuple[str, int, int], tuple[str, ...]]] = (None, {})

    # -- helpers ---------------------------------------------------------------
    def collection_ids(self, names: Sequence[str] | None) -> list[int] | None:
        if not names:
            return None
        return [self.store.require_collection(name).id for name in names]

    def vector_status(self, version: IndexVersion | None = None) -> VectorStatus:
        """Whether vector search can run now, and why not, without loading the model
        (``version``: a search's, Store.index_version: what the index says is kept until it changes)."""
        store = self.store
        store.db  # opens the connection, which tries to load sqlite-vec
        missing = (self.embedder or Embedder).missing_packages()
        if missing:
            return VectorStatus(False, f"embeddings not installed ({', '.join(missing)})", "not-installed", Hint(command="setup"))
        if self.embedder is None:
            return VectorStatus(False, "embeddings disabled", "disabled")
        if not store.vec_loaded:
            return VectorStatus(False, store.vec_error or "sqlite-vec unavailable", "no-sqlite-vec")
        facts = store.embedding_facts(version)
        indexed_model = facts["embed_model"]
        embedded = bool(indexed_model) and facts["vector_table"]
        # What the index holds first: a model of its own that differs is not fixed by loading this one.
        if embedded and facts["embed_format"] != VECTOR_FORMAT:
            return VectorStatus(False, "the index's vectors were stored by an older PMS", "reembed-needed", Hint(command="sync --reembed"))
        if embedded and indexed_model != self.embedder.model_name:
            return VectorStatus(False, model_mismatch(indexed_model, self.embedder.model_name, self.embedder.chosen_by),
                                "reembed-needed", Hint(command="sync --reembed"))
        if self.embedder.error:
            return VectorStatus(False, self.embedder.error, "model-unavailable", self.embedder.error_hint)
        gone = self.embedder.missing()
        if gone is not None:
            return VectorStatus(False, gone.message, "model-unavailable", gone.hint)
        if not embedded:
            failed = facts["embed_error"]  # why the last sync could not embed: it says what to do
            return VectorStatus(False, failed or "no embeddings in the index yet", "not-embedded",
                                None if store.read_only or failed else Hint(command="sync"))
        return VectorStatus(True)

    def search_mode(self, mode: str = "auto", version: IndexVersion | None = None) -> SearchMode:
        """The mode a search asked for ``mode`` will use, and why hybrid is not available;
        EmbeddingUnavailable when ``mode`` (hybrid, vector) cannot run."""
        if mode not in SEARCH_MODES:
            raise PMSError(f"unknown search mode {mode!r} (choose from {', '.join(SEARCH_MODES)})")
        if mode == "keyword":
            return SearchMode("keyword")
        status = self.vector_status(version)
        if status.ok:
            return SearchMode("hybrid" if mode == "auto" else mode)
        if mode == "auto":
            return SearchMode("keyword", status.reason, status.code, status.hint)
        raise EmbeddingUnavailable(f"{mode} search is unavailable: {status.reason}", status.hint)

    def request(self, query, k: int = 10, collections: Sequence[str] | None = None, passages: bool = False,
                prefix_last: bool = False, note_filter: NoteFilter | None = None, mode: str = "keyword",
                min_score: float | None = None, intent: str = "") -> SearchRequest:
        """A complete SearchRequest: the query cleaned and parsed, the collections looked up
        (an unknown name fails here, before any work), the mode that runs resolved
        (search_mode; a filter without words lists notes), min_score and intent checked."""
        query = clean_query(query)
        parsed = parse_query(query, prefix_last, cleaned=True)
        ids = self.collection_ids(collections)
        k = min(checked_number(k, "k"), 1000)
        min_score = checked_min_score(min_score)
        held, version = self._vocabulary_of(parsed)
        resolved = self.search_mode(mode, version) if not (note_filter and not parsed.terms) else SearchMode("keyword")
        parsed = self.with_fallbacks(parsed, held, typos=resolved.mode == "keyword", version=version)
        return SearchRequest(query, parsed, note_filter or None, tuple(collections or ()), ids, k, passages, prefix_last, mode,
                             resolved.mode, resolved.reason, resolved.hint, min_score,
                             clean_query(intent).strip() if intent else "", held, version)

    def _vocabulary_of(self, parsed: ParsedQuery) -> tuple[dict[str, int], IndexVersion | None]:
        """(index term -> passages holding it, for the query's words; the index's version), in one
        statement (Store.vocabulary): what the typo fallback and the relevance's rarity read.
        ({}, None) without words or on an index without FTS5's vocabulary."""
        words = [w for t in parsed.terms if not has_unspaced_chars(" ".join(t.tokens)) for w in t.tokens]
        if not words:
            return {}, None
        try:
            return self.store.vocabulary(self.store.index_terms(words))
        except self.store.db_module_errors():
            return {}, None

    def with_fallbacks(self, parsed: ParsedQuery, held: dict[str, int], typos: bool = True,
                       version: IndexVersion | None = None) -> ParsedQuery:
        """``parsed`` with the keyword fallbacks: a word of an inflecting language also finds its
        other forms (with_folded_suffixes, RankingSettings.fold_suffixes), and with ``typos`` (a
        keyword search: hybrid's vector list already finds a misspelled word's meaning) a word
        no passage holds (RankingSettings.typo_min_letters) stands for the vault's closest words
        too: "ownershp" also finds "ownership". ``held``: index term -> passages holding it, for
        the query's words (_vocabulary_of); ``version``: the index's, with which a word's
        alternatives are kept until it changes."""
        s = self.settings
        if s.fold_suffixes:
            parsed = with_folded_suffixes(parsed)
        words = [t for t in parsed.terms if typos and s.typo_min_letters and not (t.phrase or t.prefix) and t.tokens[0].isalpha()
                 and len(t.tokens[0]) >= s.typo_min_letters and not has_unspaced_chars(t.tokens[0])]
        if not words:
            return parsed
        try:
            stems = self.store.index_terms([t.tokens[0] for t in words])  # kept per word: read by _vocabulary_of
            lost = [(t, stem) for t, stem in zip(words, stems) if stem and not held.get(stem)
                    and not any(prefix and self.store.term_passages(word, prefix=True) for word, prefix in t.variants)]
            if not lost:
                return parsed
            terms = list(parsed.terms)
            for term, stem in lost:
                fixes = tuple((word, False) for word in self._typo_alternatives(stem, version))
                if fixes:
                    terms[terms.index(term)] = term.replace(variants=term.variants + fixes)
        except self.store.db_module_errors():  # an index without FTS5's vocabulary: the words as typed
            return parsed
        return parsed.replace(terms=terms)

    TYPO_FIXES_KEPT = 1024  # words whose alternatives are kept per index version

    def _typo_alternatives(self, stem: str, version: IndexVersion | None) -> tuple[str, ...]:
        """The vault's words a typed ``stem`` no passage holds stands for (with_fallbacks): those
        within one edit, two from typo_two_edits_letters letters (the first letter as typed), the
        closest, at most typo_alternatives; kept until the index's ``version`` changes."""
        s = self.settings
        limit = 2 if len(stem) >= s.typo_two_edits_letters else 1
        key = (stem, limit, s.typo_alternatives)
        kept_version, kept = self._typo_fixes
        if version is None or kept_version != version or len(kept) >= self.TYPO_FIXES_KEPT:
            kept = {}
            self._typo_fixes = (version, kept)
        if key not in kept:
            near = words_within(stem, self.store.terms_starting(stem[0], len(stem) - limit, len(stem) + limit), limit)
            kept[key] = tuple(word for distance, _, word in near if distance == near[0][0])[: s.typo_alternatives]
        return kept[key]

    # -- candidate stages: each a function of the request returning a ranking -----------------
    def keyword_stage(self, req: SearchRequest, limit: int, *, owners: dict[int, int] | None = None,
                      every_term: set[int] | None = None, focus_depth: int | None = None) -> list[tuple[int, float]]:
        """Passage ids with BM25 scores (higher is better), best first: for short queries
        (and_first_max_terms), passages with every term before those with some, each
        group ordered with its note's focus (_focused, over the first ``focus_depth``
        passages; default all). ``owners`` receives passage id -> note id of the passages
        it found, ``every_term`` the ids of those known to hold every term
        (relevance_stage then need not look them up again)."""
        parsed, s, ids, note_filter = req.parsed, self.settings, req.collection_ids, req.note_filter
        match_any = parsed.match_any()
        if not match_any:
            return []
        notes: dict[int, tuple[int, int]] = {}  # passage id -> (note id, the note's passages), as fts_search read them
        cjk = [" ".join(t.tokens) for t in parsed.terms if has_unspaced_chars(" ".join(t.tokens))][:MAX_CJK_WORDS]
        if cjk:  # Chinese/Japanese: whole-token matches first, then passages holding every word
            ranked = self._fts(match_any, limit, ids, note_filter, notes)
            phrases = " AND ".join('"' + spaced_cjk(word).replace('"', '""') + '"' for word in cjk)
            for cid, r, doc, size in self.store.cjk_search(phrases, limit, ids, note_filter):
                if cid not in notes:
                    notes[cid] = (doc, size)
                    ranked.append((cid, -r))
            if owners is not None:
                owners.update((cid, doc) for cid, (doc, _) in notes.items())
            return ranked[:limit]
        match_all = parsed.match_all() if len(parsed.terms) <= s.and_first_max_terms else None
        all_rows = self._fts(match_all, limit, ids, note_filter, notes) if match_all else []
        first = set(cid for cid, _ in all_rows)
        if every_term is not None:
            every_term.update(first)
        if len(all_rows) >= limit:  # the costly any-term query could add nothing
            return self._focused(all_rows, first, notes, owners, focus_depth)
        any_rows = []
        rarer = self._without_ubiquitous(req, limit - len(first))
        if rarer:  # the rarer words' passages fill the list: a ubiquitous word's alone would come after them
            any_rows = self._fts(rarer.match_any() or "", limit, ids, note_filter, notes)
            if len(first.union(cid for cid, _ in any_rows)) < limit:
                any_rows = []
        any_rows = any_rows or self._fts(match_any, limit, ids, note_filter, notes)
        if every_term is not None and len(parsed.terms) == 1:
            every_term.update(cid for cid, _ in any_rows)
        if not match_all or not any_rows:
            return self._focused(any_rows, set(), notes, owners, focus_depth)
        ranked = all_rows + [row for row in any_rows if row[0] not in first]
        return self._focused(ranked[:limit], first, notes, owners, focus_depth)

    # FTS5's BM25 gives a word that half the passages or more hold no weight (its idf is floored
    # at 1e-6), so in the any-word pass a passage holding only such a word comes after every one
    # holding a word at most a quarter hold (idf >= log 3). Ranking those costs as many passages
    # as hold the word: past UBIQUITOUS_PASSAGES the pass leaves it out while the others fill it.
    UBIQUITOUS_PASSAGES = 2000

    def _without_ubiquitous(self, req: SearchRequest, wanted: int) -> ParsedQuery | None:
        """``req.parsed`` without the words more than UBIQUITOUS_PASSAGES passages and half of
        them hold, when every other term is a word at most a quarter hold (plain words only:
        the request's counts know those) and together they may fill ``wanted`` places; None
        when there is no such word, nothing else, or too few passages hold the others."""
        terms = req.parsed.terms
        if len(terms) < 2 or any(len(t.tokens) != 1 or t.phrase or t.prefix or t.variants for t in terms):
            return None
        stems = self.store.index_terms([t.tokens[0] for t in terms])
        counts = [req.term_passages.get(stem, 0) for stem in stems]
        if max(counts) <= self.UBIQUITOUS_PASSAGES or not all(stems):  # a word that is no single term: its count is unknown
            return None
        total = self.store.passage_total(req.index_version)
        rarer = [(t, n) for t, n in zip(terms, counts) if 2 * n < total]
        if len(rarer) == len(terms) or not rarer or any(4 * n > total for _, n in rarer) or sum(n for _, n in rarer) < wanted:
            return None
        return req.parsed.replace(terms=[t for t, _ in rarer])

    def _focused(self, ranked: list[tuple[int, float]], first: set[int], notes: dict[int, tuple[int, int]],
                 owners: dict[int, int] | None = None, depth: int | None = None) -> list[tuple[int, float]]:
        """``ranked`` reordered by each passage's score plus its note's focus on the
        query (RankingSettings.focus_weight, focus_power) from its passages among the
        first ``depth``: a note about the query beats a long note with one passage like it.
        ``first`` stays ahead. ``notes``: passage id -> (note id, the note's passages)."""
        s = self.settings
        if owners is not None:
            owners.update((cid, notes[cid][0]) for cid, _ in ranked)
        if not ranked or not s.focus_weight:
            return ranked
        sums: dict[int, float] = {}
        for cid, value in ranked[:depth]:
            doc = notes[cid][0]
            sums[doc] = sums.get(doc, 0.0) + value
        sizes = {doc: size for doc, size in notes.values()}
        focus = {doc: s.focus_weight * total / sizes[doc] ** s.focus_power for doc, total in sums.items()}
        scored = [(cid, value + focus.get(notes[cid][0], 0.0)) for cid, value in ranked]
        return sorted(scored, key=lambda r: (r[0] not in first, -r[1]))

    def _fts(self, match: str, limit: int, ids, note_filter: NoteFilter | None, notes: dict[int, tuple[int, int]]) -> list[tuple[int, float]]:
        """(passage id, BM25 score: higher is better) best first; ``notes`` receives each one's (note id, note's passages)."""
        try:
            found = self.store.fts_search(match, limit, ids, self.settings.field_weights, note_filter)
        except Exception as exc:  # defensive: a parser gap must never surface as an SQL error
            if "fts5" in str(exc).lower() or "syntax" in str(exc).lower():
                return []
            raise
        notes.update((cid, (doc, size)) for cid, _, doc, size in found)
        return [(cid, -r) for cid, r, _, _ in found]

    def names_stage(self, req: SearchRequest, limit: int) -> list[tuple[int, float]]:
        """Note ids whose title, an alias or the file name the query (without its
        exclusions) names, even with a typo or a word missing (trigrams), with
        name_similarity, best first; a note whose name holds an excluded word is left out."""
        s, text = self.settings, req.parsed.text
        words = WORD_TOKEN.findall(text.lower())
        if len(words) > s.name_query_max_words:
            return []
        wanted = name_trigrams(text)
        grams = list(dict.fromkeys(w[i : i + 3] for w in words if len(w) >= 3 for i in range(len(w) - 2)))
        # Only the trigrams that tell names apart are looked up (name_common_trigram): a name
        # holding none of them is not a candidate, and the cost stays that of the rare ones.
        if s.name_common_trigram:
            common = self.store.common_trigrams(grams, s.name_common_trigram, req.index_version)
            grams = [g for g in grams if g not in common]
        if not grams or not self._may_name_a_note(text, wanted, grams):
            return []
        match = " OR ".join('"' + g.replace('"', '""') + '"' for g in grams)
        excluded = [t.tokens for t in req.parsed.excluded]
        ranked = []
        # The candidates sharing most trigrams (FTS5's bm25 over trigrams) are scored exactly.
        for note_id, names in self.store.name_search(match, min(limit, s.name_candidates), req.collection_ids, req.note_filter):
            if excluded and any(holds_phrase(WORD_TOKEN.findall(names.lower()), tokens) for tokens in excluded):
                continue
            lines = names.split("\n")  # title, aliases..., file name
            best = max((name_similarity(wanted, name, s.name_coverage_min) for i, name in enumerate(lines)
                        if name.strip() and (i in (0, len(lines) - 1) or self._names_whole_alias(wanted, name))), default=0.0)
            if best >= s.name_match_min:
                ranked.append((note_id, best))
        if excluded and ranked:  # as in the keyword list: a note stays when one of its passages lacks them
            owner = self.store.passages_of_notes(doc for doc, _ in ranked)
            hit = self.store.passages_matching(" OR ".join(t.fts() for t in req.parsed.excluded), list(owner))
            kept = {doc for cid, doc in owner.items() if cid not in hit}
            ranked = [r for r in ranked if r[0] in kept]
        if ranked and not s.pointer_names:
            kinds = self.note_kinds([doc for doc, _ in ranked], by="id", version=req.index_version)
            ranked = [r for r in ranked if kinds.get(r[0]) not in ("pointer", "redirect")]
        ranked.sort(key=lambda r: -r[1])
        return ranked[:limit]

    def _names_whole_alias(self, wanted: set[str], alias: str) -> bool:
        """The query holds (almost) all of the alias, not one word of it (RankingSettings.alias_coverage)."""
        grams = name_trigrams(alias)
        return bool(grams) and len(grams & wanted) / len(grams) >= self.settings.alias_coverage

    def _may_name_a_note(self, query: str, wanted: set[str], grams: list[str]) -> bool:
        """False when no note's name can reach name_match_min, so names_stage can skip its
        costly ranked search: a name that reaches it holds at least ``need`` of the query's
        word-inner trigrams ``grams`` (those names_stage looks up), which the trigram index
        finds. ASCII only: Python lower-cases "İ" to "i" and a combining dot, FTS5 does not."""
        s = self.settings
        if not query.isascii():
            return True
        findable = [g for g in grams if not g.endswith("i")]
        need = int(s.name_match_min * len(wanted)) - (len(wanted) - len(findable))
        if need < s.name_precheck_min_shared:
            return True
        found = self.store.names_sharing(findable, need, s.name_precheck_max)
        if found is None:  # too many to score here
            return True
        return any(name_similarity(wanted, name, s.name_coverage_min) >= s.name_match_min
                   for _, names in found for name in names.split("\n") if name.strip())

    def vector_stage(self, req: SearchRequest, limit: int) -> list[tuple[int, float]]:
        """Passage ids with cosine similarity to the query (without its exclusions),
        nearest first, filters inside the KNN; passages holding an excluded word are
        left out, as the keyword list leaves them out. Call once vector_status is ok."""
        if not req.parsed.text.strip():
            return []
        found = self.vectors.vector_search(self.query_vector(req.meaning), limit, req.collection_ids, req.note_filter)
        if req.parsed.excluded and found:
            excluded = self.store.passages_matching(" OR ".join(t.fts() for t in req.parsed.excluded), [cid for cid, _ in found])
            found = [row for row in found if row[0] not in excluded]
        return [(cid, 1.0 - distance) for cid, distance in found]

    QUERY_VECTORS_KEPT = 8

    def query_vector(self, query: str) -> bytes:
        """The (clean) query's int8 vector, as the index stores passages'. The last few
        queries' vectors are kept, so a search typed again embeds nothing."""
        key = (self.embedder.model_name, query)
        with self._query_vectors_lock:
            blob = self._query_vectors.pop(key, None)
        if blob is None:
            blob = self.embedder.embed_query(query)
            held = self.store.get_meta("embed_dim")
            if held and len(blob) != int(held):  # int8: one byte a dimension
                raise EmbeddingUnavailable(f"{self.embedder.source()} returned {len(blob)}-dimensional vectors, the index "
                                           f"holds {held} (another model under the same name?)", Hint(command="sync --reembed"))
        with self._query_vectors_lock:
            self._query_vectors[key] = blob  # (re)inserted: dicts keep insertion order, so the oldest is first
            while len(self._query_vectors) > self.QUERY_VECTORS_KEPT:
                del self._query_vectors[next(iter(self._query_vectors))]
        return blob

    # -- the pipeline ------------------------------------------------------------------
    def search(self, req: SearchRequest, settings: RankingSettings | None = None) -> SearchResult:
        """Run a request: its mode's candidate stages, the ranking stage, then hits.
        Vector and hybrid raise EmbeddingUnavailable when vectors cannot be read."""
        if req.lists_notes:
            return self._result(req, self.listing(req.k, req.collection_ids, req.note_filter))
        s = settings or self.settings
        timings: dict[str, float] = {}

        def timed(stage: str, start: float) -> None:
            timings[stage] = round((time.perf_counter() - start) * 1000, 2)

        t0 = time.perf_counter()
        ranked = max(req.k, s.steady_k)  # what is ranked; the first req.k are kept
        every_term: set[int] = set()  # passages the keyword stage found holding every term
        vectors_read: dict[int, bytes] = {}  # passages' vectors the ranking stage read (for relevance_stage)
        if req.used == "hybrid":
            s = s.for_vectors(getattr(self.embedder, "static", False),  # only a local model can be static
                              self.embedder is not None and is_multilingual_model(self.embedder.model_name))
            lists, owners = self._hybrid_lists(req, max(s.depth, ranked * s.hybrid_depth_per_k), s, every_term)
        else:
            depth = max(ranked * s.single_depth_per_k, s.single_min_depth)
            owners = {}
            if req.used == "vector":
                lists = {"vector": self.vector_stage(req, depth)}
            else:
                lists = {"keyword": self.keyword_stage(req, depth, owners=owners, every_term=every_term, focus_depth=s.single_focus_depth)}
                names = self.names_stage(req, s.depth) if s.name_weight else []
                if names:
                    lists["name"] = names
                    s = s.replace(name_weight=s.keyword_name_weight)
        timed("candidates", t0)
        t0 = time.perf_counter()
        if len(lists) == 1:  # one list: its own order, each note at its best passage
            (name, ranking), = lists.items()
            rows = list(ranking)
            if not req.passages:  # each note at its best passage (the first): hits only for those
                owner = owners or self.store.passage_notes(cid for cid, _ in rows)
                firsts: dict[int, tuple[int, float]] = {}
                for row in rows:
                    if row[0] in owner:
                        firsts.setdefault(owner[row[0]], row)
                rows = list(firsts.values())[: ranked * s.pool_per_k]  # _finish reads no further
            info = self.store.passage_info([cid for cid, _ in rows])
            rows = [r for r in rows if r[0] in info]
            hits = [self._hit(cid, info[cid], value, **({"bm25_rank": place, "bm25_score": value} if name == "keyword"
                                                         else {"vector_rank": place, "vector_distance": 1.0 - value}))
                    for place, (cid, value) in enumerate(rows, 1)]
            hits, explained = (hits if req.passages else _best_per_note(hits)), ""
        else:
            hits, explained, info = self._ranked_hits(req, lists, owners, s, ranked, vectors_read)
        timed("ranking", t0)
        t0 = time.perf_counter()
        hits = self._finish(hits, info, req.parsed, req.parsed.text, req.k, ranked, req.index_version)
        timed("snippets", t0)
        t0 = time.perf_counter()
        best = self.relevance_stage(req, hits, every_term, vectors_read)
        if req.min_score is not None:  # a copy goes with its original
            kept = {h.ref for h in hits if not h.copy_of and (h.relevance or 0.0) >= req.min_score}
            hits = [h for h in hits if (h.copy_of in kept if h.copy_of else (h.relevance or 0.0) >= req.min_score)]
        timed("relevance", t0)
        share = self.store.embedded_share(req.index_version) if req.used != "keyword" else 1.0
        return self._result(req, hits, timings=timings, explain=explained, weak=best is None or best < s.floor_for(req.used),
                            best_relevance=best, embedded=round(share, 4) if share < 1.0 else None)

    @staticmethod
    def _result(req: SearchRequest, hits: list[Hit], **fields) -> SearchResult:
        return SearchResult(hits, req.used, req.reason, req.hint, query=req.query, words=req.parsed.words, **fields)

    def relevance_stage(self, req: SearchRequest, hits: list[Hit], every_term: set[int] | frozenset[int] = frozenset(),
                        vectors_read: dict[int, bytes] | None = None) -> float | None:
        """Each hit's absolute relevance (Hit.similarity, .matched, .relevance); the best.
        One FTS5 lookup per query term over the hits' passages (but those ``every_term``
        names), and their vectors' dot products with the query's (when the search embedded
        it). A copy (copy_of) takes its original's: it is shown and filtered with it."""
        copies = [h for h in hits if h.copy_of]
        hits = [h for h in hits if not h.copy_of]
        if not hits:
            return None
        ids = [h.passage_id for h in hits if h.passage_id is not None]
        terms = [t for t in req.parsed.terms if not has_unspaced_chars(" ".join(t.tokens))]
        weight = self._term_weights(req, terms)
        total = sum(weight) or 1.0
        held = {cid: total if cid in every_term else 0.0 for cid in ids}
        unknown = [cid for cid in ids if cid not in every_term]
        if unknown:
            for w, matching in zip(weight, self.store.passages_matching_each([term.fts() for term in terms], unknown)):
                for cid in matching:
                    held[cid] += w
        similarity: dict[int, float] = {}
        if req.used != "keyword" and self.embedder is not None and req.parsed.text.strip():
            with contextlib.suppress(Exception):  # no vectors to read: words alone say it
                import numpy as np

                q = np.frombuffer(self.query_vector(req.meaning), dtype=np.int8).astype(np.float32)
                q /= max(float(np.linalg.norm(q)), 1e-9)
                known = vectors_read or {}
                unread = [cid for cid in ids if cid not in known]
                vectors = {cid: known[cid] for cid in ids if cid in known} | (self.vectors.vectors_of(unread) if unread else {})
                for cid, blob in vectors.items():
                    v = np.frombuffer(blob, dtype=np.int8).astype(np.float32)
                    similarity[cid] = float(v @ q) / max(float(np.linalg.norm(v)), 1e-9)
        raw = []
        for hit in hits:
            hit.matched = round(min(held.get(hit.passage_id or 0, 0.0) / total, 1.0), 3) if terms else None
            hit.similarity = round(similarity[hit.passage_id], 3) if hit.passage_id in similarity else None
            words = hit.matched or 0.0
            # Every word held is strong evidence; some of them weak (common words match anything).
            words = words if words >= 1.0 else words * self.settings.partial_match_weight
            raw.append(max(words, hit.similarity or 0.0, 0.0))
        for hit, value in zip(hits, non_increasing(raw)):
            hit.relevance = round(value, 3)
        originals = {h.ref: h for h in hits}
        for copy in copies:
            if copy.copy_of in originals:
                original = originals[copy.copy_of]
                copy.matched, copy.similarity, copy.relevance = original.matched, original.similarity, original.relevance
        return hits[0].relevance

    def _term_weights(self, req: SearchRequest, terms: Sequence[Term]) -> list[float]:
        """Each query term's weight in a hit's relevance: its rarity in the vault (BM25's idf of
        its rarest word, RankingSettings.relevance_idf; the counts the request read), or 1 each."""
        if not (self.settings.relevance_idf and terms):
            return [1.0] * len(terms)
        import math

        try:
            words = [t.tokens for t in terms]
            stems = self.store.index_terms([w for tokens in words for w in tokens])
            passages = max(self.store.passage_total(req.index_version), 1)
        except self.store.db_module_errors():
            return [1.0] * len(terms)
        weights, at = [], 0
        for term, tokens in zip(terms, words):
            counts = [req.term_passages.get(stem, 0) for stem in stems[at : at + len(tokens)] if stem]
            counts += [self.store.term_passages(word, prefix=True) for word, prefix in term.variants if prefix]
            at += len(tokens)
            rarest = min((c for c in counts if c), default=0)
            weights.append(math.log(1 + (passages - rarest + 0.5) / (rarest + 0.5)))
        return weights

    def _hybrid_lists(self, req: SearchRequest, depth: int, s: RankingSettings, every_term: set[int]):
        # The BM25 and name lists (SQLite, in worker threads) run while the query is
        # embedded (ONNX): all release the GIL, so a hybrid query costs about the longest.
        def keyword_list():
            owners: dict[int, int] = {}
            return self.keyword_stage(req, depth, owners=owners, every_term=every_term), owners

        workers = self._background()
        keyword_job = workers.submit(keyword_list)
        name_job = workers.submit(self.names_stage, req, depth) if s.name_weight else None
        try:
            vec = self.vector_stage(req, depth)
            vector_owners = self.store.passage_notes(cid for cid, _ in vec)
        finally:
            names = name_job.result() if name_job else []
            kw, owners = keyword_job.result()
        owners.update(vector_owners)
        return {"keyword": kw, "vector": vec, "name": names}, owners

    def _ranked_hits(self, req: SearchRequest, rankings: dict[str, list[tuple[int, float]]], owners: dict[int, int],
                     s: RankingSettings, k: int, vectors_read: dict[int, bytes]) -> tuple[list[Hit], str, dict[int, PassageInfo]]:
        """Hits from the ranking stage over the passage rankings (``keyword``, ``vector``) and
        the note ranking ``name``, per note (or per passage with ``passages``), ranked for ``k``
        results; how they were fused (--explain); their passages' rows. ``vectors_read`` receives
        the vectors the complete step read (relevance_stage reads them no more)."""
        passages = req.passages
        names = rankings.pop("name", [])
        owner = dict(owners)
        unmapped = {cid for r in rankings.values() for cid, _ in r} - owner.keys()
        if unmapped:
            owner.update(self.store.passage_notes(unmapped))
        first_passage = self.store.first_passages(doc for doc, _ in names) if names else {}
        # Each list collapsed to units (a note votes with its best passage); a
        # vector whose passage is gone is skipped. passage[name][unit] = passage shown.
        lists: dict[str, list[tuple[int, float]]] = {}
        passage: dict[str, dict[object, int]] = {}
        for name, ranking in rankings.items():
            lists[name], passage[name] = [], {}
            for cid, value in ranking:
                if cid in owner:
                    unit = cid if passages else owner[cid]
                    if unit not in passage[name]:
                        passage[name][unit] = cid
                        lists[name].append((unit, value))
        if names:
            lists["name"], passage["name"] = [], {}
            for doc, value in names:
                if doc in first_passage:
                    unit = first_passage[doc] if passages else doc
                    passage["name"][unit] = first_passage[doc]
                    lists["name"].append((unit, value))
        complete = not passages and lists.get("vector") and self.embedder is not None
        # The exact-name rule needs a body of the note's own: an empty note or a pointer the query names is not lifted to the top.
        named = [doc for doc, value in names if value >= s.name_first_min]
        stubs = {first_passage.get(doc) if passages else doc for doc, kind in self.note_kinds(named, by="id", version=req.index_version).items()
                 if kind in ("empty", "pointer", "redirect")} if named else set()
        foreign, other, across = self._units_in_other_languages(req, lists, owner, s)
        # Notes the keyword or name list found that the vector list could not: those without a vector yet.
        missing = {unit for name in ("keyword", "name") for unit, _ in lists.get(name, ())} - {u for u, _ in lists.get("vector", ())}
        unembedded = (self.store.without_vectors(missing, passages) if missing and "vector" in lists and s.unembedded_vote
                      and self.store.embedded_share(req.index_version) < 1.0 else set())
        best, explained = rank(lists, s, k, (lambda docs, keyword=True: self._evidence(req, docs, lists, keyword, vectors_read))
                               if complete else None,
                               stubs, foreign, other, unembedded, across)
        shown = {}
        for entry in best[: k * s.pool_per_k]:
            # The passage shown: the one from the list whose vote counted most.
            name = max((n for n in passage if entry.unit in passage[n]), key=lambda n: entry.parts.get(n, 0.0))
            shown[passage[name][entry.unit]] = entry
        info = self.store.passage_info(list(shown))
        name_first = s.name_first_min
        hits = [self._hit(cid, info[cid], e.score, bm25_rank=e.ranks.get("keyword"), bm25_score=e.values.get("keyword"),
                          vector_rank=e.ranks.get("vector"),
                          vector_distance=1.0 - e.values["vector"] if "vector" in e.values else None,
                          name_rank=e.ranks.get("name"),
                          fusion=explained + ("; named almost exactly, so first"
                                              if e.values.get("name", 0.0) >= name_first and e.unit not in stubs else ""))
                for cid, e in shown.items() if cid in info]
        return hits, explained, info

    def _units_in_other_languages(self, req: SearchRequest, lists: dict[str, list[tuple[int, float]]], owner: dict[int, int],
                                  s: RankingSettings) -> tuple[set[int], set[int], set[int] | None]:
        """(foreign, other, across), when a multilingual model reads the query for the vector list.
        ``foreign``: when the keyword list found no note in the query's language, the units
        whose note is in another language of its script (RankingSettings.cross_language_keyword).
        ``other``: when it did, the units whose note is in another language (a mixed vault:
        other_language_vote, other_language_feedback). ``across``: every unit whose note is in
        another language than the query (the complete step passes such a head by), None when the
        query's language is not told, by its words nor by the keyword list's first notes
        (query_language_from_keyword): then neither of the others either."""
        if self.embedder is None or not is_multilingual_model(self.embedder.model_name):
            return set(), set(), set()
        doc_of = {unit: owner.get(unit, 0) if req.passages else unit for name in ("keyword", "vector") for unit, _ in lists.get(name, ())}
        languages = self.store.note_languages(set(doc_of.values()))
        language = note_language(req.parsed.text)
        if language == "und" and s.query_language_from_keyword and lists.get("keyword"):
            # Too short to tell: the words found notes in the query's language, if most of the first ones are in one.
            first = [languages.get(doc_of[unit], "und") for unit, _ in lists["keyword"][: s.query_language_from_keyword]]
            most = max(set(first), key=first.count)
            language = most if first.count(most) * 2 >= len(first) else "und"
        if language == "und":
            return set(), set(), None
        differs = {unit for unit, doc in doc_of.items() if languages.get(doc, "und") not in ("und", language)}
        # A language taken from the keyword list's notes that the query's script is not written in
        # (a short Russian query whose commands matched English notes): every told note is across.
        across = differs if written_in_script_of(req.parsed.text, language) else {
            unit for unit, doc in doc_of.items() if languages.get(doc, "und") != "und"}
        if not lists.get("keyword"):
            return set(), set(), across
        if any(languages.get(doc_of[unit]) == language for unit, _ in lists["keyword"]):  # the vault has notes in it
            return set(), differs if s.other_language_vote or s.other_language_feedback else set(), across
        if s.cross_language_keyword == 1.0:
            return set(), set(), across
        script = language_script(language)
        return {unit for unit in differs if language_script(languages[doc_of[unit]]) == script}, set(), across

    def _evidence(self, req: SearchRequest, docs: list[int], lists: dict[str, list[tuple[int, float]]], keyword: bool = True,
                  vectors_read: dict[int, bytes] | None = None) -> Evidence:
        """What the complete step reads for the head notes ``docs``: their passages'
        vectors by id (never a KNN: a one-shot process keeps no matrix for a second
        search), the query vector the vector list used, and (``keyword``) FTS5's BM25 of
        the notes the keyword list missed (with the request's exclusions). A vector already
        in ``vectors_read`` (the step across languages read it) is not read again."""
        owner = self.store.passages_of_notes(docs)
        in_keyword = {doc for doc, _ in lists.get("keyword", ())}
        missed = [doc for doc in docs if doc not in in_keyword] if keyword else []
        match = req.parsed.match_any()
        bm25: dict[int, float] = {}
        if missed and match:
            for doc, value in self.store.notes_bm25(match, missed, self.settings.field_weights):
                bm25[doc] = max(-value, bm25.get(doc, 0.0))
        read = vectors_read if vectors_read is not None else {}
        unread = [cid for cid in owner if cid not in read]
        if unread:
            read.update(self.vectors.vectors_of(unread))
        vectors = {cid: read[cid] for cid in owner if cid in read}
        return Evidence(owner, vectors, self.query_vector(req.meaning), bm25)

    # -- related notes ----------------------------------------------------------------------
    RELATED_PASSAGES = 24  # a long note is represented by at most this many of its passages

    def related(self, note_id: int, k: int = 10, collections: Sequence[str] | None = None) -> SearchResult:
        """The notes closest in meaning to a note, each with its passage that is
        closest to one of the note's passages. By vectors when the note has
        them (mode vector); otherwise by the rare terms the notes share (keyword)."""
        ids = self.collection_ids(collections)
        vectors = self.store.note_vectors(note_id) if self.vector_status().ok else []
        wider = k * 2 + 5  # stubs and copies are left out of what comes back
        model = self.embedder.model_name if self.embedder is not None else None
        if vectors and not model_reads(model, self.store.note_languages([note_id]).get(note_id, "und")):
            vectors = []  # the model's vectors of this note's language say little of its meaning: by its words
        if vectors:
            hits = self._related_by_vectors(note_id, vectors, wider, ids, model)
        else:
            hits = self._related_by_terms(note_id, wider, collections)
        # Stubs point elsewhere, copies repeat a note above them or the note itself
        # (by name, or by text: a print chapter that holds this section, or a section it holds).
        own = self.store.note_rows([note_id]).get(note_id)
        own_key = copy_key(own[3], own[1]) if own else None
        hits = [h for h in hits if not h.stub and not h.copy_of and copy_key(h.title, h.path) != own_key]
        if own and hits:
            prints = self.store.paragraph_prints([own[2], *(h.docid for h in hits)])
            none: frozenset[int] = frozenset()
            mine = prints.get(own[2], none)
            hits = [h for h in hits if not holds_most_of(prints.get(h.docid, none), mine, self.settings)
                    and not holds_most_of(mine, prints.get(h.docid, none), self.settings)]
        return SearchResult(hits[:k], "vector" if vectors else "keyword")

    def _related_by_vectors(self, note_id: int, vectors: list[tuple[int, bytes]], k: int, ids,
                            model: str | None) -> list[Hit]:
        step = max(1, len(vectors) / self.RELATED_PASSAGES)
        sample = [vectors[int(i * step)] for i in range(min(len(vectors), self.RELATED_PASSAGES))]
        depth = k * 6 + len(vectors)  # own passages come back too and are dropped
        per_passage = [self.vectors.vector_search(blob, depth, ids) for _, blob in sample]
        owner = self.store.passage_notes({cid for ranking in per_passage for cid, _ in ranking})
        # Only notes the model can compare: an English model's vectors put text of another language
        # near other text of that alphabet, whatever it says.
        languages = self.store.note_languages(set(owner.values()))
        owner = {cid: doc for cid, doc in owner.items() if model_reads(model, languages.get(doc, "und"))}
        # A note's score: its best similarity to any passage plus its mean best similarity
        # over the sampled passages (missing from a list: that list's last), so a note
        # related throughout beats one that shares a single paragraph.
        best: dict[int, tuple[float, int]] = {}  # note -> (best similarity, its passage)
        sums: dict[int, list[float]] = {}
        for ranking in per_passage:
            floor = 1.0 - ranking[-1][1] if ranking else 0.0
            seen: dict[int, float] = {}
            for cid, dist in ranking:
                doc = owner.get(cid)
                if doc is None or doc == note_id or doc in seen:
                    continue
                seen[doc] = 1.0 - dist
                if doc not in best or 1.0 - dist > best[doc][0]:
                    best[doc] = (1.0 - dist, cid)
            for doc in set(best) | set(seen):
                sums.setdefault(doc, []).append(seen.get(doc, floor))
        n = len(per_passage)
        scored = sorted(((0.5 * best[doc][0] + 0.5 * sum(sums[doc]) / n, best[doc][1], best[doc][0]) for doc in best), reverse=True)[:k]
        info = self.store.passage_info([cid for _, cid, _ in scored])
        # The rank and distance shown are those of the closest passage pair.
        hits = [self._hit(cid, info[cid], score, vector_rank=rank, vector_distance=1.0 - similarity)
                for rank, (score, cid, similarity) in enumerate(scored, 1) if cid in info]
        return self._finish(hits, info, parse_query(""), "", k)

    RELATED_TERMS = 16

    def _related_by_terms(self, note_id: int, k: int, collections) -> list[Hit]:
        import math

        counts: dict[str, int] = {}
        for _, headings, body in self.store.note_passages(note_id):
            for word in WORD_TOKEN.findall(f"{headings}\n{body}".lower()):
                if len(word) > 2 and not word.isdigit() and word not in STOPWORDS:
                    counts[word] = counts.get(word, 0) + 1
        # The note's most frequent words are the candidates; their rarity comes from the index.
        candidates = sorted(counts, key=lambda w: -counts[w])[: self.RELATED_TERMS * 8]
        df = self.store.passage_counts(candidates)
        total = max(self.store.totals()["passages"], 1)
        # Rare in the index, frequent in the note; a term no other passage has is no link.
        weighted = sorted(((counts[w] * math.log(total / df[w]), w) for w in candidates if df[w] >= 2), reverse=True)
        words = [w for _, w in weighted[: self.RELATED_TERMS]]
        if not words:
            return []
        parsed = ParsedQuery([Term((w,)) for w in words], [])
        ranking = self.keyword_stage(SearchRequest("", parsed, collection_ids=self.collection_ids(collections)), k * 8 + 50)
        owner = self.store.passage_notes([cid for cid, _ in ranking])
        ranking = [(cid, score) for cid, score in ranking if owner.get(cid) not in (None, note_id)]
        info = self.store.passage_info([cid for cid, _ in ranking])
        hits = _best_per_note([self._hit(cid, info[cid], score, bm25_rank=rank, bm25_score=score)
                               for rank, (cid, score) in enumerate(ranking, 1) if cid in info])
        return self._finish(hits, info, parsed, "", k)

    # -- filters without words ------------------------------------------------------------
    def listing(self, k: int, collection_ids: list[int] | None, note_filter: NoteFilter | None) -> list[Hit]:
        """The notes a filter matches, newest first (a search with a filter and no words)."""
        ids = self.store.filtered_notes(k, collection_ids, note_filter)
        info = self.store.passage_info(ids)
        hits = [self._hit(cid, info[cid], 0.0) for cid in ids if cid in info]
        return self._finish(hits, info, parse_query(""), "", k)

    def _background(self):
        """Two worker threads (each with its own SQLite connection) for work done side by side."""
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="pms-retrieval")
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    # -- the note prior's facts ----------------------------------------------------------------
    NOTE_KINDS_KEPT = 20_000

    def note_kinds(self, keys, by: str = "docid", facts: dict | None = None, targets: dict | None = None,
                   version: IndexVersion | None = None) -> dict:
        """docid (or note id, ``by``) -> what the note is to the note prior (note_kind; a pointer
        or redirect without a namesake is a note: RankingSettings.pointer_namesakes).
        ``facts``: key -> (title, path, words, own words, links out, content hash) as the hits'
        rows hold them (else read: Store.note_facts); ``targets`` receives, for a note that
        points elsewhere, the file names it links to (order_by_note_prior). A note's kind is
        kept by its content hash and path, so typing the same search again reads no note's
        text; only a note that links elsewhere and is short or has little prose of its own (a
        table of contents) is read at all. Whether a pointer has a namesake depends on the other
        notes: kept while the index's ``version`` (the search's) stays the same."""
        s = self.settings
        kinds, wanted, named, bare = {}, {}, {}, set()  # bare: a title and a link, no words of its own
        for key, (title, path, words, own_words, links, digest) in (self.store.note_facts(keys, by) if facts is None else facts).items():
            named[key] = (title, path)
            if not links or words < 0 or (words >= s.redirect_words and own_words >= s.stub_words):
                kinds[key] = note_kind(title, path, words, links, None, s)
            elif (digest, path) in self._kinds:
                kinds[key], linked, worded = self._kinds[(digest, path)]
                bare.update([key] if not worded else [])
                if targets is not None and linked is not None:
                    targets[key] = linked
            else:
                wanted[key] = (title, path, words, links, digest)
        names = self.store.link_names(wanted, by) if wanted else {}
        for key, body in (self.store.note_bodies(wanted, by) if wanted else {}).items():
            title, path, words, links, digest = wanted[key]
            linked = names.get(key, set())
            kinds[key] = note_kind(title, path, words, links, body, s, linked)
            worded = kinds[key] not in ("pointer", "redirect") or has_words_of_its_own(body, s)
            bare.update([key] if not worded else [])
            if targets is not None:
                targets[key] = linked
            if digest:
                if len(self._kinds) >= self.NOTE_KINDS_KEPT:
                    self._kinds.clear()
                self._kinds[(digest, path)] = (kinds[key], linked, worded)
        stand_ins = {key: named[key] for key, kind in kinds.items() if kind in ("pointer", "redirect") and key not in bare}
        if stand_ins and s.pointer_namesakes:  # the only note of its name is the answer to it, no pointer
            alone = self._without_namesakes(stand_ins, version)
            kinds.update((key, "note") for key in stand_ins if key in alone)
        return kinds

    def _without_namesakes(self, notes: dict, version: IndexVersion | None) -> set:
        """The keys of ``notes`` (key -> (title, path)) whose title and file name no other note of
        the index has (schema.namesake_keys; Store.notes_of_names: one statement). Verdicts are
        kept while ``version`` holds."""
        if version is None:  # a call that does not know the index's version (related notes) keeps nothing
            kept: dict[tuple[str, str], bool] = {}
        else:
            if self._namesakes[0] != version:
                self._namesakes = (version, {})
            kept = self._namesakes[1]
        asked = list(dict.fromkeys(names for names in notes.values() if names not in kept))
        counts = self.store.notes_of_names([namesake_keys(title, path) for title, path in asked])
        kept.update((names, count > 1) for names, count in zip(asked, counts))  # itself, and another
        return {key for key, names in notes.items() if not kept[names]}

    # -- hits ----------------------------------------------------------------------------
    def _hit(self, cid: int, row: PassageInfo, score: float, **ranks) -> Hit:
        heading_path = f"{row.title} > {row.headings}" if row.headings else row.title
        # str(Path(folder) / path) for a resolved folder and a clean relative path, cheaper.
        abspath = os.path.join(row.collection_path, *row.path.split("/"))
        return Hit(path=row.path, collection=row.collection, abspath=abspath,
                   docid=row.docid, title=row.title, heading_path=heading_path, start_line=row.start_line,
                   end_line=row.end_line, score=score, snippet="", passage_id=cid, text=row.body,
                   tags=[t for t in (row.tags or "").split(",") if t], date=row.date,
                   collection_description=row.collection_description or "", page=row.page, **ranks)

    def _link_titles(self, hits: list[Hit], notes: dict[int, int], label_first: set[int]) -> dict[int, tuple[tuple[str, str], ...]]:
        """Shown passage id -> (link target, title) of each label-less link it holds that names a note,
        for the passages of notes in ``label_first`` (Dendron's: it shows such a link by its note's
        title, enableNoteTitleForLink, on by default). ``notes``: shown passage id -> its note. At
        most one statement (Store.titles_named)."""
        named = {hit.passage_id or 0: (hit.collection, unlabelled_link_targets(hit.text))
                 for hit in hits if notes.get(hit.passage_id or 0) in label_first and "[[" in hit.text}
        if not any(targets for _, targets in named.values()):
            return {}
        titles = self.store.titles_named({(collection, t) for collection, targets in named.values() for t in targets})
        return {pid: tuple(sorted((t, titles[collection, t]) for t in targets if (collection, t) in titles))
                for pid, (collection, targets) in named.items()}

    def _finish(self, hits: list[Hit], rows: dict[int, PassageInfo], parsed: ParsedQuery, query: str, k: int, ranked: int = 0,
                version: IndexVersion | None = None) -> list[Hit]:
        """The first ``k`` results of ``hits`` (ranked for ``ranked`` results, default k), each
        followed by its copies, with snippets: the note prior, the exact-title rule and copies.
        ``rows``: the hits' passages' rows (passage_info), which hold the note facts these read."""
        s = self.settings
        notes = {hit.docid: rows[hit.passage_id or 0] for hit in hits}
        targets: dict[str, set[str]] = {}
        kinds = self.note_kinds(notes, facts={docid: (row.title, row.path, row.words, row.own_words, row.links_out, row.digest)
                                              for docid, row in notes.items()}, targets=targets, version=version) if hits else {}
        for hit in hits:
            hit.stub = kinds.get(hit.docid, "note") != "note"
        if query and any(hit.stub for hit in hits):
            hits = order_by_note_prior(hits, kinds, targets, s)
        # A note whose title is exactly what was typed comes first: typing a
        # note's name is the most common way to look for it (not a stub's).
        wanted = " ".join(WORD_TOKEN.findall(query.lower())) if s.exact_title_first else ""
        if wanted:
            hits.sort(key=lambda h: kinds.get(h.docid) in ("empty", "pointer", "redirect")
                      or " ".join(WORD_TOKEN.findall(h.title.lower())) != wanted)
        ranked = max(ranked, k)
        if len(hits) > 1:
            head = hits[: max(self.settings.copy_depth, ranked)]
            prints = {h.docid: prints_of(notes[h.docid].prints) for h in head if notes[h.docid].prints is not None}
            hits = order_copies(head, prints, self.settings) + hits[len(head):]
        hits = first_results(mark_copies(hits[: ranked * self.settings.pool_per_k]), k)
        match = parsed.match_any()
        folders = self.store.folder_descriptions(version) if hits else {}
        # Snippets are cut from the passage as a reader sees it (passage_display_text),
        # without its heading line when every front end shows that heading above it. A copy
        # has none: every front end shows it as a line under its original.
        shown_notes = {hit.passage_id or 0: rows[hit.passage_id or 0].note_id for hit in hits if not hit.copy_of}
        linked = {note: rows[passage].digest for passage, note in shown_notes.items() if "[[" in rows[passage].body}
        label_first = self.store.labels_first(linked) if linked else set()  # Dendron's [[label|note]]: shown as the label
        titles = self._link_titles(hits, shown_notes, label_first)
        shown = {pid: without_heading_line(_shown_passage(hit.text, note in label_first, titles.get(pid, ())), hit.heading_path)
                 for hit in hits if not hit.copy_of for pid in [hit.passage_id or 0] for note in [shown_notes[pid]]}
        snippets = self.store.fts_snippets(match, shown) if match else {}
        for hit in hits:
            hit.folder_description = folder_description(folders.get(hit.collection, {}), hit.path)
            if hit.copy_of:
                continue
            marked = snippets.get(hit.passage_id or 0)
            hit.snippet, hit.marks = (snippet_spans(snippet_with_lead(marked, shown[hit.passage_id or 0]))
                                      if marked and MARK_OPEN in marked else mark_terms(shown[hit.passage_id or 0], parsed.words))
        return hits


# Typing searches the same passages keystroke after keystroke: their display text
# is kept (a passage is at most a few KB; a note body, as note_substance reads, never).
_shown_passage = functools.lru_cache(maxsize=1024)(passage_display_text)


def _best_per_note(hits: list[Hit]) -> list[Hit]:
    """Each note's best passage, in the list's order; its rank becomes the note's
    place among notes (as in hybrid search), not its passage's place among passages."""
    seen, out = set(), []
    for hit in hits:
        key = (hit.collection, hit.path)
        if key not in seen:
            seen.add(key)
            out.append(hit)
    for place, hit in enumerate(out, 1):
        if hit.bm25_rank is not None:
            hit.bm25_rank = place
        if hit.vector_rank is not None:
            hit.vector_rank = place
    return out
