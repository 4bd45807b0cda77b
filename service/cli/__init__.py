"""The `colloc` command: one entry point gathering each package's commands.

This is the composition root, so it is the one place that knows every package.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from importlib.metadata import version

from sqlalchemy.exc import SQLAlchemyError

from agent import cli as agent_cli
from estimator import cli as estimator_cli
from service.cli import client, completion, priority, server, simulate, tokens, up, views
from service.cli.errors import CliError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="colloc", description="GPU memory-aware job collocation scheduler"
    )
    parser.add_argument(
        "--version", action="version", version=f"colloc {version('colloc')}", help="print it"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (server, up, client, views, priority, tokens, simulate, agent_cli, estimator_cli):
        module.add_commands(commands)
    completion.add_commands(commands, parser)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Run one `colloc` command; errors become one clear line and a non-zero status."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # quiet by default: request lines and each migration step are noise to a user
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    try:
        status = args.run(args)
    except CliError as exc:
        print(f"colloc: error: {exc}", file=sys.stderr)
        status = exc.status
    except SQLAlchemyError as exc:  # token, account and db commands open the database
        reason = getattr(exc, "orig", None) or exc
        print(
            f"colloc: error: cannot use the database (--db, COLLOC_DATABASE_URL): {reason}",
            file=sys.stderr,
        )
        status = 1
    except KeyboardInterrupt:
        status = 130
    except BrokenPipeError:
        # the reader went away (`colloc jobs --watch | head`): stop quietly, as cat(1)
        # does; stdout goes to /dev/null so that Python's flush at exit cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 141  # how a shell reports a process that SIGPIPE ended (128 + 13)
    sys.exit(status)
