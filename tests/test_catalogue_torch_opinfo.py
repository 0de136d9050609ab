"""torch's own OpInfo database (``torch.testing._internal.common_methods_invocations.op_db``, shipped
in torch's wheel) through the library: every op that supports autograd in float64, on its own sample
inputs, ``jacobian`` on ``AutoTorch`` in its three modes, prepared and not, against
``torch.autograd.functional.jacobian``; ``AutoFiniteDiff`` against the same reference where torch's
``gradcheck`` passes (an ``x`` of at most ``FINITE_LARGEST`` elements); ``x`` unchanged.

Every case ends as one of: agrees with torch, or raises an error (counted with its type: printed at
the end of the run). A number that differs from torch's without an error fails the test.

The first ``DIFFINTERFACE_OPINFO_SAMPLES`` sample inputs of each op are tried (1 by default, to keep
the suite within its time; ``0`` runs every sample, 14,110 of them for torch 2.13).
"""

from __future__ import annotations

import os
import warnings

import pytest

from conftest import catalogue_count

torch = pytest.importorskip("torch", reason='torch is not installed: pip install "diffinterface[torch]"')
pytest.importorskip("expecttest", reason='torch\'s test helpers need expecttest: pip install -e ".[test]"')

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torch.testing._internal.common_methods_invocations import op_db

import diffinterface as di  # noqa: E402

pytestmark = [pytest.mark.catalogue, pytest.mark.filterwarnings("ignore")]

SAMPLES = int(os.environ.get("DIFFINTERFACE_OPINFO_SAMPLES", "1"))
LARGEST = 40_000  # Jacobian entries: larger samples (slice_scatter's has 64e6) are passed over
# x's elements beyond which AutoFiniteDiff is not tried: torch's gradcheck, which decides whether a
# finite difference is comparable, takes a numerical Jacobian, two evaluations of f per element (ctc_loss's
# x of 16,000 elements: 14 s alone and 84 s in the suite on 2 cores, to find it fails; measured 2026-12-07,
# every other op's first sample has at most 750)
FINITE_LARGEST = 5_000
F64 = torch.float64
OPS = [op for op in op_db if op.supports_autograd and F64 in op.supported_dtypes("cpu")]
CATALOGUE = "torch OpInfo (jacobian, AutoTorch x 3 modes x prepared/not, AutoFiniteDiff)"


def _flat(out):
    """The floating part of an op's output as one tensor (ops like ``max(dim)`` return tuples: the
    library takes one array, so the catalogue concatenates the floating ones, as a user would)."""
    if isinstance(out, torch.Tensor):
        return out
    parts = [o.reshape(-1) for o in out if isinstance(o, torch.Tensor) and o.is_floating_point()]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _function(op, sample):
    def f(z):
        return _flat(sample.output_process_fn_grad(op(z, *sample.args, **sample.kwargs)))

    return f


def _close(got, want, rtol=1e-6, atol=1e-9) -> bool:
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return False
    common = torch.promote_types(got.dtype, want.dtype)  # casts (x.float()): torch's Jacobian has f(x)'s dtype
    got, want = got.to(common), want.to(common)
    scale = float(want.abs().max()) if want.numel() else 0.0
    return bool(torch.allclose(got, want, rtol=rtol, atol=atol * max(1.0, scale), equal_nan=True))


def _reference(f, x, forward: bool):
    """torch's own Jacobian. A complex output of a real x: torch's reverse mode keeps only the real
    part of each row, so the reference is the Jacobians of the real and the imaginary parts."""
    y = f(x.clone())
    if y.numel() == 0 or x.numel() == 0:  # torch's jacobian cannot stack no rows: the empty Jacobian
        return torch.zeros(tuple(y.shape) + tuple(x.shape), dtype=y.dtype)
    if y.is_complex():
        real = _reference(lambda z: f(z).real, x, forward)
        return torch.complex(real, _reference(lambda z: f(z).imag, x, forward))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if forward:
            return torch.autograd.functional.jacobian(f, x, strategy="forward-mode", vectorize=True)
        return torch.autograd.functional.jacobian(f, x)


def _try(thunk):
    try:
        return thunk(), None
    except Exception as error:  # noqa: BLE001 - every error is an allowed outcome, counted by type
        return None, error


