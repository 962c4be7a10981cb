"""What ``gpuwatch export`` costs per million steps: wall time, peak memory, file size.

Writes a synthetic recording (``tests/reliability/synthetic_recording.py``: CPU steps of 2 ms in
two configurations, the tables a real run writes) of ``--steps`` steps, then runs the real CLI
(``gpuwatch export FILE --perfetto`` and ``--csv``, each in its own process) and reads that
process's peak resident memory from ``getrusage``. The recording's own load is in every
figure: the export reads the whole recording first.

    .venv/bin/python bench/export.py                  # 1.7 M steps
    .venv/bin/python bench/export.py --steps 200000   # quicker
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import machine

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "reliability"))

from synthetic_recording import write_recording  # noqa: E402

#: Runs one export in a fresh interpreter and reports its own peak RSS (Linux: KiB).
CHILD = """
import json, resource, sys, time
from gpuwatch.cli import main
started = time.perf_counter()
code = main(["export", *sys.argv[2:]])
seconds = time.perf_counter() - started
peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with open(sys.argv[1], "w") as f:
    json.dump({"code": code, "seconds": seconds, "peak_mib": peak_kib / 1024}, f)
"""


def run_export(recording: Path, fmt: str, out: Path, result: Path) -> dict[str, float]:
    subprocess.run(
        [sys.executable, "-c", CHILD, str(result), str(recording), f"--{fmt}", str(out)],
        check=True,
        cwd=ROOT,
    )
    figures = json.loads(result.read_text())
    if figures["code"] != 0:
        raise SystemExit(f"export --{fmt} failed with code {figures['code']}")
    figures["mib"] = out.stat().st_size / 2**20
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_700_000)
    args = parser.parse_args()
    print(machine.header(f"gpuwatch export of a {args.steps:,}-step recording"))
    with tempfile.TemporaryDirectory(prefix="gpuwatch-bench-export-") as folder:
        base = Path(folder)
        started = time.perf_counter()
        recording = write_recording(base / "run.gpuwatch", args.steps)
        print(
            f"synthetic recording: {recording.stat().st_size / 2**20:,.1f} MiB written in "
            f"{time.perf_counter() - started:.1f} s"
        )
        per_million = 1e6 / args.steps
        print("| export | time | peak RSS | file | per 1 M steps: time, file |")
        print("|---|---:|---:|---:|---|")
        for fmt, suffix in (("perfetto", "json"), ("csv", "csv")):
            figures = run_export(recording, fmt, base / f"out.{suffix}", base / "result.json")
            print(
                f"| --{fmt} | {figures['seconds']:.1f} s | {figures['peak_mib']:,.0f} MiB | "
                f"{figures['mib']:,.0f} MiB | {figures['seconds'] * per_million:.1f} s, "
                f"{figures['mib'] * per_million:,.0f} MiB |",
                flush=True,
            )
    print(f"# load average after: {machine.load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
