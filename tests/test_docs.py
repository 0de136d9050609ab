"""The documentation in docs/ (built by ``nox -s docs`` and in CI with ``mkdocs build --strict``): the
API reference lists every exported name, the front page's example runs, every local link resolves,
and nothing in the repository points outside it."""

from __future__ import annotations

import doctest
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import diffinterface as di
from conftest import installed

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def test_the_api_reference_lists_every_exported_name():
    reference = (DOCS / "reference.md").read_text()
    documented = [path.rsplit(".", 1)[-1] for path in re.findall(r"^::: (\S+)$", reference, re.M)]
    assert sorted(documented) == sorted(di.__all__)
    for path in re.findall(r"^::: (\S+)$", reference, re.M):  # each path names the object itself
        module, _, name = path.rpartition(".")
        assert getattr(__import__(module, fromlist=[name]), name) is getattr(di, name), path


def test_the_front_page_example_runs():
    code = re.search(r"```python\n(.*?)```", (DOCS / "index.md").read_text(), re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "docs/index.md", "exec"), namespace)
    x = namespace["x"]
    np.testing.assert_allclose(namespace["g"], np.sin(2 * x), rtol=1e-6, atol=1e-9)  # d/dx sin^2 = sin 2x


def test_every_page_is_in_the_site_and_every_local_link_resolves():
    site = (ROOT / "mkdocs.yml").read_text()
    for page in DOCS.rglob("*.md"):
        assert f": {page.relative_to(DOCS)}" in site, f"{page.name} is not in mkdocs.yml's nav"
    for page in [*DOCS.rglob("*.md"), ROOT / "README.md"]:
        for target in re.findall(r"\]\(([^)#:]+?)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"


def test_the_site_goes_where_the_readme_says_and_git_ignores_it():
    """``nox -s docs`` and a plain ``mkdocs build`` write the site to the same folder, the one the
    README names, and git ignores it (a build leaves ``git status`` clean)."""
    site_dir = re.search(r"^site_dir: (\S+)$", (ROOT / "mkdocs.yml").read_text(), re.M).group(1)
    assert site_dir == "site"
    docs_session = (ROOT / "noxfile.py").read_text().split("def docs(")[1].split("\n@nox.session")[0]
    assert 'site = ROOT / "site"' in docs_session and '"--site-dir", str(site)' in docs_session
    assert (
        "nox -s docs            # the documentation site, warnings as errors, into site/"
        in (ROOT / "README.md").read_text()
    )
    ignored = subprocess.run(["git", "check-ignore", "-q", "site/index.html"], cwd=ROOT)
    assert ignored.returncode == 0, "site/ is not in .gitignore"


def test_nothing_in_the_repository_points_outside_it():
    outside = ("../" + "shared", "SPEC" + ".md")  # written in two parts: this file names them too
    files = [ROOT / name for name in ("README.md", "pyproject.toml", "noxfile.py", "mkdocs.yml", ".ci/run")]
    for folder in ("diffinterface", "tests", "benchmarks", "docs"):
        files += [p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".md", ".csv", ".toml", ".yml")]
    for path in files:
        text = path.read_text(errors="replace")
        for needle in outside:
            assert needle not in text, f"{path.relative_to(ROOT)} refers to {needle}, outside the repository"


def test_the_backend_of_adding_a_backend_passes_the_catalogue(tmp_path):
    """docs/adding-a-backend.md's module, saved as mypackage/central.py: in a fresh process (its
    registration stays there), the catalogue passes on it, as the page says."""
    page = (DOCS / "adding-a-backend.md").read_text()
    module, proof = re.findall(r"```python\n(.*?)```", page, re.S)[:2]
    (tmp_path / "mypackage").mkdir()
    (tmp_path / "mypackage" / "__init__.py").write_text("")
    (tmp_path / "mypackage" / "central.py").write_text(module)
    script = f"import sys; sys.path.insert(0, {str(tmp_path)!r})\nfrom mypackage.central import AutoCentral\n{proof}"
    script += "print(len(outcomes))\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) > 400


