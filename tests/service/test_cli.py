"""The `colloc` command's own habits: help, version, completion, messages and formats."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import unicodedata
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.cli import build_parser, completion, run_command
from service.cli import client as cli_client
from service.cli.client import NO_TOKEN, _error_message, load_job_file
from service.cli.errors import CliError
from service.cli.output import age, gib, short_gpu, terminal_safe
from service.cli.views import REASON_WIDTH
from tests.conftest import bearer, make_token, register_node, submit
from tests.service.test_lifecycle import beat, cycle, exited


def _described(parser: argparse.ArgumentParser, path: str) -> Iterator[str]:
    """Every option, argument and subcommand without a help text, by where it is."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if not helps.get(name):
                    yield f"{path} {name}"
                yield from _described(sub, f"{path} {name}")
        elif not action.help:
            yield f"{path} {'/'.join(action.option_strings) or action.dest}"


def test_every_help_entry_says_what_it_is() -> None:
    assert list(_described(build_parser(), "colloc")) == []


def _commands(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, Any]]:
    """(command line, parser) for every command that runs (one without subcommands)."""
    subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subcommands:
        yield path, parser
    for action in subcommands:
        for name, sub in action.choices.items():
            yield from _commands(sub, f"{path} {name}")


def test_every_command_names_a_handler_that_exists() -> None:
    """Handlers are named "module:function" and imported only when their command runs, so a
    wrong name would otherwise show only then."""
    missing = []
    for path, parser in _commands(build_parser(), "colloc"):
        module, _, name = str(parser.get_default("run")).partition(":")
        if not callable(getattr(import_module(module), name, None)):
            missing.append(f"{path}: {parser.get_default('run')}")
    assert missing == []


def test_version() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "--version"], capture_output=True, text=True
    )
    assert result.returncode == 0 and result.stdout.startswith("colloc 0.")


