"""Colorings of sparsity patterns, and the decompression they allow (issue 16).

A pattern is a ``scipy.sparse`` matrix (or anything ``scipy.sparse.csr_array`` accepts) whose
stored entries are the structural nonzeros of a Jacobian ``J`` (``m x n``) or a Hessian ``H``
(``n x n``, symmetric).

- **Column coloring** (forward mode): columns of one color share no row, so one pushforward along
  the sum of their basis vectors gives each of them (a partial distance-2 coloring of the column
  side of the bipartite graph). **Row coloring** (reverse mode) is the same on ``J.T``.
- **Star coloring** (Hessians, symmetric one-sided decompression): a distance-1 coloring of the
  adjacency graph of ``H`` in which every path on four vertices uses at least three colors. Each
  nonzero ``H[i, j]`` is then read from one Hessian-vector product: from the product along
  ``j``'s color at row ``i`` where no other column of that color meets row ``i``, else (by
  symmetry) from the product along ``i``'s color at row ``j``. An arrowhead needs 2 colors where
  a column coloring needs ``n``.

Both are greedy (Gebremedhin, Manne and Pothen, "What color is your Jacobian? Graph coloring for
computing derivatives", SIAM Review 47(4), 2005: partial distance-2 coloring, and star coloring
algorithm 4.1 there, here with per-vertex color counts so that a hub vertex costs its degree once
rather than once per neighbor), over the vertices in one of :data:`ORDERS`. The one-sided colorings run
compiled (:func:`_first_fit`, SciPy's own grouping of columns), on the pattern itself.

Every coloring is checked before use: :func:`decompression` builds the index of each nonzero in
the compressed products and raises where two nonzeros would share one entry, so an invalid
coloring is an error, never a wrong derivative.

Size: over 400 lines in one module, because the colorings (one-sided, star, acyclic, bicoloring), their vertex orders and their decompressions share the
conflict graphs and are checked against each other.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

ORDERS = (
    "largest_first",
    "natural",
    "smallest_last",
    "incidence_degree",
    "dynamic_largest_first",
    "random",
    "best",
)
SYMMETRIC = ("auto", "star", "acyclic")
BEST_OF = ("largest_first", "smallest_last", "incidence_degree", "dynamic_largest_first", "natural")
BEST_RANDOM = 3  # "best" also tries this many seeded random orders
Order = Sequence[int] | np.ndarray  # vertices in the order a greedy coloring takes them


def csr_pattern(pattern: Any, shape: tuple[int, int] | None = None) -> Any:
    """``pattern`` as a canonical boolean ``scipy.sparse.csr_array`` (sorted indices, no duplicates,
    no explicitly stored zeros)."""
    import scipy.sparse as sp

    p = sp.csr_array(pattern)
    p.eliminate_zeros()
    p = sp.csr_array(p, dtype=bool)
    p.sum_duplicates()
    p.sort_indices()
    if shape is not None and p.shape != tuple(shape):
        raise ValueError(f"the sparsity pattern has shape {p.shape}, expected {tuple(shape)}")
    return p


@dataclasses.dataclass(frozen=True)
class GreedyColoring:
    """Greedy coloring of a sparsity pattern (the ``coloring`` of :class:`AutoSparse`).

    - ``order``: the order in which the vertices of the conflict graph are colored:
      ``"largest_first"`` (default: by decreasing degree), ``"dynamic_largest_first"`` (next the
      vertex with the most uncolored neighbors), ``"smallest_last"`` (Matula and Beck: the vertex of
      smallest degree among the remaining ones goes last), ``"incidence_degree"`` (next the vertex
      with the most colored neighbors), ``"natural"`` (index order; SciPy's ``group_columns``),
      ``"random"`` (a permutation drawn from ``seed``) or ``"best"`` (all of these, and three random
      orders, keeping the coloring with the fewest colors).
    - ``symmetric``: the coloring of a Hessian: ``"star"`` (each entry read from one Hessian-vector
      product), ``"acyclic"`` (fewer colors; the entries found by substitution along the
      two-colored trees) or ``"auto"`` (both, keeping the one with fewer colors, star on a tie).
    - ``recolor``: Jacobians: passes of Culberson's iterated greedy after the first coloring (the
      columns or rows again, color class by color class; never more colors, often fewer: the
      Brusselator 12 -> 10 colors in largest first order); 0 keeps the first coloring.
    - ``seed``: the seed of ``"random"``, of the random orders of ``"best"`` and of the recoloring.
    """

    order: str = "largest_first"
    symmetric: str = "auto"
    recolor: int = 12
    seed: int = 0

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ValueError(
                f"GreedyColoring(order={self.order!r}): order must be one of {ORDERS}, e.g. "
                f'GreedyColoring(order="smallest_last")'
            )
        if not isinstance(self.recolor, int) or self.recolor < 0:
            raise ValueError(f"GreedyColoring(recolor={self.recolor!r}): recolor must be an integer >= 0, e.g. 12")
        if self.symmetric not in SYMMETRIC:
            raise ValueError(
                f"GreedyColoring(symmetric={self.symmetric!r}): symmetric must be one of {SYMMETRIC}, e.g. "
                f'GreedyColoring(symmetric="acyclic")'
            )

    def columns(self, pattern: Any) -> np.ndarray:
        """A partial distance-2 coloring of the columns of ``pattern`` (forward mode)."""
        return self._distance2(csr_pattern(pattern))

    def rows(self, pattern: Any) -> np.ndarray:
        """A partial distance-2 coloring of the rows of ``pattern`` (reverse mode)."""
        return self._distance2(csr_pattern(csr_pattern(pattern).T))

    def _distance2(self, p: Any) -> np.ndarray:
        fit = _first_fit(p)
        return self._best(_ConflictGraph(p), lambda graph, order: _greedy(fit, order, self.recolor, self.seed))

    def star(self, pattern: Any) -> np.ndarray:
        """A star coloring of the symmetric ``pattern`` (Hessians, direct recovery)."""
        return self._best(_adjacency(csr_pattern(pattern)), _star)

    def acyclic(self, pattern: Any) -> np.ndarray:
        """An acyclic coloring of the symmetric ``pattern`` (Hessians, recovery by substitution)."""
        return self._best(_adjacency(csr_pattern(pattern)), _acyclic)

    def hessian(self, pattern: Any) -> tuple[str, np.ndarray]:
        """``(kind, colors)`` for the symmetric ``pattern``: kind ``"star"`` or ``"acyclic"`` as
        ``symmetric`` asks (``"auto"``: the one with fewer colors, star on a tie)."""
        graph = _adjacency(csr_pattern(pattern))
        star = self._best(graph, _star) if self.symmetric != "acyclic" else None
        acyclic = self._best(graph, _acyclic) if self.symmetric != "star" else None
        if star is None or (acyclic is not None and _count(acyclic) < _count(star)):
            return "acyclic", acyclic  # type: ignore[return-value]
        return "star", star

    def bidirectional(self, pattern: Any) -> tuple[np.ndarray, np.ndarray]:
        """A bicoloring of ``pattern``: ``(column_colors, row_colors)``, -1 for a column or row in
        no seed. A star coloring of the bipartite graph ``[[0, J.T], [J, 0]]`` (Montoison, Dalle and
        Gebremedhin 2025): each nonzero is read from the forward product along its column's color or
        from the reverse product along its row's color; the colors no nonzero needs are dropped."""
        import scipy.sparse as sp

        p = csr_pattern(pattern)
        m, n = p.shape
        graph = csr_pattern(sp.block_array([[None, p.T], [p, None]], format="csr"))
        return _bicolors(p, self._best(graph, _star), n)

    def _best(self, graph: Any, color: Any) -> np.ndarray:
        if self.order != "best":
            return color(graph, _order(graph, self.order, self.seed))
        best = None
        tries = [_order(graph, o, self.seed) for o in BEST_OF]
        tries += [_order(graph, "random", self.seed + k) for k in range(BEST_RANDOM)]
        for order in tries:
            colors = color(graph, order)
            if best is None or _count(colors) < _count(best):
                best = colors
        return best  # type: ignore[return-value]


