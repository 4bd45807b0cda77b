"""How long `colloc` commands take to start, against Python itself and the server's imports.

    .venv/bin/python bench/cli_startup.py [--repeats N]

Runs each command as a fresh process, N times (default 15) round-robin so that a busy
machine slows every command alike, and prints the median and the fastest wall time.
Two baselines are timed in the same run: `python -c pass` (the interpreter alone) and
`python -c "import service.app"` (the whole server: FastAPI, SQLAlchemy, Alembic and
every domain), which every command paid before the CLI imported per subcommand. The
commands: `colloc --help`; `colloc jobs` against an address where nothing listens (it
imports its handler and httpx, fails to connect, exits 1) and `colloc jobs --help`;
`colloc simjob` with no simulated GPU (it imports its handler and exits 2) and its
`--help`; `colloc agent --help`.

Any Python with Colloc installed runs it, with the `colloc` script beside it: RESULTS.md
measures an install without the dev extra, as users and nodes have it (in `.venv`,
packages of the dev extra make httpx slower to import). Run it from outside the checkout
to time an installed copy rather than the checkout's code.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

COLLOC = str(Path(sys.executable).with_name("colloc"))  # the console script users run
UNREACHABLE = "http://127.0.0.1:9"  # the discard port: nothing answers there

COMMANDS: dict[str, list[str]] = {
    "python -c pass": [sys.executable, "-c", "pass"],
    'python -c "import service.app"': [sys.executable, "-c", "import service.app"],
    "colloc --help": [COLLOC, "--help"],
    "colloc jobs (unreachable server)": [COLLOC, "jobs", "--server", UNREACHABLE],
    "colloc jobs --help": [COLLOC, "jobs", "--help"],
    "colloc simjob (no GPU: exits 2)": [COLLOC, "simjob", "--peak-mib", "1", "--seconds", "0"],
    "colloc simjob --help": [COLLOC, "simjob", "--help"],
    "colloc agent --help": [COLLOC, "agent", "--help"],
}
PYTHON, SERVER = list(COMMANDS)[:2]


def wall_s(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="runs of each command")
    repeats = parser.parse_args().repeats
    # no COLLOC_* settings or visible GPUs of the caller's: every run starts the same way
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COLLOC_", "CUDA_VISIBLE"))}
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for argv in COMMANDS.values():  # one warm-up each: byte-code caches, page cache
        wall_s(argv, env)
    for _ in range(repeats):
        for name, argv in COMMANDS.items():
            times[name].append(wall_s(argv, env))
    median = {name: statistics.median(runs) for name, runs in times.items()}
    fastest = {name: min(runs) for name, runs in times.items()}
    print(f"{repeats} runs each; x pass and of server: medians (fastest runs in brackets)\n")
    print("| command | median s | fastest s | x `python -c pass` | of `import service.app` |")
    print("|---|---|---|---|---|")
    for name in COMMANDS:
        over_python = f"{median[name] / median[PYTHON]:.1f} ({fastest[name] / fastest[PYTHON]:.1f})"
        of_server = f"{median[name] / median[SERVER]:.2f} ({fastest[name] / fastest[SERVER]:.2f})"
        print(
            f"| `{name}` | {median[name]:.3f} | {fastest[name]:.3f} | {over_python} | {of_server} |"
        )


if __name__ == "__main__":
    main()