def _complete(shell: str, script: Path, words: list[str]) -> list[str]:
    """What the completion function offers for the last of `words`."""
    quoted = " ".join(f"'{w}'" for w in words)
    if shell == "bash":
        run = f"source {script}; COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; _colloc"
    else:  # zsh: bashcompinit runs the same function with 0-based arrays
        run = (
            f"autoload -U compinit && compinit -u; source {script}; setopt ksharrays; "
            f"COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; _colloc"
        )
    result = subprocess.run(
        [shell, "-c", run + '; printf "%s\\n" "${COMPREPLY[@]}"'],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    offered = result.stdout.split()
    # zsh's bashcompinit hands every word to compadd, which keeps those that match
    return [w for w in offered if w.startswith(words[-1])] if shell == "zsh" else offered


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_offers_commands_options_and_choices(shell: str, tmp_path: Path) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    script = tmp_path / "colloc.sh"
    script.write_text(completion.script(build_parser(), shell))
    assert "nodes" in _complete(shell, script, ["colloc", "no"])
    assert _complete(shell, script, ["colloc", "jobs", "--wa"]) == ["--watch"]
    assert _complete(shell, script, ["colloc", "jobs", "-o", ""]) == [
        "table",
        "wide",
        "json",
        "name",
    ]
    assert _complete(shell, script, ["colloc", "token", "create", "--role", "a"]) == [
        "admin",
        "agent",
    ]


def test_units_and_ages_read_the_same_everywhere() -> None:
    assert gib(6963) == "6.8 GiB" and gib(None) == "-"
    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    for delta, shown in ((30, "30s"), (150, "2m"), (3 * 3600, "3h"), (3 * 86400, "3d")):
        assert age((now - timedelta(seconds=delta)).isoformat(), now) == shown
    assert short_gpu("Tesla T4") == "T4" and short_gpu("Acme X1") == "Acme X1"


def test_a_shell_line_command_is_refused_with_the_list_form(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: x\ncommand: python train.py --lr 3e-4\n")
    with pytest.raises(CliError) as error:
        load_job_file(job)
    assert '["python", "train.py", "--lr", "3e-4"]' in str(error.value)
    assert error.value.status == 2


def test_api_errors_speak_of_what_the_user_sets() -> None:
    unauthenticated = {"error": {"code": "unauthenticated", "message": "send ... header"}}
    assert _error_message(401, unauthenticated, "", None) == NO_TOKEN
    assert "COLLOC_TOKEN" in NO_TOKEN and "--token" in NO_TOKEN
    assert "unknown or revoked" in _error_message(401, unauthenticated, "", "colloc_x")
    unknown = {
        "error": {
            "code": "unknown_gpu_model",
            "message": "unknown GPU model(s): V100",
            "details": {"unknown": ["V100"], "known": ["Tesla T4", "Tesla V100-SXM2-16GB"]},
        }
    }
    message = _error_message(422, unknown, "", "t")
    assert "accepted names: Tesla T4, Tesla V100-SXM2-16GB" in message


# clear the screen, cursor home, write "rm -rf ~" to the clipboard (OSC 52), and C1's CSI
EVIL = "\x1b[2J\x1b[H\x1b]52;c;cm0gLXJmIH4=\x07\x9b2J"


def test_control_characters_are_written_out() -> None:
    assert terminal_safe(f"a{EVIL}\x7f\tb") == (
        "a\\x1b[2J\\x1b[H\\x1b]52;c;cm0gLXJmIH4=\\x07\\x9b2J\\x7f\\x09b"
    )
    assert terminal_safe("grep 'a\\.b' é→") == "grep 'a\\.b' é→"  # kept as written
    # a right-to-left override shows "train_gpj.sh" as "train_hs.jpg"; zero width hides
    assert terminal_safe("train_\u202egpj.sh\u200b") == "train_\\u202egpj.sh\\u200b"
    bad = {"error": {"message": f"no such model {EVIL}", "details": {"known": [EVIL]}}}
    assert "\x1b" not in _error_message(422, bad, "", "t")


@pytest.mark.parametrize(
    "words",
    [
        ("show", "1", "--explain"),
        ("jobs",),
        ("jobs", "-o", "wide"),
        ("nodes", "-o", "wide"),
        ("release", "1"),
    ],
)
def test_no_control_character_reaches_the_readers_terminal(
    through_app: TestClient, database_url: str, capsys: Any, words: tuple[str, ...]
) -> None:
    """A user's command, the reason its agent copied from the job's stderr and a GPU
    model as an agent names it reach an admin's terminal written out, not acting on it."""
    mallory = bearer(make_token(database_url, "user", "mallory"))
    node = register_node(through_app, "n1", [("Tesla T4", 15360)])
    register_node(through_app, "n2", [(f"Acme X1{EVIL}", 15360)])
    body = {
        "name": "j",
        "command": ["python", f"train.py{EVIL}"],
        "memory_mib": 1000,
        "max_attempts": 1,
        "gpu_models": ["Tesla T4"],
    }
    job = through_app.post("/v1/jobs", json=body, headers=mallory).json()["id"]
    cycle(through_app)
    beat(through_app, node)
    oom = exited(job, code=1, outcome="oom")
    beat(
        through_app, node, [{**oom, "reason": f"torch.OutOfMemoryError: CUDA out of memory{EVIL}"}]
    )
    assert run_command(build_parser().parse_args([*words, "--server", "http://colloc"])) == 0
    out = capsys.readouterr().out
    assert not [c for c in out if c != "\n" and unicodedata.category(c) == "Cc"], out
    assert "\\x1b[2J" in out  # shown, not dropped
    if words == ("jobs",):  # the reason is cut to its column as it is shown
        header, row = out.splitlines()
        assert len(row[header.index("REASON") :]) == REASON_WIDTH


def test_jobs_filter_by_several_states(client: TestClient) -> None:
    """`colloc jobs --state pending,placed` asks the API for either state."""
    register_node(client, "n1", [("Tesla T4", 15360)])
    waiting = submit(client, memory_mib=1000)["id"]
    cancelled = submit(client, memory_mib=1000)["id"]
    assert client.post(f"/v1/jobs/{cancelled}/cancel").status_code == 200
    listed = client.get("/v1/jobs", params={"state": ["pending", "cancelled"]}).json()
    assert {j["id"] for j in listed["jobs"]} == {waiting, cancelled} and listed["total"] == 2
    only = client.get("/v1/jobs", params={"state": ["cancelled"]}).json()
    assert [j["id"] for j in only["jobs"]] == [cancelled]
    assert client.get("/v1/jobs", params={"state": ["pending", "asleep"]}).status_code == 422


def _answers(*jobs: dict[str, Any]) -> Callable[..., Any]:
    """A stand-in for the API that answers `jobs` in turn, and fails if asked again."""
    left = list(jobs)

    def request(_args: argparse.Namespace, _method: str, _path: str, **_kwargs: Any) -> Any:
        assert left, "asked the API again after the job had ended"
        return left.pop(0)

    return request


def test_show_watch_ends_once_the_job_has_ended(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        cli_client, "request", _answers({"id": 7, "state": "running"}, {"id": 7, "state": "oom"})
    )
    args = argparse.Namespace(id=7, explain=False, output="name", watch=True, interval=0.01)
    assert cli_client.run_show(args) == 0
    assert capsys.readouterr().out == "7\n7\n"


def test_cancel_names_each_job_once_in_its_errors(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(_args: argparse.Namespace, _method: str, path: str, **_kwargs: Any) -> Any:
        if "/5/" in path:
            raise CliError("job 5 does not exist (HTTP 404)")
        raise CliError("cannot reach Colloc at http://x: refused")

    monkeypatch.setattr(cli_client, "request", refuse)
    assert cli_client.run_cancel(argparse.Namespace(ids=[5, 6], output="table")) == 1
    assert capsys.readouterr().err.splitlines() == [
        "colloc: error: job 5 does not exist (HTTP 404)",
        "colloc: error: job 6: cannot reach Colloc at http://x: refused",
    ]


def test_a_job_id_beyond_what_the_api_holds_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["show", "99999999999"])
    assert exit_.value.code == 2
    assert "'99999999999' is not a job ID" in capsys.readouterr().err


def test_a_reader_that_goes_away_ends_the_command_without_a_traceback() -> None:
    """`colloc ... | head`: the pipe closes before the command has written."""
    read, write = os.pipe()
    os.close(read)
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "completion", "bash"],
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
    )
    os.close(write)
    assert result.stderr == "" and result.returncode == 141


@pytest.mark.parametrize("command", [["token", "list"], ["account", "list"], ["db", "upgrade"]])
def test_a_database_that_cannot_be_opened_is_a_message(command: list[str], tmp_path: Path) -> None:
    missing = f"sqlite:///{tmp_path / 'no-such-dir' / 'colloc.db'}"
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", *command, "--db", missing],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("colloc: error: cannot use the database")
    assert "unable to open database file" in result.stderr