def _count(colors: np.ndarray) -> int:
    return int(colors.max()) + 1 if colors.size else 0


def conflict_size(pattern: Any) -> int:
    """The number of entries of the column intersection graph ``pattern.T @ pattern`` (sum of the
    squared row counts): what a column coloring costs in memory and time."""
    counts = np.diff(pattern.indptr).astype(np.int64)
    return int(np.sum(counts * counts))


class _ConflictGraph:
    """The column intersection graph of ``p`` (:func:`_intersection_graph`), built at its first use:
    the orders by degree read it, the coloring itself does not (:func:`_first_fit`), so
    ``"natural"`` and ``"random"`` never build it."""

    def __init__(self, p: Any) -> None:
        self.p = p
        self.shape = (p.shape[1], p.shape[1])

    @functools.cached_property
    def csr(self) -> Any:
        return _intersection_graph(self.p)

    @property
    def indptr(self) -> np.ndarray:
        return self.csr.indptr  # type: ignore[no-any-return]

    @property
    def indices(self) -> np.ndarray:
        return self.csr.indices  # type: ignore[no-any-return]


def _first_fit(p: Any) -> Callable[[Order], np.ndarray]:
    """``fit(order)``: the greedy (first fit) coloring of the columns of ``p`` in ``order``, each
    column the smallest color no earlier column sharing a row with it has.

    SciPy's compiled ``group_sparse`` (the grouping of ``scipy.optimize``'s finite differences,
    private to SciPy) builds the colors one at a time, each the columns in ``order`` that share no
    row with a column already in it: the same coloring as the one-vertex-at-a-time greedy (a column
    gets color ``k`` exactly when no earlier neighbor has ``k`` and each smaller color has an earlier
    neighbor), tested against :func:`_greedy_pass` on the intersection graph. It reads ``p``'s columns
    directly (no intersection graph: 7e6 entries instead of 24e6 for a 3-D stencil at n = 1e6, and
    0.1 s instead of 6-8 s in Python there). Where SciPy lacks it or it fails its probe
    (:func:`_compiled_grouping`), the Python greedy on the intersection graph gives the same colors,
    slower."""
    import scipy.sparse as sp

    m, n = p.shape
    group_sparse = _compiled_grouping()
    if group_sparse is None:
        graph = _ConflictGraph(p)
        return lambda order: _greedy_pass(graph, order)
    csc = sp.csc_array(p)
    csc.sort_indices()
    wide = csc.nnz > np.iinfo(np.int32).max or max(m, n) > np.iinfo(np.int32).max
    index = np.int64 if wide else np.int32

    def fit(order: Order) -> np.ndarray:
        perm = np.asarray(order, dtype=np.int64)
        lengths = np.diff(csc.indptr)[perm]
        indptr = np.zeros(n + 1, dtype=index)
        np.cumsum(lengths, out=indptr[1:])
        starts = np.repeat(csc.indptr[perm].astype(np.int64) - indptr[:-1], lengths)
        indices = csc.indices[starts + np.arange(int(indptr[-1]))].astype(index, copy=False)
        colors = np.empty(n, dtype=np.int64)
        colors[perm] = group_sparse(m, n, indices, indptr)  # column k of the permuted p is perm[k]
        return colors

    return fit