# what each example needs beyond numpy (the examples of everything else run with numpy alone)
NEEDS = {
    "AutoJAX": "jax",
    "JaxprSparsityDetector": "jax",
    "AutoTorch": "torch",
    "LostDerivativeError": "torch",
    "AutoAutograd": "autograd",
    "DifferentiateWith": "autograd",
    "AutoSparse": "scipy",
    "TracerSparsityDetector": "scipy",
    "KnownSparsity": "scipy",
    "LocalSparsityDetector": "scipy",
}
# a type alias (a union of classes) has no docstring of its own: the reference shows its comment
NO_DOCSTRING = {"Backend"}


@pytest.mark.parametrize("name", sorted(set(di.__all__) - NO_DOCSTRING))
def test_every_exported_name_has_an_example_that_runs(name):
    """Each docstring starts with a one-line summary and has an example (``np`` and ``di`` imported),
    run here as a doctest: the API reference shows what runs."""
    if name in NEEDS and not installed(NEEDS[name]):
        pytest.skip(f'the example of {name} needs {NEEDS[name]}: pip install -e ".[all]"')
    obj = getattr(di, name)
    summary = (obj.__doc__ or "").strip().split("\n")[0]
    assert summary.endswith((".", ":")) and len(summary) > 10, f"{name}: no one-line summary"
    (test,) = doctest.DocTestFinder(recurse=False).find(obj, name, globs={"np": np, "di": di})
    assert test.examples, f"{name}: its docstring has no example"
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    result = runner.run(test, out=lambda text: print(text, end=""))
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} example lines failed (printed above)"


def _run_as_a_script(page: pathlib.Path, needs: tuple, tmp_path: pathlib.Path) -> None:
    """A page's ``python`` blocks, in order, as one script in a fresh process from the repository's
    root, as a reader would run them (skipped, with the install line, where an engine it needs is
    missing)."""
    missing = [m for m in needs if not installed(m)]
    if missing:
        pytest.skip(f'{page.name} needs {", ".join(missing)}: pip install -e ".[all]"')
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
    assert blocks, page.name
    script = tmp_path / page.name.replace(".md", ".py")
    script.write_text("\n".join(blocks))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]


TUTORIALS = {  # page: what its code needs beyond numpy
    "scipy-optimize.md": ("scipy", "jax"),
    "torch-module.md": ("torch",),
    "jax-jit.md": ("jax",),
    "work-buffers.md": ("scipy", "jax"),
    "scipy-rule.md": ("scipy",),
    "reading-benchmarks.md": (),
    "has-aux.md": ("scipy", "jax"),
}


def test_every_tutorial_is_listed_here():
    assert sorted(p.name for p in (DOCS / "tutorials").glob("*.md")) == sorted(TUTORIALS)


@pytest.mark.parametrize("page", sorted(TUTORIALS))
def test_each_tutorial_runs_as_a_script(page, tmp_path):
    """A tutorial's code blocks, in order, are one script; its assertions compare with independent
    references (SciPy's closed forms, torch's backward, jax.grad, analytic Jacobians). Run in a fresh
    process from the repository's root, as a reader would run it."""
    _run_as_a_script(DOCS / "tutorials" / page, TUTORIALS[page], tmp_path)


GUIDES = {  # guides whose code blocks make one script (the others show fragments): what it needs
    "performance.md": (),
    "reliability.md": ("torch",),
}


@pytest.mark.parametrize("page", sorted(GUIDES))
def test_each_runnable_guide_runs_as_a_script(page, tmp_path):
    """The guide's examples, in order, as one script in a fresh process: their assertions compare
    with closed forms (the derivative of sin(x)^2, of exp(i x)) and with the behaviour the page
    states (the error raised, x unchanged)."""
    _run_as_a_script(DOCS / page, GUIDES[page], tmp_path)


def test_the_harness_guide_counts_the_catalogue_as_it_is():
    from diffinterface.testing import default_scenarios

    stated = re.search(r"(\d+) scenarios in all", (DOCS / "testing.md").read_text())
    assert stated and int(stated.group(1)) == len(default_scenarios())
