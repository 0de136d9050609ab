"""A Gierer-Meinhardt-like reaction-diffusion right-hand side whose work buffers are module globals.

The pattern of the docs: ``Ayu[...] = Ay @ u`` into preallocated globals, then the reaction terms.
"""

import numpy as np
from array_api_compat import array_namespace

N = 5
Ay = np.diag(-2.0 * np.ones(N)) + np.diag(np.ones(N - 1), 1) + np.diag(np.ones(N - 1), -1)
Ayu = np.zeros(N)
Ayv = np.zeros(N)


def rhs(x):
    xp = array_namespace(x)
    u, v = x[:N], x[N:]
    Ayu[...] = Ay @ u
    Ayv[...] = Ay @ v
    du = xp.asarray(Ayu) + u * u / v - u
    dv = xp.asarray(Ayv) + u * u - v
    return xp.concat([du, dv])


def jacobian(x):
    """The analytic Jacobian of ``rhs``."""
    u, v = x[:N], x[N:]
    eye = np.eye(N)
    return np.block(
        [
            [Ay + np.diag(2 * u / v - 1), np.diag(-(u**2) / v**2)],
            [np.diag(2 * u), Ay - eye],
        ]
    )