@functools.cache
def _compiled_grouping() -> Callable[..., np.ndarray] | None:
    """SciPy's ``group_sparse(m, n, indices, indptr)`` (private to SciPy: ``scipy.optimize``'s), once
    it has grouped a known pattern as the greedy does; None where it is missing or differs (a
    SciPy that changed it), and the colorings then run in Python, to the same colors."""
    try:
        from scipy.optimize._group_columns import group_sparse
    except ImportError:
        return None
    # columns 0-1 share row 0, 1-2 row 1, 2-3 row 2 (a path): greedy in index order gives 0 1 0 1
    indices, indptr = np.array([0, 0, 1, 1, 2, 2], np.int32), np.array([0, 1, 3, 5, 6], np.int32)
    try:
        probe = np.asarray(group_sparse(3, 4, indices, indptr))
    except Exception:  # noqa: BLE001 - any failure of a private function: the Python coloring instead
        return None
    return group_sparse if probe.tolist() == [0, 1, 0, 1] else None  # type: ignore[no-any-return]


def _intersection_graph(p: Any) -> Any:
    """Columns that share a row: ``p.T @ p`` without its diagonal (CSR, sorted)."""
    import scipy.sparse as sp

    ones = sp.csr_array((np.ones(p.nnz, np.int32), p.indices, p.indptr), shape=p.shape)
    graph = sp.csr_array(ones.T @ ones)
    graph.setdiag(0)
    return csr_pattern(graph)


