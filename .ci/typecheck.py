"""mypy over gpuwatch, once, with the ratchet kept honest (``python .ci/typecheck.py``).

pyproject.toml lists the modules whose type errors are still tolerated (the one
``[[tool.mypy.overrides]]`` block with ``ignore_errors = true``). ``python -m mypy`` hides
their errors, so it cannot tell when one of them has become clean. This runs mypy once with
that list lifted and fails (exit 1) when

- a module *not* on the list has an error (exactly what ``python -m mypy`` would report), or
- a module on the list has none, or no longer exists: it must come off, the list only shrinks.

Exit 0 otherwise. Everything else (strict modules, flags, stub settings) is pyproject.toml's.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # mypy itself depends on tomli before 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "gpuwatch"

#: ``path:line: error: message  [code]`` (also ``path:line:column:`` and notes).
_LINE = re.compile(r"^(?P<path>[^:\n]+\.pyi?):\d+(?::\d+)?: (?P<severity>error|note): ")


@dataclass(frozen=True)
class Verdict:
    """What one mypy run says about the ratchet."""

    #: mypy's lines (errors and their notes) for modules that are not on the ratchet list.
    untolerated: list[str]
    #: Modules on the list without a single error: they must come off it.
    clean: list[str]
    #: Tolerated errors per listed module.
    tolerated: dict[str, int]

    @property
    def ok(self) -> bool:
        return not self.untolerated and not self.clean


def ratchet_block(mypy_config: Mapping[str, Any]) -> dict[str, Any]:
    """The one override that tolerates errors; its modules must be named one by one."""
    blocks = [o for o in mypy_config.get("overrides", []) if o.get("ignore_errors") is True]
    if len(blocks) != 1:
        raise ValueError(f"expected one override with ignore_errors = true, found {len(blocks)}")
    modules = blocks[0]["module"]
    modules = [modules] if isinstance(modules, str) else list(modules)
    if any("*" in m for m in modules):
        raise ValueError("the ratchet names modules one by one (no wildcards)")
    return {**blocks[0], "module": modules}


def ratchet_modules(mypy_config: Mapping[str, Any]) -> list[str]:
    return list(ratchet_block(mypy_config)["module"])


def without_ratchet(mypy_config: Mapping[str, Any]) -> dict[str, Any]:
    """The same configuration with the ratchet's override left out."""
    ratchet_block(mypy_config)  # exactly one, or ValueError
    overrides = [o for o in mypy_config.get("overrides", []) if o.get("ignore_errors") is not True]
    return {**mypy_config, "overrides": overrides}


def toml_text(mypy_config: Mapping[str, Any]) -> str:
    """``[tool.mypy]`` as TOML (strings, booleans, integers and lists of strings suffice)."""
    lines = ["[tool.mypy]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in mypy_config.items() if k != "overrides"]
    for override in mypy_config.get("overrides", []):
        lines += ["", "[[tool.mypy.overrides]]"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in override.items()]
    return "\n".join(lines) + "\n"


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return json.dumps(value)
    raise ValueError(f"no TOML spelling for {value!r} in [tool.mypy]")


def module_of(path: str) -> str:
    """``gpuwatch/core/run/link.py`` → ``gpuwatch.core.run.link`` (a package: its name)."""
    parts = list(Path(path).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def judge(output_lines: Iterable[str], ratchet: Sequence[str]) -> Verdict:
    """Sort mypy's output (run without the ratchet) into tolerated and untolerated."""
    listed = set(ratchet)
    tolerated: dict[str, int] = defaultdict(int)
    untolerated: list[str] = []
    for line in output_lines:
        match = _LINE.match(line)
        if match is None:
            continue
        module = module_of(match["path"])
        if module in listed:
            if match["severity"] == "error":
                tolerated[module] += 1
        else:
            untolerated.append(line)
    clean = [m for m in ratchet if tolerated.get(m, 0) == 0]
    return Verdict(untolerated, clean, {m: n for m, n in tolerated.items() if n})


class MypyDidNotRun(RuntimeError):
    """mypy exited 2 or worse (a bad configuration, a crash): its output says why."""


def run_mypy(mypy_config: Mapping[str, Any], cwd: Path = ROOT) -> list[str]:
    """mypy's output lines, with ``mypy_config`` as the whole configuration, run in ``cwd``."""
    with tempfile.TemporaryDirectory(prefix="gpuwatch-typecheck-") as tmp:
        config = Path(tmp) / "pyproject.toml"
        config.write_text(toml_text(mypy_config), encoding="utf-8")
        done = subprocess.run(
            [sys.executable, "-m", "mypy", "--config-file", str(config), "--no-error-summary"],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=False,
        )
    lines = (done.stdout + done.stderr).splitlines()
    if done.returncode not in (0, 1):  # 1: type errors were found
        raise MypyDidNotRun("\n".join([*lines, f"mypy exited {done.returncode}"]))
    return lines


def check(mypy_config: Mapping[str, Any], cwd: Path = ROOT) -> Verdict:
    """One mypy run over ``cwd`` with the ratchet of ``mypy_config`` lifted, judged."""
    return judge(run_mypy(without_ratchet(mypy_config), cwd), ratchet_modules(mypy_config))


def main() -> int:
    with (ROOT / "pyproject.toml").open("rb") as f:
        mypy_config = tomllib.load(f)["tool"]["mypy"]
    try:
        verdict = check(mypy_config)
    except MypyDidNotRun as exc:
        print(exc, file=sys.stderr)
        return 1
    for line in verdict.untolerated:
        print(line)
    for module in verdict.clean:
        print(
            f"{module} has no type error (or does not exist): take it off the ratchet list in "
            "pyproject.toml ([[tool.mypy.overrides]] with ignore_errors = true)"
        )
    tolerated = sum(verdict.tolerated.values())
    print(
        f"mypy: {'ok' if verdict.ok else 'FAILED'}; {tolerated} errors tolerated in "
        f"{len(verdict.tolerated)} ratchet modules"
    )
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
