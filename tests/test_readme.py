"""The README's examples run as written, on every installed backend their comments name; so do the
first examples of the rules and structured guides (docs/rules.md, docs/structured.md)."""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

from conftest import installed

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
EXAMPLE = re.search(r"## Example\n\n```python\n(.*?)```", README, re.S).group(1)


@pytest.mark.parametrize(
    "backend, engine",
    [
        ("AutoFiniteDiff()", None),
        ("AutoJAX()", "jax"),
        ("AutoTorch()", "torch"),
        ("AutoAutograd()", "autograd"),
        ("AutoTensorFlow()", "tensorflow"),
        ("AutoMLX()", "mlx"),
    ],
)
def test_the_example_runs_on_every_backend(backend, engine):
    if engine is not None and not installed(engine):
        pytest.skip(f'{engine} is not installed: pip install "diffinterface[{engine}]"')
    assert "# or AutoJAX(), AutoTorch(), AutoAutograd()" in EXAMPLE
    code = EXAMPLE.replace("backend = AutoFiniteDiff()", f"import diffinterface\nbackend = diffinterface.{backend}")
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    x = namespace["x"]
    y, g = namespace["y"], namespace["g"]
    # central differences against exact derivatives; MLX computes float64 sin with its float32
    # approximation (AutoMLX.tolerance, docs/backends.md)
    tol = 1e-6 if engine in (None, "mlx") else 1e-12
    assert np.allclose(g, 3.0 * np.sin(2 * (x + 2)), rtol=tol, atol=tol)  # d/dx 3 sin^2 = 3 sin 2x, at x + 2
    assert np.isclose(y, 3.0 * np.sum(np.sin(x + 2) ** 2), rtol=max(tol, 1e-12))


RULES = re.search(r"```python\n(.*?)```", (ROOT / "docs" / "rules.md").read_text(), re.S).group(1)


@pytest.mark.parametrize(
    "backend, engine",
    [("AutoFiniteDiff()", None), ("AutoJAX()", "jax"), ("AutoTorch()", "torch"), ("AutoAutograd()", "autograd")],
)
def test_the_custom_rule_example_differentiates_on_every_backend(backend, engine):
    if engine is not None and not installed(engine):
        pytest.skip(f'{engine} is not installed: pip install "diffinterface[{engine}]"')
    import diffinterface as di

    namespace: dict = {}
    exec(compile(RULES, "docs/rules.md", "exec"), namespace)
    solve = namespace["solve"]
    rng = np.random.default_rng(1)
    A, b = rng.standard_normal((3, 3)) + 3 * np.eye(3), rng.standard_normal(3)
    be = eval(f"di.{backend}")
    for mode in [None] if engine is None else ["forward", "reverse"]:
        config = be if mode is None else type(be)(mode=mode)
        np.testing.assert_allclose(di.jacobian(config, lambda z: solve(A, z), b), np.linalg.inv(A), atol=1e-6)
        y = np.linalg.solve(A, b)
        dA = di.jacobian(config, lambda M: solve(M, b), A)  # d y_i / d A_jk = -Ainv_ij y_k
        np.testing.assert_allclose(dA, -np.einsum("ij,k->ijk", np.linalg.inv(A), y), atol=1e-6)


STRUCTURED = re.search(r"```python\n(.*?)```", (ROOT / "docs" / "structured.md").read_text(), re.S).group(1)


@pytest.mark.skipif(not installed("torch"), reason='torch is not installed: pip install "diffinterface[torch]"')
def test_the_structured_example_gives_each_parameters_gradient():
    namespace: dict = {}
    exec(compile(STRUCTURED, "docs/structured.md", "exec"), namespace)
    net, grads = namespace["net"], namespace["grads"]
    data, labels = namespace["data"], namespace["labels"]
    net.zero_grad()
    ((net(data) - labels) ** 2).mean().backward()  # torch's own gradient, into each parameter's .grad
    assert list(grads) == [name for name, _ in net.named_parameters()]
    for name, parameter in net.named_parameters():
        np.testing.assert_allclose(grads[name].numpy(), parameter.grad.numpy(), rtol=1e-12, atol=1e-14)


ENGINES = re.search(r"## One example per engine\n\n.*?```python\n(.*?)```", README, re.S).group(1)


@pytest.mark.skipif(
    not all(installed(e) for e in ("jax", "torch", "autograd", "mlx", "pytensor", "tensorflow")),
    reason='the example uses every engine: pip install -e ".[all]"',
)
def test_one_example_per_engine():
    namespace: dict = {}
    exec(compile(ENGINES, "README.md", "exec"), namespace)
    expected = np.sin(2 * np.linspace(0.0, 1.0, 5))
    for name in ("g_jax", "g_torch", "g_autograd"):
        np.testing.assert_allclose(np.asarray(namespace[name]), expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(namespace["g_fd"], expected, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(np.asarray(namespace["g_pytensor"]), expected, rtol=1e-12, atol=1e-15)
    # tf.linspace(0.0, 1.0, 5) is float32 (TensorFlow's default): a float32 tensor back
    assert type(namespace["g_tf"]).__module__.startswith("tensorflow") and namespace["g_tf"].dtype.name == "float32"
    np.testing.assert_allclose(np.asarray(namespace["g_tf"]), expected, rtol=1e-5, atol=1e-6)
    # MLX: float32 here (mx.array of a float64 numpy array is float32, MLX's default), kept float32
    assert type(namespace["g_mlx"]).__module__.startswith("mlx") and str(namespace["g_mlx"].dtype) == "mlx.core.float32"
    np.testing.assert_allclose(np.asarray(namespace["g_mlx"]), expected, rtol=1e-5, atol=1e-6)
    assert str(namespace["g_torch"].dtype) == "torch.float64" and namespace["g_jax"].dtype == np.float64