def _adjacency(p: Any) -> Any:
    """The graph of a symmetric pattern: ``p | p.T`` without its diagonal."""
    import scipy.sparse as sp

    if p.shape[0] != p.shape[1]:
        raise ValueError(f"a Hessian's sparsity pattern must be square, got shape {p.shape}")
    graph = sp.csr_array(p + p.T)
    graph.setdiag(False)
    return csr_pattern(graph)


# -- vertex orders -----------------------------------------------------------------------------------


def _order(graph: Any, order: str, seed: int = 0) -> list[int]:
    n = graph.shape[0]
    if order == "natural":
        return list(range(n))
    degrees = np.diff(graph.indptr)
    if order == "largest_first":
        return np.argsort(-degrees, kind="stable").tolist()
    if order == "random":
        return np.random.default_rng(seed).permutation(n).tolist()
    return _dynamic_order(graph, degrees, order)


def _dynamic_order(graph: Any, degrees: np.ndarray, order: str) -> list[int]:
    """The orders by a degree that changes as vertices are ordered, with a bucket queue (stale
    entries skipped when popped): ``"dynamic_largest_first"`` takes the vertex with the most
    unordered neighbors, ``"incidence_degree"`` the one with the most ordered neighbors (largest
    degree first among equals), ``"smallest_last"`` puts the vertex with the fewest unordered
    neighbors last."""
    n = graph.shape[0]
    if n == 0:
        return []
    indptr, indices = graph.indptr.tolist(), graph.indices.tolist()
    largest = order != "smallest_last"
    step = 1 if order == "incidence_degree" else -1
    degree = [0] * n if order == "incidence_degree" else degrees.tolist()
    buckets: list[list[int]] = [[] for _ in range(int(degrees.max(initial=0)) + 1)]
    # pushed by increasing static degree: the last pushed (popped first) is the largest among equals
    by_degree = np.argsort(degrees, kind="stable")
    for v in (by_degree if largest else by_degree[::-1]).tolist():
        buckets[degree[v]].append(v)
    done = [False] * n
    out = []
    top = max(degree) if largest else min(degree)
    for _ in range(n):
        while True:
            bucket = buckets[top]
            while bucket and (done[bucket[-1]] or degree[bucket[-1]] != top):
                bucket.pop()
            if bucket:
                break
            top += -1 if largest else 1
        v = bucket.pop()
        done[v] = True
        out.append(v)
        for w in indices[indptr[v] : indptr[v + 1]]:
            if not done[w]:
                d = degree[w] + step
                degree[w] = d
                buckets[d].append(w)
                if (d > top) if largest else (d < top):
                    top = d
    return out[::-1] if order == "smallest_last" else out


# -- colorings -----------------------------------------------------------------------------------------


def _greedy(fit: Callable[[Order], np.ndarray], order: Order, passes: int = 0, seed: int = 0) -> np.ndarray:
    """The greedy coloring ``fit(order)``, then ``passes`` rounds of Culberson's iterated greedy
    (stopped after six passes without a gain).

    A round is the greedy coloring again over the vertices taken class by class (Culberson, "Iterated
    greedy graph coloring and the difficulty landscape", 1992): a class has no inner edge, so each
    class fits in one color and the count never grows, and it often drops (on the Brusselator,
    largest first 12 -> 10)."""
    colors = fit(order)
    rng = np.random.default_rng(seed)
    best, since = _count(colors), 0
    for k in range(passes):
        count = _count(colors)
        if count < best:
            best, since = count, 0
        if count <= 1 or since == 6:  # two rounds of the three class orders without a gain: done
            break
        since += 1
        # the classes in reverse order, largest first, or shuffled, in turn (Culberson 1992)
        if k % 3 == 0:
            classes = np.arange(count)[::-1]
        elif k % 3 == 1:
            classes = np.argsort(-np.bincount(colors, minlength=count), kind="stable")
        else:
            classes = rng.permutation(count)
        rank = np.empty(count, dtype=np.int64)
        rank[classes] = np.arange(count)
        colors = fit(np.argsort(rank[colors], kind="stable"))  # class by class, index order within
    return colors


