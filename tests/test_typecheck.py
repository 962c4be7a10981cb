"""The mypy ratchet (.ci/typecheck.py) and its list in pyproject.toml.

mypy over the whole package takes tens of seconds cold, so CI runs it once, after pytest; these
tests check the judging on mypy's real output for a small package, and the list's shape.
"""

from __future__ import annotations

import importlib.util
import sys
from fnmatch import fnmatchcase
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("typecheck", ROOT / ".ci" / "typecheck.py")
assert _spec is not None and _spec.loader is not None
typecheck = importlib.util.module_from_spec(_spec)
sys.modules["typecheck"] = typecheck  # dataclasses look their module up there
_spec.loader.exec_module(typecheck)


def mypy_config() -> dict:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["tool"]["mypy"]


def test_judge_sorts_errors_by_the_ratchet() -> None:
    output = [
        "pkg/listed.py:3: error: Incompatible types in assignment  [assignment]",
        "pkg/listed.py:3: note: See https://mypy.readthedocs.io",
        'pkg/sub/__init__.py:7:12: error: Name "x" is not defined  [name-defined]',
        'pkg/noted.py:1: note: Revealed type is "int"',
        "pkg/strict.py:9: error: Returning Any from function  [no-any-return]",
        "pkg/strict.py:9: note: a note belongs with its error",
        "pyproject.toml: note: unused section(s): module = ['x']",
    ]
    verdict = typecheck.judge(output, ["pkg.listed", "pkg.noted", "pkg.sub", "pkg.gone"])
    assert verdict.tolerated == {"pkg.listed": 1, "pkg.sub": 1}
    assert verdict.clean == ["pkg.noted", "pkg.gone"]  # a note alone is no error
    assert verdict.untolerated == output[4:6]
    assert not verdict.ok
    assert typecheck.judge(output[:3], ["pkg.listed", "pkg.sub"]).ok


def test_the_lifted_configuration_is_pyprojects_without_the_ratchet() -> None:
    config = mypy_config()
    lifted = tomllib.loads(typecheck.toml_text(typecheck.without_ratchet(config)))["tool"]["mypy"]
    kept = [o for o in config["overrides"] if not o.get("ignore_errors")]
    assert lifted == {**config, "overrides": kept}
    assert len(kept) == len(config["overrides"]) - 1


def test_the_ratchet_list_is_sorted_unique_existing_and_never_strict() -> None:
    config = mypy_config()
    ratchet = typecheck.ratchet_modules(config)
    assert ratchet == sorted(set(ratchet))
    for module in ratchet:
        path = ROOT.joinpath(*module.split("."))
        assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file(), module
    strict = next(o for o in config["overrides"] if o.get("disallow_untyped_defs"))
    patterns = [*strict["module"], *(p.removesuffix(".*") for p in strict["module"])]
    assert not [m for m in ratchet if any(fnmatchcase(m, p) for p in patterns)]


def test_the_ratchet_must_be_one_block_of_named_modules() -> None:
    with pytest.raises(ValueError, match="one override"):
        typecheck.ratchet_modules({"overrides": []})
    with pytest.raises(ValueError, match="wildcards"):
        typecheck.ratchet_modules({"overrides": [{"module": "a.*", "ignore_errors": True}]})


def test_one_mypy_run_finds_clean_listed_modules_and_errors_elsewhere(tmp_path: Path) -> None:
    """A real mypy run over a three-module package (seconds: builtins only)."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "still_bad.py").write_text('x: int = "text"\n')
    (pkg / "fixed.py").write_text("x: int = 1\n")
    (pkg / "new_error.py").write_text("def f() -> str:\n    return 1\n")
    config = {
        "files": ["pkg"],
        "cache_dir": str(tmp_path / "cache"),
        "overrides": [{"module": ["pkg.fixed", "pkg.still_bad"], "ignore_errors": True}],
    }
    verdict = typecheck.check(config, cwd=tmp_path)
    assert verdict.tolerated == {"pkg.still_bad": 1}
    assert verdict.clean == ["pkg.fixed"]
    assert len(verdict.untolerated) == 1
    assert verdict.untolerated[0].startswith("pkg/new_error.py:2: error:")
    assert "[return-value]" in verdict.untolerated[0]


def test_mypy_that_cannot_run_is_a_failure(tmp_path: Path) -> None:
    config = {"files": ["missing_dir"], "overrides": [{"module": ["a"], "ignore_errors": True}]}
    with pytest.raises(typecheck.MypyDidNotRun, match="exited 2"):
        typecheck.check(config, cwd=tmp_path)
