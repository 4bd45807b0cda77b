"""docker-compose.yml and the Dockerfile agree with the CLI and the packaged files."""

from __future__ import annotations

from pathlib import Path

import yaml

from agent.cluster import load_cluster
from service.cli import build_parser
from service.config import Settings


def test_compose_file_is_consistent_with_the_cli(repo_root: Path) -> None:
    compose = yaml.safe_load((repo_root / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "scheduler", "tokens"} <= set(services)
    agents = [name for name in services if name.startswith("agent")]
    assert len(agents) >= 2
    dockerfile = (repo_root / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["colloc"]' in dockerfile

    parser = build_parser()
    scheduler = parser.parse_args(services["scheduler"]["command"])
    assert scheduler.command == "server"
    url = Settings(database_url=services["scheduler"]["environment"]["COLLOC_DATABASE_URL"])
    assert url.database_url.startswith("postgresql+psycopg://")
    assert url.database_url.split("@")[1].startswith("postgres:")
    assert "postgres" in services["scheduler"]["depends_on"]

    nodes = {node.name for node in load_cluster(repo_root / "agent/clusters/example.yaml")}
    make_tokens = services["tokens"]["command"][0]  # "for n in NODE NODE; do ... --name $$n"
    assert "--role agent --name $$n" in make_tokens and "--role admin" in make_tokens
    token_nodes = set(make_tokens.split(";")[0].split(" in ")[1].split())
    assert services["scheduler"]["depends_on"]["tokens"]["condition"] == (
        "service_completed_successfully"
    )
    seen = set()
    for name in agents:
        args = parser.parse_args(services[name]["command"])
        assert args.command == "agent"
        assert args.server == f"http://scheduler:{scheduler.port}"
        assert str(args.simulate) == "/app/agent/clusters/example.yaml"
        assert args.node in nodes
        # the agent token the `tokens` step made for this node
        assert str(args.token_file) == f"/tokens/agent-{args.node}.token"
        assert args.node in token_nodes
        # ... from the one volume holding only that token (never the admin's): the
        # `tokens` step writes /tokens/NODE/agent-NODE.token into it
        assert services[name]["volumes"] == [f"{args.node}-token:/tokens:ro"]
        assert f"{args.node}-token:/tokens/{args.node}" in services["tokens"]["volumes"]
        assert "> /tokens/$$n/agent-$$n.token" in make_tokens and "umask 077" in make_tokens
        # an unprivileged agent running jobs as itself (simulated nodes have no accounts)
        assert not services[name]["user"].startswith("0") and args.run_jobs_as == "agent"
        seen.add(args.node)
        assert "scheduler" in services[name]["depends_on"]
    assert len(seen) == len(agents), "two agents would claim the same node"
    for path in ("estimator", "service", "agent", "migrations"):
        assert f"COPY {path} {path}" in dockerfile