def _greedy_pass(graph: Any, order: Order) -> np.ndarray:
    """Each vertex in ``order`` the smallest color none of its colored neighbors has."""
    n = graph.shape[0]
    indptr, indices = graph.indptr.tolist(), graph.indices.tolist()
    colors = [-1] * n
    mark = [-1] * (int(np.diff(graph.indptr).max(initial=0)) + 2)  # mark[c] == v: c is taken near v
    for v in order:
        for w in indices[indptr[v] : indptr[v + 1]]:
            c = colors[w]
            if c >= 0:
                mark[c] = v
        c = 0
        while mark[c] == v:
            c += 1
        colors[v] = c
    return np.asarray(colors, dtype=np.int64)


def _star(graph: Any, order: list[int]) -> np.ndarray:
    """Greedy star coloring (algorithm 4.1 of Gebremedhin, Manne and Pothen 2005).

    Vertex v may not take: the color of a colored neighbor w (distance 1); the color of a colored x
    two steps away through an uncolored w (so that w can still be colored); the color of a colored x
    two steps away through a colored w where x has another neighbor of w's color (that would make
    the path v-w-x-y two-colored). The last rule is kept incrementally: ``count[x][c]`` is the number
    of colored neighbors of x with color c, and ``bad[w]`` the colors of x in N(w) with
    ``count[x][color[w]] >= 2``."""
    n = graph.shape[0]
    indptr, indices = graph.indptr.tolist(), graph.indices.tolist()
    colors = [-1] * n
    count: list[dict[int, int]] = [{} for _ in range(n)]
    bad: list[set[int]] = [set() for _ in range(n)]
    for v in order:
        neighbors = indices[indptr[v] : indptr[v + 1]]
        forbidden: set[int] = set()
        for w in neighbors:
            cw = colors[w]
            if cw >= 0:
                forbidden.add(cw)
                forbidden |= bad[w]
            else:
                forbidden.update(count[w])  # the colors of w's colored neighbors
        c = 0
        while c in forbidden:
            c += 1
        colors[v] = c
        # v is now an x for its colored neighbors w: count[v] already holds its neighbors' colors
        for w in neighbors:
            cw = colors[w]
            if cw >= 0 and count[v].get(cw, 0) >= 2:
                bad[w].add(c)
        # v is a new neighbor of color c for each x in N(v)
        for x in neighbors:
            k = count[x].get(c, 0) + 1
            count[x][c] = k
            cx = colors[x]
            if cx < 0 or k < 2:
                continue
            bad[v].add(cx)
            if k == 2:  # the other neighbor of x with color c learns it too (once per x and c)
                for w in indices[indptr[x] : indptr[x + 1]]:
                    if w != v and colors[w] == c:
                        bad[w].add(cx)
    return np.asarray(colors, dtype=np.int64)


def _acyclic(graph: Any, order: list[int]) -> np.ndarray:
    """Greedy acyclic coloring: a distance-1 coloring in which every cycle has at least three colors,
    so that the edges between any two colors form a forest (Gebremedhin, Tarafdar, Manne and Pothen,
    "New acyclic and star coloring algorithms with application to computing Hessians", SIAM J. Sci.
    Comput. 29(3), 2007, with the forests kept in union-find sets as there).

    The tree of vertex u in the forest of colors (color[u], c) is the set of ``key(u, c)``. Vertex v
    may take color c when no neighbor has c and no two neighbors w1, w2 of one color lie in one tree
    of the forest (c, color[w]) (v would close a two-colored cycle through them)."""
    n = graph.shape[0]
    indptr, indices = graph.indptr.tolist(), graph.indices.tolist()
    colors = [-1] * n
    parent: dict[tuple[int, int], tuple[int, int]] = {}

    def find(a: tuple[int, int]) -> tuple[int, int]:
        root = a
        while True:
            up = parent.get(root)
            if up is None:
                break
            root = up
        while a != root:  # path compression
            up = parent[a]
            parent[a] = root
            a = up
        return root

    for v in order:
        colored = [w for w in indices[indptr[v] : indptr[v + 1]] if colors[w] >= 0]
        near = {colors[w] for w in colored}
        c = 0
        while True:
            if c not in near:
                seen: set[tuple[int, tuple[int, int]]] = set()
                for w in colored:
                    key = (colors[w], find((w, c)))
                    if key in seen:
                        break
                    seen.add(key)
                else:
                    break
            c += 1
        colors[v] = c
        for w in colored:  # v joins the tree of w in the forest (c, color[w])
            a, b = find((v, colors[w])), find((w, c))
            if a != b:
                parent[a] = b
    return np.asarray(colors, dtype=np.int64)


