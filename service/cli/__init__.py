"""The `colloc` command: one entry point gathering each package's commands.

This is the composition root, so it is the one place that knows every package. It
builds the whole parser from each package's parser module, which names its handlers as
"module:function"; only the handler of the command given is imported, so that `colloc
--help`, `colloc jobs` or `colloc simjob` (in every simulated job) do not load the
server's FastAPI, SQLAlchemy and Alembic.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from importlib import import_module
from typing import Any

from agent import cli_parser as agent_parser
from estimator import cli_parser as estimator_parser
from service.cli import parser as service_parser
from service.cli.errors import CliError


class _PrintVersion(argparse.Action):
    """`--version`, looked up only when asked for: importlib.metadata alone takes about
    as long to import as the rest of the parser."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        from importlib.metadata import version

        print(f"colloc {version('colloc')}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="colloc", description="GPU memory-aware job collocation scheduler"
    )
    parser.add_argument("--version", action=_PrintVersion, help="print it")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    service_parser.add_commands(commands)
    agent_parser.add_commands(commands)
    estimator_parser.add_commands(commands)
    service_parser.add_completion_command(commands)
    return parser


def run_command(args: argparse.Namespace) -> int:
    """Import the handler the parsed command names ("module:function") and run it."""
    module, _, name = args.run.partition(":")
    handler: Callable[[argparse.Namespace], int] = getattr(import_module(module), name)
    return handler(args)


def main(argv: Sequence[str] | None = None) -> None:
    """Run one `colloc` command; errors become one clear line and a non-zero status."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # quiet by default: request lines and each migration step are noise to a user
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    try:
        status = run_command(args)
    except CliError as exc:
        print(f"colloc: error: {exc}", file=sys.stderr)
        status = exc.status
    except KeyboardInterrupt:
        status = 130
    except BrokenPipeError:
        # the reader went away (`colloc jobs --watch | head`): stop quietly, as cat(1)
        # does; stdout goes to /dev/null so that Python's flush at exit cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 141  # how a shell reports a process that SIGPIPE ended (128 + 13)
    sys.exit(status)
