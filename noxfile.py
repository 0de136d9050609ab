"""nox sessions: the whole suite, one per engine (``tests-engine``, parametrised: only that engine installed), the lowest declared versions, the wheel, lint.

torch is installed as ``torch==2.13.0`` first: on these machines that pin takes a local CPU build,
while an unpinned ``torch`` would download a CUDA build of several GB.
"""

from __future__ import annotations

import re
from pathlib import Path

import nox

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, as a package
    import tomli as tomllib

ROOT = Path(__file__).parent
TORCH = "torch==2.13.0"
nox.options.sessions = ["tests", "lint"]


def _tests(session: nox.Session, extras: str, torch: bool) -> None:
    if torch:
        session.install(TORCH)
    session.install("-e", f".[{extras}]")
    session.run("pytest", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """Every backend installed."""
    _tests(session, "all,test", torch=True)


def lowest_pins() -> list[str]:
    """``name==lowest`` for every ``name>=lowest`` that pyproject.toml declares (dependencies and
    extras): the versions whose support the lower bounds claim. torch's is the local 2.13.0 build."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"]) + [r for rs in project["optional-dependencies"].values() for r in rs]
    pins = {}
    for requirement in declared:
        found = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9.]+)", requirement.strip())
        if found:
            pins[found[1].lower()] = (
                f"{found[1].lower()}=={found[2]}" if found[2].count(".") >= 2 else f"{found[1].lower()}=={found[2]}.*"
            )
    pins["torch"] = TORCH
    return sorted(pins.values())


@nox.session(name="tests-oldest")
def tests_oldest(session: nox.Session) -> None:
    """Every backend at the lowest version pyproject.toml declares (``name==X.Y.*`` for a ``>=X.Y``
    bound: the oldest release line, with its fixes), installed through a constraints file so that no
    dependency of the project moves above it."""
    constraints = Path(session.create_tmp()) / "oldest.txt"
    constraints.write_text("\n".join(lowest_pins()) + "\n")
    session.log(constraints.read_text())
    session.install(TORCH)
    session.install("-c", str(constraints), "-e", ".[all,test]")
    session.run("python", "-m", "pip", "list")
    session.run("pytest", *session.posargs)


@nox.session(name="tests-numpy")
def tests_numpy(session: nox.Session) -> None:
    """No engine at all: finite differences on numpy; engine tests are skipped with their reason."""
    _tests(session, "test", torch=False)


# the engines a one-engine session installs, each alone: nox -s tests-engine (all of them, one after the
# other) or nox -s "tests-engine(engine='mlx')" (one)
ENGINES = ["jax", "torch", "autograd", "tensorflow", "mlx", "pytensor"]


@nox.session(name="tests-engine")
@nox.parametrize("engine", ENGINES)
def tests_engine(session: nox.Session, engine: str) -> None:
    """One engine installed (the package's ``[ENGINE,test]`` extras), the others absent: their tests are
    skipped with their reason."""
    _tests(session, f"{engine},test", torch=engine == "torch")


@nox.session
def wheel(session: nox.Session) -> None:
    """Build the wheel, install it, and run the tests from outside the source tree against it."""
    tmp = Path(session.create_tmp())
    for old in tmp.glob("*.whl"):
        old.unlink()
    session.install(TORCH)
    session.run("pip", "wheel", "--no-deps", "-w", str(tmp), str(ROOT))
    (built,) = tmp.glob("diffinterface-*.whl")
    session.install(f"{built}[all,test]")
    session.install("--force-reinstall", "--no-deps", str(built))  # a reused venv (-r) keeps the same version
    session.chdir(tmp)
    session.run(
        "python",
        "-c",
        "import diffinterface.backends.finitediff as m, diffinterface.testing as t; "
        "assert 'site-packages' in m.__file__ and 'site-packages' in t.__file__, m.__file__; print(m.__file__)",
    )
    session.run("pytest", str(ROOT / "tests"), "-p", "no:cacheprovider", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint and format), mypy and pyright (standard mode, no error) over the package and the
    engines' adapters (the root backends/ folder; configured in pyproject.toml)."""
    session.install(TORCH)
    session.install("-e", ".[all,lint]")
    session.run("ruff", "check", str(ROOT))
    session.run("ruff", "format", "--check", str(ROOT))
    session.run("mypy", "diffinterface", "backends")
    session.run("pyright", "diffinterface", "backends")


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site (mkdocs.yml, docs/): MkDocs with Material and mkdocstrings, every warning
    an error (``strict: true``): a broken link, a missing page, a docstring mkdocstrings cannot read.
    The site goes to ``site/`` at the repository's root (ignored by git); open ``site/index.html``."""
    session.install("-e", ".[docs]")
    site = ROOT / "site"
    session.run("mkdocs", "build", "--strict", "--site-dir", str(site), env={"NO_MKDOCS_2_WARNING": "1"})
    session.log(f"the site is in {site}; open {site / 'index.html'}")


# measured 0.944 (2026-11-24); the rest is in the engines' adapters (diffinterface.backends.*, the root backends/)
TYPE_COMPLETENESS = 0.90


@nox.session
def types(session: nox.Session) -> None:
    """Type completeness of the installed package (``pyright --verifytypes``, which needs a
    non-editable install): fails below TYPE_COMPLETENESS, and prints what is left to annotate."""
    import json

    session.install("pyright")
    session.install("--no-deps", "--force-reinstall", str(ROOT))
    session.chdir(session.create_tmp())  # not the source tree: pyright must read the installed copy
    report = session.run(
        "pyright",
        "--verifytypes",
        "diffinterface",
        "--ignoreexternal",
        "--outputjson",
        silent=True,
        success_codes=[0, 1],
    )
    found = json.loads(report or "{}")["typeCompleteness"]
    score = found["completenessScore"]
    for symbol in found["symbols"]:
        if symbol["isExported"] and not symbol["isTypeKnown"]:
            session.log(f"not fully typed: {symbol['name']}")
    session.log(f"type completeness {score:.1%} (required {TYPE_COMPLETENESS:.0%})")
    if score < TYPE_COMPLETENESS:
        session.error(f"type completeness {score:.1%} is below {TYPE_COMPLETENESS:.0%}")
