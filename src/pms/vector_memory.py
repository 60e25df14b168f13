"""The index's vectors held in memory by a long-running process: ``VectorMatrix`` (exact
KNN and distances by numpy, answering as sqlite-vec does) and ``VectorMemory`` (kept current
with the index, made only on request, an HNSW graph when asked).

Owns: reading every vector into memory, when it is worth it, and answering the Store's
three vector calls from there. The vectors as stored, and sqlite-vec, stay in store.py.

May import: config, filters, store.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Sequence

from .config import PMSError, _typing, module_available
from .filters import NoteFilter
from .store import VECTOR_KNN_MAX, Store


# Over this many MB of vectors, VectorMemory leaves searches to sqlite-vec.
VECTOR_MATRIX_MAX_MB = 1024
# HNSW's candidates kept while searching (VectorMemory with ann): recall@10 against
# exact search >= 0.99 on bench/scale.py's clustered vectors.
VECTOR_ANN_EF = 256


class VectorMatrix:
    """The index's vectors in memory: exact KNN and any passage's distance by numpy
    (einsum in int32: exact and single-threaded), faster than sqlite-vec's scan.

    Distances are computed as sqlite-vec's ``distance_cosine_int8`` computes them, and
    equal distances come in its order (``tie_order``), so a search returns what
    sqlite-vec returns. ``version`` is the index's ``vectors_version`` when read.
    """

    def __init__(self, version, ids, collection_ids, vectors, tie_order=None):
        import numpy as np

        self.np, self.version = np, version
        self.ids = np.ascontiguousarray(ids, dtype=np.int64)
        self.tie_order = np.arange(len(self.ids)) if tie_order is None else np.ascontiguousarray(tie_order, dtype=np.int64)
        self.collection_ids = np.ascontiguousarray(collection_ids, dtype=np.int64)
        self.matrix = np.ascontiguousarray(vectors, dtype=np.int8)
        self.norms = np.sqrt(np.einsum("ij,ij->i", self.matrix, self.matrix, dtype=np.int64).astype(np.float64))
        self._by_id = np.argsort(self.ids, kind="stable")                  # for lookups by passage id
        self._sorted_ids = self.ids[self._by_id]

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.ids, self.tie_order, self.collection_ids, self.matrix, self.norms, self._by_id,
                                      self._sorted_ids))

    def _distances(self, query_blob: bytes, rows=None):
        """float32 cosine distances of every vector (or of ``rows``) to the query, as sqlite-vec computes them."""
        np = self.np
        query = np.frombuffer(query_blob, dtype=np.int8)
        if rows is not None and len(rows) * 4 > len(self.ids):
            return self._distances(query_blob)[rows]  # cheaper than copying most of the matrix
        matrix, norms = (self.matrix, self.norms) if rows is None else (self.matrix[rows], self.norms[rows])
        dots = np.einsum("ij,j->i", matrix, query, dtype=np.int32)
        query_norm = np.sqrt(float(np.dot(query.astype(np.int32), query.astype(np.int32))))
        with np.errstate(divide="ignore", invalid="ignore"):
            return (1.0 - dots / (norms * query_norm)).astype(np.float32)

    def search(self, query_blob: bytes, limit: int, collection_ids: Sequence[int] | None = None,
               passage_ids: Iterable[int] | None = None) -> list[tuple[int, float]]:
        """(passage id, cosine distance) nearest first, among the passages of
        ``collection_ids`` and, when given, ``passage_ids``."""
        np = self.np
        rows = None
        if collection_ids or passage_ids is not None:
            keep = np.ones(len(self.ids), dtype=bool)
            if collection_ids:
                keep &= np.isin(self.collection_ids, np.asarray(list(collection_ids), dtype=np.int64))
            if passage_ids is not None:
                keep &= np.isin(self.ids, np.fromiter(passage_ids, dtype=np.int64))
            rows = np.flatnonzero(keep)
        distances = self._distances(query_blob, rows)
        limit = min(int(limit), VECTOR_KNN_MAX, len(distances))
        if limit <= 0:
            return []
        best = np.argpartition(distances, limit - 1)[:limit] if limit < len(distances) else np.arange(len(distances))
        # Every passage tied with the last one kept competes for its place, in sqlite-vec's order.
        cut = distances[best].max()
        if not np.isnan(cut):  # (NaN: a zero vector, which has no distance; it sorts last)
            best = np.union1d(best[distances[best] < cut], np.flatnonzero(distances == cut))
        found = best if rows is None else rows[best]
        order = np.lexsort((self.tie_order[found], distances[best]))[:limit]
        return list(zip(self.ids[found[order]].tolist(), distances[best[order]].astype(np.float64).tolist()))

    def _rows(self, passage_ids: Iterable[int]):
        """(the passage ids that have a vector, their rows in the matrix)."""
        np = self.np
        wanted = np.unique(np.fromiter(passage_ids, dtype=np.int64))
        at = np.searchsorted(self._sorted_ids, wanted)
        at[at >= len(self._sorted_ids)] = 0
        found = self._sorted_ids[at] == wanted if len(self._sorted_ids) else np.zeros(len(wanted), dtype=bool)
        return wanted[found], self._by_id[at[found]]

    def distances(self, query_blob: bytes, passage_ids: Iterable[int]) -> dict[int, float]:
        """passage id -> cosine distance to the query (a passage without a vector is left out)."""
        ids, rows = self._rows(passage_ids)
        return dict(zip(ids.tolist(), self._distances(query_blob, rows).astype(self.np.float64).tolist()))

    def vectors(self, passage_ids: Iterable[int]) -> dict[int, bytes]:
        """passage id -> its int8 vector, as sqlite-vec stores it (a passage without one is left out)."""
        ids, rows = self._rows(passage_ids)
        return {cid: self.matrix[row].tobytes() for cid, row in zip(ids.tolist(), rows.tolist())}


class VectorMemory:
    """The index's vectors held in memory by a long-running process, made only on request
    (KnowledgeBase.keep_vectors_in_memory): a one-shot CLI search never reads every vector.

    It answers the Store's three vector calls from memory once the vectors are held, else
    by the Store's SQL. Never stale: a writer moves ``vectors_version``, and they are read
    again. sqlite-vec answers before ``after`` searches with the same vectors, within
    SETTLE_S of a change (a sync adding vectors), and when they would take more than
    ``max_mb`` (or numpy is missing).

    ``ann``: a KNN without filters goes to an HNSW graph (usearch, an optional extra),
    its passages' distances then computed exactly.
    """

    SETTLE_S = 2.0

    def __init__(self, store: Store, max_mb: float = VECTOR_MATRIX_MAX_MB, after: int = 1, ann: bool = False):
        if ann and not module_available("usearch"):
            raise PMSError("approximate vector search needs usearch: pip install usearch")
        self.store, self.max_mb, self.after, self.ann = store, max_mb, after, ann
        self._matrix: VectorMatrix | None = None
        self._graph: _typing.Any = None  # usearch Index over the matrix, when ann (an optional package)
        self._lock = threading.Lock()
        # (vectors_version, searches with it, when it was first seen, whether it replaced another)
        self._unread: tuple[str | None, int, float, bool] | None = None

    @property
    def matrix(self) -> VectorMatrix | None:
        """The vectors held now, if they are the index's current ones."""
        matrix = self._matrix
        return matrix if matrix is not None and matrix.version == self.store.vectors_version() else None

    @property
    def nbytes(self) -> int:
        """What the vectors held take (0 before they are read)."""
        matrix, graph = self._matrix, self._graph
        return (matrix.nbytes if matrix is not None else 0) + (int(graph.memory_usage) if graph is not None else 0)

    def current(self) -> VectorMatrix | None:
        """The vectors in memory, read now if it is time to (see the class)."""
        store = self.store
        version = store.vectors_version()
        matrix = self._matrix
        if matrix is not None and matrix.version == version:
            return matrix
        with self._lock:
            matrix = self._matrix
            if matrix is not None and matrix.version == version:
                return matrix
            replaced = matrix is not None or self._unread is not None
            self._matrix = self._graph = None
            seen, searches, since, changed = self._unread or (None, 0, 0.0, False)
            if seen != version:
                seen, searches, since, changed = version, 0, time.monotonic(), replaced
            searches += 1
            self._unread = (seen, searches, since, changed)
            if searches <= self.after or (changed and time.monotonic() - since < self.SETTLE_S):
                return None
            dim = int(store.get_meta("embed_dim") or 0)
            count = store.db.execute("SELECT count(*) FROM chunk_vectors_rowids").fetchone()[0] if dim else 0
            if not dim or count * dim > self.max_mb * 1e6 or not module_available("numpy"):
                self._unread = (version, -(1 << 62), since, changed)  # not again for these vectors
                return None
            matrix = VectorMatrix(version, *store.read_vectors())
            if self.ann and len(matrix):
                from usearch.index import Index

                graph = Index(ndim=matrix.matrix.shape[1], metric="cos", dtype="i8", connectivity=16,
                              expansion_add=128, expansion_search=VECTOR_ANN_EF)
                graph.add(matrix.ids, matrix.matrix, threads=os.cpu_count() or 1)
                self._graph = graph
            self._matrix = matrix
            return matrix

    def vector_search(self, query_blob: bytes, limit: int, collection_ids: Sequence[int] | None,
                      note_filter: NoteFilter | None = None) -> list[tuple]:
        """As Store.vector_search."""
        matrix = self.current()
        if matrix is None:
            return self.store.vector_search(query_blob, limit, collection_ids, note_filter)
        graph = self._graph
        if graph is not None and not collection_ids and not note_filter:
            import numpy as np

            keys = graph.search(np.frombuffer(query_blob, dtype=np.int8), min(int(limit), VECTOR_KNN_MAX)).keys
            found = matrix.distances(query_blob, keys.tolist())
            return sorted(found.items(), key=lambda item: item[1])
        passage_ids = set(self.store.filtered_passages(note_filter)) if note_filter else None
        return matrix.search(query_blob, limit, collection_ids, passage_ids)

    def vector_distances(self, query_blob: bytes, passage_ids: Iterable[int]) -> dict[int, float]:
        """As Store.vector_distances."""
        matrix = self.current()
        return matrix.distances(query_blob, passage_ids) if matrix is not None else self.store.vector_distances(query_blob, passage_ids)

    def vectors_of(self, passage_ids: Sequence[int]) -> dict[int, bytes]:
        """As Store.vectors_of; never reads the vectors in (only a KNN does)."""
        matrix = self.matrix
        return matrix.vectors(passage_ids) if matrix is not None else self.store.vectors_of(passage_ids)
