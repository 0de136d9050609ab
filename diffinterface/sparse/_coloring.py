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
rather than once per neighbor), over the vertices in ``"natural"`` or ``"largest_first"`` order.

Every coloring is checked before use: :func:`decompression` builds the index of each nonzero in
the compressed products and raises where two nonzeros would share one entry, so an invalid
coloring is an error, never a wrong derivative.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

ORDERS = ("largest_first", "natural")


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

    - ``order``: ``"largest_first"`` (vertices by decreasing degree in their conflict graph; usually
      fewer colors) or ``"natural"`` (index order; SciPy's ``group_columns`` uses it).
    """

    order: str = "largest_first"

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ValueError(f"GreedyColoring(order={self.order!r}): order must be one of {ORDERS}")

    def columns(self, pattern: Any) -> np.ndarray:
        """A partial distance-2 coloring of the columns of ``pattern`` (forward mode)."""
        p = csr_pattern(pattern)
        return _greedy(_intersection_graph(p), self.order)

    def rows(self, pattern: Any) -> np.ndarray:
        """A partial distance-2 coloring of the rows of ``pattern`` (reverse mode)."""
        p = csr_pattern(pattern)
        return _greedy(_intersection_graph(csr_pattern(p.T)), self.order)

    def symmetric(self, pattern: Any) -> np.ndarray:
        """A star coloring of the symmetric ``pattern`` (Hessians)."""
        return _star(_adjacency(csr_pattern(pattern)), self.order)


def conflict_size(pattern: Any) -> int:
    """The number of entries of the column intersection graph ``pattern.T @ pattern`` (sum of the
    squared row counts): what a column coloring costs in memory and time."""
    counts = np.diff(pattern.indptr).astype(np.int64)
    return int(np.sum(counts * counts))


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


def _order(graph: Any, order: str) -> list[int]:
    n = graph.shape[0]
    if order == "natural":
        return list(range(n))
    degrees = np.diff(graph.indptr)
    return np.argsort(-degrees, kind="stable").tolist()


def _greedy(graph: Any, order: str) -> np.ndarray:
    """Distance-1 greedy coloring of ``graph`` (CSR adjacency): each vertex the smallest color
    none of its colored neighbors has."""
    indptr, indices = graph.indptr.tolist(), graph.indices.tolist()
    colors = [-1] * graph.shape[0]
    for v in _order(graph, order):
        forbidden = {colors[w] for w in indices[indptr[v] : indptr[v + 1]]}
        c = 0
        while c in forbidden:
            c += 1
        colors[v] = c
    return np.asarray(colors, dtype=np.int64)


def _star(graph: Any, order: str) -> np.ndarray:
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
    for v in _order(graph, order):
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
