"""autograd's own test functions through the library.

autograd's tests (``tests/test_numpy.py``, ``test_linalg.py``, ``test_scipy.py``, ``test_systematic.py``,
``test_fft.py``, ``test_scalar_ops.py``, ``test_binary_ops.py``) check each function with
``check_grads(fun)(*args)``. They ship in autograd's source distribution, not in its wheel: the
distribution of the installed version is downloaded once from PyPI (``pip download``) into
``.catalogues/`` (or read from ``$DIFFINTERFACE_AUTOGRAD_SDIST``, a folder holding its ``tests/``).

Here ``check_grads`` is replaced by a check of the library: for each real argument it differentiates,
``jacobian`` on ``AutoAutograd`` (forward and reverse) and ``AutoFiniteDiff``, against
``autograd.jacobian``; the argument unchanged. Each case agrees or raises an error (counted with its
type, printed at the end of the run); a number that differs without an error fails the test.
Every check of every test runs (about 8,000 outcomes for autograd 1.9.1, 20 s on a 2-core machine).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import itertools
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest

from conftest import catalogue_count

pytest.importorskip("autograd", reason='autograd is not installed: pip install "diffinterface[autograd]"')
import autograd  # noqa: E402
import autograd.test_util  # noqa: E402

import diffinterface as di  # noqa: E402
from diffinterface.testing._structured_scenarios import _leaves, _map  # noqa: E402

pytestmark = [pytest.mark.catalogue, pytest.mark.filterwarnings("ignore")]

ROOT = Path(__file__).resolve().parent.parent
VERSION = importlib.metadata.version("autograd")
MODULES = (
    "test_numpy",
    "test_linalg",
    "test_scipy",
    "test_systematic",
    "test_fft",
    "test_scalar_ops",
    "test_binary_ops",
)
CATALOGUE = f"autograd {VERSION} tests (jacobian, AutoAutograd forward/reverse, AutoFiniteDiff)"


def _tests_dir() -> Path:
    given = os.environ.get("DIFFINTERFACE_AUTOGRAD_SDIST")
    if given:
        return Path(given) / "tests"
    cache = ROOT / ".catalogues"
    tests = cache / f"autograd-{VERSION}" / "tests"
    if not tests.is_dir():
        cache.mkdir(exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="download-", dir=cache))
        try:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--no-binary",
                    ":all:",
                    "-d",
                    str(staging),
                    f"autograd=={VERSION}",
                ],
                capture_output=True,
                text=True,
            )
            archive = staging / f"autograd-{VERSION}.tar.gz"
            if done.returncode != 0 or not archive.exists():
                raise RuntimeError(
                    f"autograd's tests ship in its source distribution, which could not be downloaded "
                    f"(pip download autograd=={VERSION} --no-binary :all:):\n{done.stderr[-2000:]}\n"
                    f"Set DIFFINTERFACE_AUTOGRAD_SDIST to an unpacked copy, or skip with -m 'not catalogue'."
                )
            _unpack_tests(archive, f"autograd-{VERSION}", cache)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return tests


def _unpack_tests(archive: Path, top: str, cache: Path) -> None:
    """Unpack ``top/tests/`` of ``archive`` as ``cache/top``, safe when several processes do it at once.

    Each process (one per pytest-xdist worker, all collecting this module on a fresh clone) extracts into
    a folder of its own and renames the finished ``top`` into place: a rename is atomic, so the folder
    in ``cache`` is whole or absent, and a process that finds it already placed by another uses that one.
    (Extracting straight into ``cache`` from two workers failed in CI: tarfile's ``makedirs`` raced.)
    """
    own = Path(tempfile.mkdtemp(prefix="unpack-", dir=cache))
    try:
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(f"{top}/tests/")]
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.10.12
            tar.extractall(own, members=members, **safe)
        try:
            os.rename(own / top, cache / top)
        except OSError:
            if not (cache / top / "tests").is_dir():
                raise
    finally:
        shutil.rmtree(own, ignore_errors=True)


def _load(tests: Path) -> dict:
    """autograd's test modules, imported with ``check_grads`` replaced by :func:`_check_grads`."""
    autograd.test_util.check_grads = _check_grads  # combo_check looks it up here at each call
    sys.path.insert(0, str(tests))
    modules = {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name in MODULES:
                spec = importlib.util.spec_from_file_location(f"_autograd_catalogue_{name}", tests / f"{name}.py")
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                modules[name] = module
    finally:
        sys.path.remove(str(tests))
    return modules


def _tests(modules: dict) -> list:
    """(id, function, kwargs) of each test function, its pytest parametrisations expanded."""
    out = []
    for name, module in modules.items():
        for attr, fn in vars(module).items():
            if not (attr.startswith("test_") and callable(fn)) or getattr(fn, "__module__", "") != module.__name__:
                continue
            marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
            grids = [
                [
                    dict(zip([a.strip() for a in m.args[0].split(",")], v if "," in m.args[0] else (v,)))
                    for v in m.args[1]
                ]
                for m in marks
            ]
            for combo in itertools.product(*grids) if grids else [()]:
                kwargs = {k: v for d in combo for k, v in d.items()}
                suffix = "-".join(f"{k}={v}" for k, v in kwargs.items())
                out.append(pytest.param(fn, kwargs, id=f"{name}::{attr}" + (f"[{suffix}]" if suffix else "")))
    return out


class _Run:
    """The checks of one autograd test: the wrong ones."""

    current: _Run | None = None

    def __init__(self) -> None:
        self.wrong: list = []


def _close(got, want, rtol, atol) -> bool:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return False
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    return bool(np.allclose(got, want, rtol=rtol, atol=atol * max(1.0, scale), equal_nan=True))


def _real(value) -> bool:
    return isinstance(value, (float, np.floating)) or (isinstance(value, np.ndarray) and value.dtype.kind == "f")


def _check_grads(fun, argnum=0, modes=None, order=2):
    def check(*args, **kwargs):
        run = _Run.current
        for i in argnum if isinstance(argnum, (tuple, list)) else (argnum,):
            try:
                _case(run, fun, args, kwargs, i)
            except Exception as error:  # noqa: BLE001 - a fault of this harness: shown, not counted away
                run.wrong.append(f"the check itself failed on {fun}: {error!r}")

    return check


def _case(run: _Run, fun, args: tuple, kwargs: dict, i: int) -> None:
    if isinstance(args[i], (list, tuple)) or np.iscomplexobj(args[i]):
        _tangent_case(run, fun, args, kwargs, i)
        return
    if not _real(args[i]):
        catalogue_count(CATALOGUE, "not tried: a non-float argument")
        return
    x = np.array(args[i], dtype=np.float64)
    name = f"{getattr(fun, '__name__', fun)} d/d(arg {i}) at shape {x.shape}"

    def g(z):
        return fun(*args[:i], z, *args[i + 1 :], **kwargs)

    try:
        want = autograd.jacobian(g)(x)
        y = g(x)
    except Exception:  # noqa: BLE001
        catalogue_count(CATALOGUE, "not tried: autograd.jacobian itself raises")
        return
    if np.iscomplexobj(y) or np.iscomplexobj(want):
        catalogue_count(CATALOGUE, "not tried: a complex f(x) of a real x (structured-inputs issue)")
        return
    for backend, rtol, atol in (
        (di.AutoAutograd(mode="forward"), 1e-8, 1e-10),
        (di.AutoAutograd(mode="reverse"), 1e-8, 1e-10),
        (di.AutoFiniteDiff(), 1e-5, 1e-6),
    ):
        before = x.copy()
        try:
            got = di.jacobian(backend, g, x)
        except Exception as error:  # noqa: BLE001 - an error is an allowed outcome, counted by type
            catalogue_count(CATALOGUE, f"error {type(error).__name__} ({backend})")
            continue
        if not np.array_equal(x, before):
            run.wrong.append(f"{name}: {backend} changed x")
        if _close(got, want, rtol, atol):
            catalogue_count(CATALOGUE, "agree")
        elif isinstance(backend, di.AutoFiniteDiff) and not np.all(np.isfinite(want)):
            catalogue_count(CATALOGUE, "not comparable: autograd's Jacobian is not finite (AutoFiniteDiff)")
        else:
            err = np.max(np.abs(np.asarray(got) - want)) if np.shape(got) == np.shape(want) else "shape"
            run.wrong.append(f"{name}: {backend} differs from autograd.jacobian by {err}")


def _like(value, fill):
    """``value``'s structure (lists and tuples of arrays) with ``fill(leaf)`` for each leaf."""
    return _map(value, lambda v: fill(np.asarray(v)))


def _direction(leaf: np.ndarray) -> np.ndarray:
    n = max(leaf.size, 1)
    t = np.reshape(np.linspace(0.5, 1.5, n), leaf.shape)
    return t + 0.25j * np.flip(t) if np.iscomplexobj(leaf) else t


def _tangent_case(run: _Run, fun, args: tuple, kwargs: dict, i: int) -> None:
    """A complex argument, or a list or tuple of arrays (issue 17): our pushforward along a tangent
    against autograd's ``make_jvp`` (the derivative along t, the same in every convention), and our
    pullback against autograd's ``make_vjp`` in ours: autograd's VJP is J^T ct for a holomorphic f and
    the conjugate gradient for a real one, ours J^H ct and df/da + i df/db, so ours is
    conj(autograd's(conj(ct))) (the same thing for real arrays)."""
    if isinstance(args[i], (list, tuple)) and not any(isinstance(v, np.ndarray) for v in _leaves(args[i])):
        # [[7.0, 8.0, 9.0]]: an array to autograd, a list of leaves to JAX's pytrees and to diffinterface
        catalogue_count(CATALOGUE, "not tried: a nested list of numbers (an array to autograd)")
        return
    kind = "complex x" if np.iscomplexobj(_leaves(args[i])[0]) else "structured x"
    z = _like(args[i], lambda v: v.astype(np.complex128 if np.iscomplexobj(v) else np.float64))
    if not all(np.issubdtype(np.asarray(v).dtype, np.inexact) for v in _leaves(z)):
        catalogue_count(CATALOGUE, "not tried: a non-float argument")
        return
    name = f"{getattr(fun, '__name__', fun)} d/d(arg {i}, {kind})"

    def g(w):
        return fun(*args[:i], w, *args[i + 1 :], **kwargs)

    t = _like(z, _direction)
    try:
        y, jvp = autograd.make_jvp(g)(z)(t)
        vjp, _ = autograd.make_vjp(g)(z)
        y = np.asarray(y)
        ct = _direction(y)
        want_pb = _like(vjp(np.conj(ct)), np.conj)
    except Exception:  # noqa: BLE001
        catalogue_count(CATALOGUE, f"not tried: autograd's make_jvp or make_vjp raises ({kind})")
        return
    if np.isrealobj(y) and np.iscomplexobj(jvp):
        # the derivative of a real f along any tangent is real: autograd's forward rule adds an imaginary
        # part (its linalg.norm of a complex vector: Re <z, t> / |z| + 0.65j; central differences of
        # f(z + h t) give the real part alone), so its real part is the reference
        catalogue_count(CATALOGUE, "autograd's make_jvp of a real f(x) has an imaginary part: its real part compared")
        jvp = np.real(jvp)
    for backend, rtol, atol in (
        (di.AutoAutograd(mode="forward"), 1e-8, 1e-10),
        (di.AutoAutograd(mode="reverse"), 1e-8, 1e-10),
        (di.AutoFiniteDiff(), 1e-5, 1e-6),
    ):
        for what, call, want in (
            ("pushforward", lambda b: di.pushforward(b, g, z, t), jvp),
            ("pullback", lambda b: di.pullback(b, g, z, ct), want_pb),
        ):
            try:
                got = call(backend)
            except Exception as error:  # noqa: BLE001 - an error is an allowed outcome, counted by type
                catalogue_count(CATALOGUE, f"error {type(error).__name__} ({backend}, {kind})")
                continue
            pairs = list(zip(_leaves(got), _leaves(want)))
            if len(_leaves(got)) == len(_leaves(want)) and all(_close(a, e, rtol, atol) for a, e in pairs):
                catalogue_count(CATALOGUE, f"agree ({kind})")
            elif isinstance(backend, di.AutoFiniteDiff) and not all(np.all(np.isfinite(e)) for _, e in pairs):
                catalogue_count(CATALOGUE, "not comparable: autograd's derivative is not finite (AutoFiniteDiff)")
            else:
                err = max(
                    (np.max(np.abs(np.asarray(a) - e)) if np.shape(a) == np.shape(e) else np.inf) for a, e in pairs
                )
                run.wrong.append(f"{name}: {what} on {backend} differs from autograd's by {err}")


TESTS = _tests(_load(_tests_dir()))


@pytest.mark.parametrize("fn, kwargs", TESTS)
def test_autograd_test_function_agrees_with_autograd_or_raises(fn, kwargs):
    np.random.seed(42)  # autograd's conftest seeds each test so
    run = _Run.current = _Run()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn(**kwargs)
    except (Exception, pytest.fail.Exception) as error:  # noqa: BLE001 - autograd's own assertions
        catalogue_count(CATALOGUE, f"not tried further: the autograd test itself raises {type(error).__name__}")
    finally:
        _Run.current = None
    assert not run.wrong, "\n".join(run.wrong)


def test_the_tests_unpack_whole_when_several_workers_unpack_them_at_once(tmp_path):
    """Each pytest-xdist worker collects this module; on a fresh clone all of them unpack at once."""
    import io
    import threading

    archive = tmp_path / "pkg-1.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for i in range(200):
            data = f"x = {i}\n".encode()
            info = tarfile.TarInfo(f"pkg-1/tests/sub{i % 20}/m{i}.py")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo("pkg-1/src/other.py")  # outside tests/: left out
        tar.addfile(info, io.BytesIO(b""))
    for trial in range(10):  # extracting straight into the cache failed 17 of 20 such trials
        cache = tmp_path / f"cache{trial}"
        cache.mkdir()
        start, errors = threading.Barrier(4), []

        def unpack():
            start.wait()
            try:
                _unpack_tests(archive, "pkg-1", cache)
            except Exception as error:  # noqa: BLE001 - collected, asserted below
                errors.append(error)

        workers = [threading.Thread(target=unpack) for _ in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert errors == []
        assert sorted(p.name for p in cache.iterdir()) == ["pkg-1"]  # the staging folders are gone
        files = sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*.py"))
        assert files == sorted(f"pkg-1/tests/sub{i % 20}/m{i}.py" for i in range(200))
        assert (cache / "pkg-1" / "tests" / "sub3" / "m23.py").read_text() == "x = 23\n"
