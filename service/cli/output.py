"""How client commands print: tables, `-o json|wide|name`, memory in GiB, ages, `--watch`."""

from __future__ import annotations

import argparse
import json
import sys
import time
import unicodedata
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from estimator.gpus import find_gpu_model
from service.cli.errors import CliError

# Seconds between refreshes under --watch: `watch`'s default (procps-ng watch(1)).
WATCH_INTERVAL_S = 2.0


def _hidden(char: str) -> bool:
    """Unicode's control characters (category Cc: C0 with ESC, DEL, C1, whose CSI is
    U+009B) and its format characters (Cf: the bidirectional overrides and isolates,
    zero-width spaces and joiners), which reorder or hide what a terminal shows."""
    return unicodedata.category(char) in ("Cc", "Cf")


def terminal_safe(text: str) -> str:
    """`text` with its control and format characters written out (ESC as \\x1b, U+202E
    as \\u202e), as `ls -b` does: what users and their jobs wrote (a command, a reason
    copied from a job's stderr) then cannot clear the screen, rewrite lines, set the
    clipboard or show its text reordered to whoever reads it. A backslash is kept as
    it is, so a command reads as it was given."""
    if text.isprintable():
        return text
    return "".join(_escaped(char) if _hidden(char) else char for char in text)


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def add_output_option(parser: argparse.ArgumentParser, formats: Sequence[str]) -> None:
    """`-o FORMAT` (and `--json`, its short form) with the formats this command prints."""
    parser.add_argument(
        "-o",
        "--output",
        choices=["table", *formats],
        default="table",
        help="table (default), " + ", ".join(formats) + " (name: one ID per line)",
    )
    parser.add_argument(
        "--json", dest="output", action="store_const", const="json", help="same as -o json"
    )


def add_watch_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-w", "--watch", action="store_true", help="redraw every --interval seconds until Ctrl-C"
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=WATCH_INTERVAL_S,
        help=f"seconds between redraws under --watch (default {WATCH_INTERVAL_S:g})",
    )


def watching(
    args: argparse.Namespace, render: Callable[[], int], ended: Callable[[], bool] = lambda: False
) -> int:
    """`render` once, or under --watch again every interval (screen cleared on a terminal,
    frames one after another otherwise) until Ctrl-C, or until `ended` says that what is
    watched can change no more (a finished job)."""
    if not args.watch:
        return render()
    if args.interval <= 0:
        raise CliError("--interval must be positive", 2)
    try:
        while True:
            if sys.stdout.isatty():
                sys.stdout.write("\x1b[H\x1b[2J")
            render()
            if ended():
                return 0
            if args.output == "table":
                print(f"\n{datetime.now():%H:%M:%S}, every {args.interval:g} s; Ctrl-C stops")
            sys.stdout.flush()
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0


def print_json(value: Any) -> None:
    print(json.dumps(value))


def print_listing(
    output: str, answer: Any, names: Sequence[object], table: Callable[[bool], None]
) -> None:
    """A listing as `-o` asks: the API's answer as JSON, one name a line, or
    `table(wide)`."""
    if output == "json":
        print_json(answer)
    elif output == "name":
        for name in names:
            print(name)
    else:
        table(output == "wide")


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Columns as wide as their widest cell, every cell terminal-safe."""
    lines = [[terminal_safe(cell) for cell in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    for row in lines:
        line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        print(line.rstrip())


def gib(mib: int | float | None) -> str:
    """MiB as GiB with one decimal, the unit every human-readable output uses."""
    return "-" if mib is None else f"{mib / 1024:.1f} GiB"


def short_gpu(model: str) -> str:
    """A GPU model's first alias (`T4` for `Tesla T4`), or its name if uncatalogued."""
    known = find_gpu_model(model)
    return known.aliases[0] if known is not None and known.aliases else model


def age(iso: str, now: datetime | None = None) -> str:
    """How long ago `iso` was, the way kubectl shows ages (45s, 12m, 3h, 2d)."""
    seconds = max(
        0, int(((now or datetime.now(UTC)) - datetime.fromisoformat(iso)).total_seconds())
    )
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