def _bicolors(p: Any, colors: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The column and row colors of a star coloring of the bipartite graph of ``p`` (columns first),
    keeping only the colors some nonzero is read from: those it must be read from first, then, while
    nonzeros remain, the color that serves most of them."""
    m = p.shape[0]
    rows = np.repeat(np.arange(m), np.diff(p.indptr))
    cols = p.indices.astype(np.int64)
    col_colors, row_colors = colors[:n], colors[n:]
    k = _count(colors)
    forward = _unique(rows, col_colors[cols], m, max(k, 1))  # readable from the column's color
    reverse = _unique(cols, row_colors[rows], n, max(k, 1))  # readable from the row's color
    if not (forward | reverse).all():
        raise ValueError(_invalid("bidirectional", rows, cols, forward | reverse))
    keep_f = np.zeros(k, dtype=bool)
    keep_r = np.zeros(k, dtype=bool)
    keep_f[col_colors[cols[forward & ~reverse]]] = True
    keep_r[row_colors[rows[reverse & ~forward]]] = True
    while True:
        served = (forward & keep_f[col_colors[cols]]) | (reverse & keep_r[row_colors[rows]])
        left = ~served
        if not left.any():
            break
        by_f = np.bincount(col_colors[cols[left & forward]], minlength=k)
        by_r = np.bincount(row_colors[rows[left & reverse]], minlength=k)
        if by_f.max() >= by_r.max():
            keep_f[int(by_f.argmax())] = True
        else:
            keep_r[int(by_r.argmax())] = True
    return _renumber(col_colors, keep_f), _renumber(row_colors, keep_r)


def _renumber(colors: np.ndarray, keep: np.ndarray) -> np.ndarray:
    new = np.full(keep.size, -1, dtype=np.int64)
    new[keep] = np.arange(int(keep.sum()))
    return new[colors] if colors.size else colors.astype(np.int64)


# -- decompression ---------------------------------------------------------------------------------


def decompression(pattern: Any, colors: np.ndarray, kind: str) -> np.ndarray:
    """For each stored entry of ``pattern`` (CSR order), its flat index in the compressed products
    stacked as ``B[color, :]`` (shape ``(n_colors, length)``), for ``kind``:

    - ``"columns"``: ``B[c] = J @ seed_c`` (length m); entry (i, j) is ``B[colors[j], i]``;
    - ``"rows"``: ``B[c] = seed_c @ J`` (length n); entry (i, j) is ``B[colors[i], j]``;
    - ``"star"``: ``B[c] = H @ seed_c`` (length n); entry (i, j) is ``B[colors[j], i]`` where no
      other column of ``colors[j]`` meets row i, else ``B[colors[i], j]``.

    Raises ``ValueError`` where the coloring does not determine an entry (an invalid coloring)."""
    p = csr_pattern(pattern)
    m, n = p.shape
    rows = np.repeat(np.arange(m), np.diff(p.indptr))
    cols = p.indices.astype(np.int64)
    colors = np.asarray(colors, dtype=np.int64)
    n_colors = int(colors.max()) + 1 if colors.size else 0
    if kind == "rows":
        if colors.shape != (m,):
            raise ValueError(f"a row coloring needs one color per row ({m}), got {colors.shape}")
        unique = _unique(cols, colors[rows], n, n_colors)  # per column j: rows of one color meeting it
        if not unique.all():
            raise ValueError(_invalid("row", rows, cols, unique))
        return colors[rows] * n + cols
    if colors.shape != (n,):
        raise ValueError(f"a {kind} coloring needs one color per column ({n}), got {colors.shape}")
    unique = _unique(rows, colors[cols], m, n_colors)  # per row i: columns of one color meeting it
    if kind == "columns":
        if not unique.all():
            raise ValueError(_invalid("column", rows, cols, unique))
        return colors[cols] * m + rows
    # star: where (i, j) is not unique, (j, i) must be (symmetric pattern)
    if not unique.all():
        key = rows.astype(np.int64) * (int(n_colors) or 1) + colors[cols]
        flipped = cols * (int(n_colors) or 1) + colors[rows]
        counts = np.bincount(key, minlength=m * max(n_colors, 1))
        swap_ok = counts[flipped] == 1
        missing = ~unique & ~swap_ok
        if missing.any():
            raise ValueError(_invalid("star", rows, cols, ~missing))
    return np.where(unique, colors[cols] * m + rows, colors[rows] * m + cols)


def _unique(line: np.ndarray, color: np.ndarray, length: int, n_colors: int) -> np.ndarray:
    """Whether each entry is the only one of its color on its line (row for columns, column for rows)."""
    if line.size == 0:
        return np.ones(0, dtype=bool)
    key = line.astype(np.int64) * n_colors + color
    counts = np.bincount(key, minlength=length * n_colors)
    return counts[key] == 1


def _invalid(kind: str, rows: np.ndarray, cols: np.ndarray, ok: np.ndarray) -> str:
    bad = np.flatnonzero(~ok)[:5]
    where = ", ".join(f"({rows[k]}, {cols[k]})" for k in bad)
    return (
        f"the {kind} coloring does not determine the entries {where} of the pattern (two nonzeros would "
        f"share one entry of the compressed products): it is not a valid {kind} coloring of this pattern"
    )


def bidirectional_decompression(pattern: Any, column_colors: np.ndarray, row_colors: np.ndarray) -> np.ndarray:
    """For each stored entry of ``pattern`` (CSR order), its flat index in the forward products
    ``F[c] = J @ seed_c`` (``kf x m``) followed by the reverse ones ``R[c] = seed_c @ J`` (``kr x n``):
    ``F[column_colors[j], i]`` where column j is the only seeded column of its color meeting row i,
    else ``R[row_colors[i], j]`` where row i is the only seeded row of its color meeting column j.
    A color of -1 is in no seed. Raises ``ValueError`` where neither determines the entry."""
    p = csr_pattern(pattern)
    m, n = p.shape
    column_colors = np.asarray(column_colors, dtype=np.int64)
    row_colors = np.asarray(row_colors, dtype=np.int64)
    if column_colors.shape != (n,) or row_colors.shape != (m,):
        raise ValueError(
            f"a bicoloring needs one color per column ({n}) and per row ({m}), got {column_colors.shape} and "
            f"{row_colors.shape}"
        )
    rows = np.repeat(np.arange(m), np.diff(p.indptr))
    cols = p.indices.astype(np.int64)
    kf, kr = _count(column_colors), _count(row_colors)
    cf, cr = column_colors[cols], row_colors[rows]
    forward = (cf >= 0) & _unique(rows, cf + 1, m, kf + 1)  # color -1 counted apart (as 0)
    reverse = (cr >= 0) & _unique(cols, cr + 1, n, kr + 1)
    if not (forward | reverse).all():
        raise ValueError(_invalid("bidirectional", rows, cols, forward | reverse))
    return np.where(forward, cf * m + rows, kf * m + cr * n + cols)


@dataclasses.dataclass(frozen=True)
class Substitution:
    """Recovery of a Hessian from an acyclic coloring, as a few array operations: with
    ``t = signs * B.ravel()[gather]`` and ``S = [0, cumsum(t)]``, the stored entries (CSR order) are
    ``entry_signs * (S[hi] - S[lo])``.

    Each two-colored tree is laid out in depth-first preorder, so that a subtree is a range
    ``[lo, hi)``. The product along color c at a vertex u of color c' holds the sum of u's edges to
    color c: the edge from u to its parent minus those to its children. Solved from the leaves up,
    the edge to the parent is the alternating sum of that product over u's subtree (sign ``(-1)^depth``):
    a triangular solve as one cumulative sum. A diagonal entry is its own one-element range."""

    gather: np.ndarray
    signs: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    entry_signs: np.ndarray

    def __call__(self, B: np.ndarray) -> np.ndarray:
        """The stored entries from the stacked products ``B`` (NumPy; the adapter has the others)."""
        t = self.signs * np.reshape(B, (-1,))[self.gather]
        return self.solve(t)

    def solve(self, t: np.ndarray) -> np.ndarray:
        s = np.concatenate([np.zeros(1, dtype=t.dtype), np.cumsum(t)])
        return self.entry_signs * (s[self.hi] - s[self.lo])


def substitution(pattern: Any, colors: np.ndarray) -> Substitution:
    """The :class:`Substitution` of the symmetric ``pattern`` for the acyclic coloring ``colors``
    (products ``B[c] = H @ seed_c``). Raises ``ValueError`` where ``colors`` is not an acyclic
    coloring: two neighbors of one color, or a cycle on two colors."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    p = csr_pattern(pattern)
    n = p.shape[0]
    if p.shape[0] != p.shape[1]:
        raise ValueError(f"a Hessian's sparsity pattern must be square, got shape {p.shape}")
    colors = np.asarray(colors, dtype=np.int64)
    if colors.shape != (n,):
        raise ValueError(f"an acyclic coloring needs one color per column ({n}), got {colors.shape}")
    k = max(_count(colors), 1)
    rows = np.repeat(np.arange(n), np.diff(p.indptr))
    cols = p.indices.astype(np.int64)
    off = rows != cols
    clash = off & (colors[rows] == colors[cols])
    if clash.any():
        raise ValueError(_invalid("acyclic", rows, cols, ~clash).replace("(two nonzeros", "(two neighbors"))
    # the edges, once each: (i, j) with i < j, from (i, j) or (j, i)
    lo_v, hi_v = np.minimum(rows[off], cols[off]), np.maximum(rows[off], cols[off])
    pair = np.unique(lo_v * n + hi_v)
    i, j = pair // n, pair % n
    # a node of the forests: vertex u in the forest of colors (color[u], c) is u * k + c
    a, b = i * k + colors[j], j * k + colors[i]
    used, inverse = np.unique(np.concatenate([a, b]), return_inverse=True)
    a, b = inverse[: pair.size], inverse[pair.size :]
    nodes = used.size
    graph = sp.csr_array(
        (np.ones(2 * pair.size, np.int8), (np.concatenate([a, b]), np.concatenate([b, a]))), (nodes,) * 2
    )
    components = connected_components(graph, directed=False)[0] if nodes else 0
    if pair.size != nodes - components:
        raise ValueError(
            f"the acyclic coloring leaves a cycle on two colors among the {pair.size} edges of the pattern "
            f"({pair.size} edges, {nodes} vertices, {components} trees in the two-colored forests): it is not a "
            f"valid acyclic coloring of this pattern"
        )
    pre, size, depth, parent = _preorder(graph, nodes)
    vertex, other = used // k, used % k
    diagonal = np.flatnonzero(~off)
    L = nodes + diagonal.size
    gather = np.concatenate([np.empty(nodes, np.int64), colors[rows[diagonal]] * n + rows[diagonal]])
    gather[pre] = other * n + vertex
    signs = np.ones(L)
    signs[pre] = np.where(depth % 2 == 0, 1.0, -1.0)
    # each edge's value sits at its child node; each stored entry reads its edge (or its diagonal)
    child = np.where(parent[a] == b, a, b)
    where = np.searchsorted(pair, lo_v * n + hi_v)
    lo = np.empty(p.nnz, np.int64)
    hi = np.empty(p.nnz, np.int64)
    entry_signs = np.ones(p.nnz)
    edge_child = child[where]
    lo[off] = pre[edge_child]
    hi[off] = pre[edge_child] + size[edge_child]
    entry_signs[off] = np.where(depth[edge_child] % 2 == 0, 1.0, -1.0)
    lo[diagonal] = nodes + np.arange(diagonal.size)
    hi[diagonal] = lo[diagonal] + 1
    return Substitution(gather, signs, lo, hi, entry_signs)


def _preorder(graph: Any, nodes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Depth-first preorder of a forest: each node's position, subtree size, depth and parent (-1 at
    a root); a subtree is the range ``[pre, pre + size)``."""
    indptr, indices = graph.indptr.tolist(), graph.indices.tolist()
    pre, depth, parent = [-1] * nodes, [0] * nodes, [-1] * nodes
    order: list[int] = []
    for root in range(nodes):
        if pre[root] >= 0:
            continue
        stack = [root]
        while stack:
            v = stack.pop()
            pre[v] = len(order)
            order.append(v)
            up, d = parent[v], depth[v] + 1
            for w in indices[indptr[v] : indptr[v + 1]]:
                if w != up:
                    parent[w] = v
                    depth[w] = d
                    stack.append(w)
    size = [1] * nodes
    for v in reversed(order):
        if parent[v] >= 0:
            size[parent[v]] += size[v]
    return (
        np.asarray(pre, np.int64),
        np.asarray(size, np.int64),
        np.asarray(depth, np.int64),
        np.asarray(parent, np.int64),
    )