def _check(op, sample, name: str, wrong: list) -> bool:
    """Runs one sample; False where it was passed over before any derivative was taken."""
    x = sample.input
    if isinstance(x, (list, tuple)) and x and all(_dense_f64(v) for v in x):
        return _check_sequence(op, sample, name, wrong)
    if not _dense_f64(x):
        catalogue_count(CATALOGUE, "not tried: x is not dense float64 tensors (integers, sparse)")
        return False
    # a contiguous copy: as_strided's partial_views read the storage around a view of x, memory that is
    # not x's values (torch's own jacobian differentiates a copy as well)
    x = x.detach().clone(memory_format=torch.contiguous_format)
    f = _function(op, sample)
    y, error = _try(lambda: f(x.clone()))
    if error is not None or y is None:
        catalogue_count(CATALOGUE, "not tried: the op fails or has no floating output")
        return False
    if x.numel() * y.numel() > LARGEST:
        catalogue_count(CATALOGUE, f"not tried: a Jacobian of over {LARGEST} entries (the suite's time)")
        return False
    refs = {}
    for forward in (False, True):
        refs[forward], _ = _try(lambda: _reference(f, x.clone(), forward))
    if refs[False] is None and refs[True] is None:
        catalogue_count(CATALOGUE, "not tried: torch's own jacobian raises")
        return False
    for mode in (None, "forward", "reverse"):
        backend = di.AutoTorch(mode=mode)
        for prepared in (False, True):
            before = x.clone()

            def call():
                if prepared:
                    prep = di.prepare_jacobian(backend, f, x)
                    return di.jacobian(backend, f, x, prep=prep)
                return di.jacobian(backend, f, x)

            got, error = _try(call)
            label = f"AutoTorch(mode={mode!r}){' prepared' if prepared else ''}"
            if not torch.equal(x, before):
                wrong.append(f"{name}: {label} changed x")
            if error is not None:
                catalogue_count(CATALOGUE, f"error {type(error).__name__} ({label.split(' ')[0]})")
                if os.environ.get("DIFFINTERFACE_OPINFO_VERBOSE"):
                    print(f"{name}: {label}: {type(error).__name__}: {str(error)[:300]}")
                continue
            # the reference of the same mode (where torch's raises, vmap of its forward mode, the other)
            own = refs[mode == "forward"] if mode is not None else None
            wanted = [own] if own is not None else [r for r in refs.values() if r is not None]
            if any(_close(got, w) for w in wanted):
                catalogue_count(CATALOGUE, "agree")
            else:
                err = max(float((got - w).abs().max()) for w in wanted) if got.shape == wanted[0].shape else "shape"
                wrong.append(f"{name}: {label} differs from torch.autograd.functional.jacobian by {err}")
    reference = refs[False] if refs[False] is not None else refs[True]
    if x.numel() > FINITE_LARGEST:
        catalogue_count(
            CATALOGUE, f"not tried: AutoFiniteDiff on an x of over {FINITE_LARGEST} elements (the suite's time)"
        )
        return True
    ok, _ = _try(lambda: torch.autograd.gradcheck(f, (x.clone().requires_grad_(),), raise_exception=False))
    if not ok:
        catalogue_count(CATALOGUE, "not tried: torch's gradcheck fails here (AutoFiniteDiff)")
        return True
    before = x.clone()
    got, error = _try(lambda: di.jacobian(di.AutoFiniteDiff(), f, x))
    if not torch.equal(x, before):
        wrong.append(f"{name}: AutoFiniteDiff changed x")
    if error is not None:
        catalogue_count(CATALOGUE, f"error {type(error).__name__} (AutoFiniteDiff)")
    elif _close(got, reference, rtol=1e-3, atol=1e-5):  # gradcheck's own tolerances
        catalogue_count(CATALOGUE, "agree")
    elif not bool(reference.ne(0).any()):  # round(x, decimals=3): the steps cross a jump of f
        catalogue_count(CATALOGUE, "not comparable: f is piecewise constant, AutoFiniteDiff's steps cross a jump")
    else:
        wrong.append(f"{name}: AutoFiniteDiff differs from torch.autograd.functional.jacobian")
    return True


def _dense_f64(x) -> bool:
    return isinstance(x, torch.Tensor) and x.dtype == F64 and x.layout == torch.strided


def _check_sequence(op, sample, name: str, wrong: list) -> bool:
    """x a list or tuple of tensors (torch.cat, stack, ...; issue 17): our Jacobian, a sequence of
    blocks ``f(x).shape + x[i].shape``, against torch's Jacobian with respect to each tensor."""
    kind = type(sample.input)
    x = kind(v.detach().clone(memory_format=torch.contiguous_format) for v in sample.input)
    f = _function(op, sample)
    y, error = _try(lambda: f(kind(v.clone() for v in x)))
    if error is not None or not isinstance(y, torch.Tensor):
        catalogue_count(CATALOGUE, "not tried: the op fails or has no floating output (a sequence x)")
        return False
    if sum(v.numel() for v in x) * y.numel() > LARGEST:
        catalogue_count(CATALOGUE, f"not tried: a Jacobian of over {LARGEST} entries (the suite's time)")
        return False
    reference, error = _try(lambda: torch.autograd.functional.jacobian(lambda *vs: f(kind(vs)), tuple(x)))
    if error is not None or y.is_complex():
        catalogue_count(CATALOGUE, "not tried: torch's own jacobian raises (a sequence x)")
        return False
    for backend in (di.AutoTorch(), di.AutoTorch(mode="forward"), di.AutoTorch(mode="reverse"), di.AutoFiniteDiff()):
        before = [v.clone() for v in x]
        got, error = _try(lambda b=backend: di.jacobian(b, f, x))
        if not all(torch.equal(v, w) for v, w in zip(x, before)):
            wrong.append(f"{name}: {backend} changed x")
        if error is not None:
            catalogue_count(CATALOGUE, f"error {type(error).__name__} ({backend}, a sequence x)")
            continue
        tol = {"rtol": 1e-3, "atol": 1e-5} if isinstance(backend, di.AutoFiniteDiff) else {}
        if (
            type(got) is kind
            and len(got) == len(reference)
            and all(_close(g, r, **tol) for g, r in zip(got, reference))
        ):
            catalogue_count(CATALOGUE, "agree (a sequence x)")
        else:
            wrong.append(f"{name}: {backend} differs from torch.autograd.functional.jacobian (a sequence x)")
    return True


@pytest.mark.parametrize("op", OPS, ids=[f"{op.name}.{op.variant_test_name}".rstrip(".") for op in OPS])
def test_opinfo_jacobian_agrees_with_torch_or_raises(op):
    wrong: list = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = op.sample_inputs("cpu", F64, requires_grad=False)
        tried = 0
        for i, sample in enumerate(samples):
            tried += _check(op, sample, f"{op.name}[{i}] {sample.summary()}", wrong)
            if SAMPLES and tried >= SAMPLES:
                break
    assert not wrong, "\n".join(wrong)
