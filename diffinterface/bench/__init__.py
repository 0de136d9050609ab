"""``python -m diffinterface bench``: what diffinterface costs against each engine's own best call.

Tables (CSV and markdown with the machine, versions and date, in ``--out``: by default a folder
``diffinterface-bench/`` in the current directory, created if missing; the repository's recorded
tables are in ``benchmarks/results``, written only with ``--out benchmarks/results``), and PNG
plots of time against size:

- ``overhead``: per backend, operator and size, the prepared call, the unprepared call and the
  preparation against the engine's own best direct call on the same input type. Calls are timed
  in alternating batches (:func:`ratio`): the times are the medians of the rounds and the ratio is
  the ratio of those two medians, with the smallest and largest per-round ratio beside it; a
  measurement whose rounds are more than ``MAX_SPREAD`` (2x) apart is taken again, and a row
  still that far apart is marked ``unsteady`` instead of printed as a result. The preparation is
  compared with the native's first call: the native built and called, which pays the compilation of a
  compiling engine (a fresh ``jax.jit``, ``mx.compile``, ``tf.function``, ``pytensor.function``); so is the
  first call of a function of new code without ``prep=`` (``first_call_ratio``).
- ``cheap_gradient``: the prepared gradient over ``f`` itself.
- ``mode_choice``: jacobians of tall and wide maps, ``mode=None`` against the better of
  ``"forward"`` and ``"reverse"``.
- ``finite_differences``: ``f``-evaluation counts and errors against the analytic derivative, for
  ``AutoFiniteDiff``, ``scipy.optimize.approx_derivative`` and ``numdifftools`` (when installed).
- ``closures``: ``closure="duplicated"`` against ``closure="const"``.
- ``rules``: a prepared gradient through a ``custom_rule`` against the same through the engine's
  own registration written by hand (``rule_by_hand`` of the bench records).
- ``catalogue``: :func:`diffinterface.testing.benchmark_differentiation` over the scenario
  catalogue (prepared, unprepared and preparation times, and ``f``-evaluation counts).

The quick default (a subset of sizes and fewer rounds) takes about ``QUICK_MINUTES`` (7) minutes
on a 2-core x86_64 VM with the seven engines installed (measured 2026-11-25); ``--backend`` and
``--table`` run less. ``--full`` runs every size with 21 rounds of about 30 ms per call kind: its
overhead table alone took ``FULL_OVERHEAD_MINUTES`` (60) minutes with the seven engines.
"""

from .._closures.namespaces import declare_modules

# the tables' functions are user code for the closure walker: it looks into what they capture (the
# closures table prices the duplicates of captured buffers); the structured, distributed and sparse
# tables' functions are called as they are, as before they moved here from the library's namespace
declare_modules(__name__, walk=True)
declare_modules(f"{__name__}.structured", f"{__name__}.distributed", f"{__name__}.sparse", walk=False)

from ._command import TABLES as TABLES  # noqa: E402
from ._command import run as run  # noqa: E402
from ._engines import Engine as Engine  # noqa: E402
from ._engines import approx_derivative as approx_derivative  # noqa: E402
from ._engines import config as config  # noqa: E402
from ._engines import config_class as config_class  # noqa: E402
from ._engines import engine as engine  # noqa: E402
from ._engines import engine_names as engine_names  # noqa: E402
from ._engines import installed_engines as installed_engines  # noqa: E402
from ._timing import FULL as FULL  # noqa: E402
from ._timing import FULL_OVERHEAD_MINUTES as FULL_OVERHEAD_MINUTES  # noqa: E402
from ._timing import MAX_SPREAD as MAX_SPREAD  # noqa: E402
from ._timing import QUICK as QUICK  # noqa: E402
from ._timing import QUICK_MINUTES as QUICK_MINUTES  # noqa: E402
from ._timing import Timing as Timing  # noqa: E402
from ._timing import machine as machine  # noqa: E402
from ._timing import once as once  # noqa: E402
from ._timing import ratio as ratio  # noqa: E402
from ._timing import write_table as write_table  # noqa: E402
