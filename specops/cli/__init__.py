"""The ``specops`` command line: one group, each subcommand in a module of its own.

``crd`` and ``render`` live here; the operator, the sidecar and each lab package keep their
command in their own ``_cli`` module, so this package imports none of the lab."""

from __future__ import annotations

import importlib

import click

from specops import __version__

# Each entry is "module:attribute" naming a click command or group added to `specops`.
# Imported lazily so that `specops crd` does not pay for the simulated engine's imports.
_SUBCOMMANDS: dict[str, str] = {
    "advise": "specops.advise._cli:advise_command",
    "crd": "specops.cli._crd:crd",
    "bench": "specops_lab.bench._cli:bench",
    "sim": "specops_lab.sim._cli:sim",
    "load": "specops_lab.loadgen._cli:load",
    "render": "specops.cli._render:render",
    "operator": "specops_operator._cli:operator",
    "cluster": "specops_lab.cluster._cli:cluster",
    "dashboards": "specops.dashboards._cli:dashboards",
    "alerts": "specops.alerts._cli:alerts",
    "sidecar": "specops_sidecar._cli:sidecar",
    "podrunner": "specops_lab.podrunner._cli:podrunner",
    "scale": "specops_lab.scale._cli:scale",
    "demo": "specops_lab.demo._cli:demo",
}


# A missing module of these is a broken install, not a missing extra.
_OWN_PACKAGES = frozenset({"specops", "specops_operator", "specops_sidecar"})


def _missing(cmd_name: str, module_name: str, missing: str) -> str:
    """What to install for a command whose module, or a library it needs, is absent."""
    fix = (
        "it is part of the lab (simulated engine, benchmark, demo, local cluster), a "
        "distribution of its own: install it with pip install specops-lab (from a source "
        "tree: pip install ./lab)"
        if module_name.startswith("specops_lab.")
        else "install the dashboards extra with pip install 'specops[dashboards]'"
    )
    return f"`specops {cmd_name}` needs {missing}, which this install lacks: {fix}"


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _SUBCOMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, _, attribute = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.split(".")[0] in _OWN_PACKAGES:
                raise
            raise click.ClickException(_missing(cmd_name, module_name, exc.name)) from exc
        command = getattr(module, attribute)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=_LazyGroup)
@click.version_option(__version__, prog_name="specops")
def main() -> None:
    """Run vLLM with speculative decoding that follows the load."""


__all__ = ["main"]
