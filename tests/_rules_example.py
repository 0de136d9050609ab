"""Rules a user writes (module level, so that they pickle), for tests/test_rules.py."""

import numpy as np
import scipy.linalg

from diffinterface.rules import Active, Duplicated, custom_rule

CALLS = {"primal": 0, "forward": 0, "augmented": 0, "reverse": 0}


# An opaque SciPy computation with two arguments: y = expm(t * A) @ b (a linear ODE's solution).
@custom_rule(opaque=True)
def propagate(A, b):
    CALLS["primal"] += 1
    return scipy.linalg.expm(A) @ b


@propagate.def_forward
def propagate_forward(A, b):
    CALLS["forward"] += 1
    if isinstance(A, Duplicated):
        E, dE = scipy.linalg.expm_frechet(A.val, A.dval)
    else:
        E, dE = scipy.linalg.expm(A.val), None
    y = E @ b.val
    dy = np.zeros_like(y)
    if dE is not None:
        dy = dy + dE @ b.val
    if isinstance(b, Duplicated):
        dy = dy + E @ b.dval
    return y, dy


@propagate.def_augmented_primal
def propagate_augmented(A, b):
    CALLS["augmented"] += 1
    E = scipy.linalg.expm(A.val)
    return E @ b.val, (E, A.val if isinstance(A, Active) else None)


@propagate.def_reverse
def propagate_reverse(tape, dy, A, b):
    CALLS["reverse"] += 1
    E, a = tape
    dA = scipy.linalg.expm_frechet(a.T, np.outer(dy, b.val), compute_expm=False) if isinstance(A, Active) else None
    db = E.T @ dy if isinstance(b, Active) else None
    return dA, db


def plain_propagate(A, b):
    return scipy.linalg.expm(A) @ b


def torch_f(x):
    """A torch-only function (for DifferentiateWith)."""
    import torch

    return torch.sin(x) ** 2 * torch.sum(x)


# Only a forward rule / only reverse rules (opaque).
@custom_rule(opaque=True)
def cube_forward_only(x):
    return x**3


@cube_forward_only.def_forward
def _cube_forward(x):
    return x.val**3, 3 * x.val**2 * x.dval


@custom_rule(opaque=True)
def cube_reverse_only(x):
    return x**3


@cube_reverse_only.def_augmented_primal
def _cube_augmented(x):
    return x.val**3, x.val**2


@cube_reverse_only.def_reverse
def _cube_reverse(tape, dy, x):
    return (3 * tape * dy,)


# A reverse pass of the arguments alone: no augmented primal, so the tape is None (counted calls).
TAPELESS_CALLS = {"primal": 0, "reverse": 0}


@custom_rule(opaque=True)
def cube_tapeless(x):
    TAPELESS_CALLS["primal"] += 1
    return x**3


@cube_tapeless.def_reverse
def _cube_tapeless_reverse(tape, dy, x):
    assert tape is None, tape
    TAPELESS_CALLS["reverse"] += 1
    return 3 * x.val**2 * dy


@custom_rule
def cube_tapeless_traced(x):  # the same, not opaque (array code on each engine's arrays)
    return x**3


@cube_tapeless_traced.def_reverse
def _cube_tapeless_traced_reverse(tape, dy, x):
    assert tape is None, tape
    return 3 * x.val**2 * dy


# A non-opaque rule: the bodies use the array API, so they run on each engine's arrays.
@custom_rule
def softplus(x):
    from array_api_compat import array_namespace

    xp = array_namespace(x)
    return xp.log(1 + xp.exp(x))


@softplus.def_forward
def _softplus_forward(x):
    from array_api_compat import array_namespace

    xp = array_namespace(x.val)
    return xp.log(1 + xp.exp(x.val)), x.dval / (1 + xp.exp(-x.val))


@softplus.def_augmented_primal
def _softplus_augmented(x):
    from array_api_compat import array_namespace

    xp = array_namespace(x.val)
    return xp.log(1 + xp.exp(x.val)), 1 / (1 + xp.exp(-x.val))


@softplus.def_reverse
def _softplus_reverse(tape, dy, x):
    return (tape * dy,)


# vectorized=True: the bodies take a leading batch axis (sum over the last axis).
BATCH_CALLS = []


@custom_rule(opaque=True, vectorized=True, out_shape=lambda x: (x.shape[:-1], x.dtype))
def sumsq(x):
    BATCH_CALLS.append(x.shape)
    return np.sum(x**2, axis=-1)


@sumsq.def_forward
def _sumsq_forward(x):
    BATCH_CALLS.append(x.val.shape)
    return np.sum(x.val**2, axis=-1), np.sum(2 * x.val * x.dval, axis=-1)


@sumsq.def_augmented_primal
def _sumsq_augmented(x):
    BATCH_CALLS.append(x.val.shape)
    return np.sum(x.val**2, axis=-1), x.val


@sumsq.def_reverse
def _sumsq_reverse(tape, dy, x):
    BATCH_CALLS.append(tape.shape)
    return (2 * tape * np.asarray(dy)[..., None],)
