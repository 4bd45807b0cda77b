"""Agent settings from a config file, the environment and flags; the shipped examples."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from agent.cli import FLAGS
from agent.client import tls_verification
from agent.config import AgentConfigError, load_settings
from service.cli import build_parser


def test_flags_win_over_environment_over_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text("server: http://file:1\nnode: from-file\nenforcement: kill\n")
    monkeypatch.setenv("COLLOC_SERVER", "http://env:2")
    settings = load_settings(config, {"node": "from-flag", "server": None})
    assert (settings.server, settings.node, settings.enforcement) == (
        "http://env:2",
        "from-flag",
        "kill",
    )


@pytest.mark.parametrize(
    "text, problem",
    [
        ("sample_interval_s: 2\n", "sample_interval_s"),
        ("enforcement: shout\n", "enforcement"),
        ("colour: blue\n", "colour"),
        ("- a list\n", "mapping"),
        ("server: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_settings_say_what_is_wrong(tmp_path: Path, text: str, problem: str) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(text)
    with pytest.raises(AgentConfigError, match=problem):
        load_settings(config, {})


def test_token_file(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("s3cret\n")
    with pytest.raises(AgentConfigError, match=r"open to other users \(mode 0644\).*chmod 600"):
        load_settings(None, {"token_file": tmp_path / "token"}).resolved_token()
    (tmp_path / "token").chmod(0o600)
    assert load_settings(None, {"token_file": tmp_path / "token"}).resolved_token() == "s3cret"
    with pytest.raises(AgentConfigError, match="cannot read token_file"):
        load_settings(None, {"token_file": tmp_path / "none"}).resolved_token()


def test_a_token_in_the_environment_does_not_shadow_the_token_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shell holding the admin's COLLOC_TOKEN (as the walk-through exports it) must not
    start an agent acting with it instead of the node's own token."""
    (tmp_path / "token").write_text("colloc_node\n")
    (tmp_path / "token").chmod(0o600)
    monkeypatch.setenv("COLLOC_TOKEN", "colloc_admin")
    settings = load_settings(None, {"token_file": tmp_path / "token"})
    with pytest.raises(AgentConfigError, match=r"both a token .* and token_file are set"):
        settings.resolved_token()


def test_a_config_file_holding_the_token_must_be_private(tmp_path: Path) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text("token: colloc_node\n")
    config.chmod(0o644)
    with pytest.raises(AgentConfigError, match=r"config file holding the token .*\(mode 0644\)"):
        load_settings(config, {})
    config.chmod(0o600)
    assert load_settings(config, {}).resolved_token() == "colloc_node"


def test_the_agent_takes_no_token_on_its_command_line() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["agent", "--token", "colloc_x"])


def test_the_shipped_config_and_systemd_unit_are_valid(repo_root: Path) -> None:
    settings = load_settings(repo_root / "examples" / "agent.yaml", {})
    assert settings.state_dir == Path("/var/lib/colloc-agent") and not settings.stop_jobs_on_exit
    unit = (repo_root / "examples" / "colloc-agent.service").read_text()
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    argv = shlex.split(exec_start.removeprefix("ExecStart="))
    args = build_parser().parse_args(argv[1:])
    assert args.command == "agent" and args.config == Path("/etc/colloc/agent.yaml")
    assert all(getattr(args, flag) is None for flag in FLAGS)
    assert "KillMode=process" in unit  # jobs must outlive an agent restart


def test_the_ca_file_comes_from_the_environment_and_must_be_usable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "ca.pem"
    monkeypatch.setenv("COLLOC_CA_FILE", str(missing))
    settings = load_settings(None, {"ca_file": None})
    assert settings.ca_file == missing
    with pytest.raises(ValueError, match=f"cannot use the CA file {missing}"):
        tls_verification(settings.ca_file)
    assert tls_verification(None) is True  # the system's CAs: verified, never skipped
