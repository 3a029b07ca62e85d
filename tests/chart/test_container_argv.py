"""Every container the chart or the operator runs gets an argv the image can run.

The argv is composed as the kubelet does it: the image's ENTRYPOINT and CMD (read from the
repository's Dockerfile, the image the chart and the renderer name), overridden by the
container's ``command`` and ``args``; ``$(VAR)`` expanded from the container's env. Then
each is parsed, without running it, by the installed project's own command line (click's
parser: every option, value type and choice is checked) or, for the ``helm test`` pod's
Python, compiled.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from specops_lab.podrunner import container_env, expand, parse_pod

from specops.api import parse_service
from specops.cli import main
from specops.render import RenderOptions, plan
from tests.lab.podrunner.pods import EXAMPLE, pod_of

from .chart_render import REPO, by_kind
from .conftest import Render

DOCKERFILE = REPO / "Dockerfile"
_INSTRUCTION = re.compile(r"^(ENTRYPOINT|CMD)\s+(.+)$", re.MULTILINE)


def _image_defaults(dockerfile: Path) -> tuple[list[str], list[str]]:
    """ENTRYPOINT and CMD of the image's last stage (exec form, as the chart needs)."""
    text = dockerfile.read_text()
    last_stage = text[[m.start() for m in re.finditer(r"^FROM ", text, re.MULTILINE)][-1] :]
    found: dict[str, list[str]] = {"ENTRYPOINT": [], "CMD": []}
    for instruction, value in _INSTRUCTION.findall(last_stage):
        parsed = json.loads(value)
        assert isinstance(parsed, list), f"{instruction} must be in exec (JSON) form: {value}"
        found[instruction] = parsed
    return found["ENTRYPOINT"], found["CMD"]


def kubelet_argv(
    container: dict[str, Any], entrypoint: Sequence[str], cmd: Sequence[str]
) -> list[str]:
    """What the container runtime executes (the Pod API's rules for command and args)."""
    command, args = container.get("command"), container.get("args")
    if command is None and args is None:
        return [*entrypoint, *cmd]
    if command is None:
        return [*entrypoint, *(args or [])]
    return [*command, *(args or [])]


def dry_parse(argv: Sequence[str]) -> click.Context:
    """Parse ``specops ...`` down to its leaf command, as running it would, without running."""
    assert argv[0] == "specops", argv
    command: click.Command = main
    name: str | None = "specops"
    args = list(argv[1:])
    parent: click.Context | None = None
    while True:
        ctx = command.make_context(name, args, parent=parent)
        if not isinstance(command, click.Group):
            return ctx
        name, sub, args = command.resolve_command(ctx, [*ctx._protected_args, *ctx.args])
        assert sub is not None, argv
        command, parent = sub, ctx


def test_the_image_runs_the_specops_command() -> None:
    entrypoint, cmd = _image_defaults(DOCKERFILE)
    assert entrypoint == ["specops"]
    assert cmd == []


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"operator": {"clusterWide": True, "peering": {"enabled": True}}},
        {"operator": {"watchNamespaces": ["a", "b"], "extraArgs": ["--log-format=json"]}},
    ],
    ids=["defaults", "cluster-wide-peering", "namespaces-extra-args"],
)
def test_the_charts_operator_container_parses(render: Render, values: dict[str, Any]) -> None:
    """Before the one image, the chart's ``args: [operator, ...]`` ran as
    ``specops operator operator ...`` (the image's entrypoint already said ``operator``)."""
    (deployment,) = by_kind(render(values), "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    argv = kubelet_argv(container, *_image_defaults(DOCKERFILE))
    ctx = dry_parse(argv)
    assert ctx.info_name == "operator"
    assert ctx.params["sidecar_image"] == container["image"]


def test_the_sidecar_the_operator_renders_parses_with_its_env_expanded() -> None:
    service = parse_service(yaml.safe_load(EXAMPLE.read_text()))
    objects = plan(service, RenderOptions()).objects
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    pod = parse_pod(pod_of(deployment, "llama-abc-1"))
    (sidecar,) = [c for c in pod.spec.containers if c.name == "specops-sidecar"]
    raw = next(
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == sidecar.name
    )
    env = container_env(pod, sidecar)
    argv = [expand(token, env) for token in kubelet_argv(raw, *_image_defaults(DOCKERFILE))]
    ctx = dry_parse(argv)
    assert ctx.info_name == "sidecar"
    assert "llama-abc-1" in argv


def test_the_helm_test_pods_check_compiles(render: Render) -> None:
    pod = next(o for o in render() if o["kind"] == "Pod")
    (container,) = pod["spec"]["containers"]
    argv = kubelet_argv(container, *_image_defaults(DOCKERFILE))
    assert argv[:2] == ["python", "-c"], argv  # the image's Python (python:3.11-slim)
    compile(argv[2], "helm-test", "exec")
    assert len(argv) == 3


def test_a_wrong_argument_is_caught_as_the_container_would_fail() -> None:
    with pytest.raises(click.UsageError, match="unexpected extra argument"):
        dry_parse(["specops", "operator", "operator", "--namespace=x"])
    with pytest.raises(click.BadParameter):
        dry_parse(["specops", "operator", "--metrics-port=http"])


def test_allowed_prometheus_servers_reach_the_operator(render: Render) -> None:
    allowed = ["http://prometheus.monitoring:9090", "thanos.monitoring"]
    (deployment,) = by_kind(render({"operator": {"allowedPrometheus": allowed}}), "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    ctx = dry_parse(kubelet_argv(container, *_image_defaults(DOCKERFILE)))
    assert ctx.params["allowed_prometheus"] == tuple(allowed)
    (default,) = by_kind(render({}), "Deployment")
    (plain,) = default["spec"]["template"]["spec"]["containers"]
    assert (
        dry_parse(kubelet_argv(plain, *_image_defaults(DOCKERFILE))).params["allowed_prometheus"]
        == ()
    )
