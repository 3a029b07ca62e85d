"""The wrapper Go module that builds the control plane from ``k8s.io/kubernetes``.

``go install k8s.io/kubernetes/cmd/...@vX`` is refused because kubernetes' go.mod
points its ``k8s.io/<staging>`` modules at ``./staging`` with ``replace`` lines and
requires them at the placeholder ``v0.0.0``. A wrapper module that requires
kubernetes and replaces each placeholder with the published ``v0.<minor>.<patch>``
builds the same code. The replace block is derived from kubernetes' own go.mod so a
new release that adds a staging module needs no edit here.
"""

from __future__ import annotations

import re

from specops.errors import ClusterError

__all__ = [
    "go_directives",
    "staging_modules",
    "staging_version",
    "version_ldflags",
    "wrapper_gomod",
]

WRAPPER_MODULE = "specops.local/controlplane"

_VERSION = re.compile(r"^v1\.(\d+)\.(\d+)$")
_PLACEHOLDER = re.compile(r"^\s*(?:require\s+)?(k8s\.io/[A-Za-z0-9._/-]+)\s+v0\.0\.0\s*(?://.*)?$")
_DIRECTIVE = re.compile(r"^(go|godebug)\s+(\S.*?)\s*$")


def _minor_patch(kubernetes_version: str) -> tuple[int, int]:
    match = _VERSION.match(kubernetes_version)
    if match is None:
        raise ClusterError(
            f"kubernetes version {kubernetes_version!r} is not of the form v1.<minor>.<patch>"
            " (for example v1.36.3)"
        )
    return int(match.group(1)), int(match.group(2))


def staging_version(kubernetes_version: str) -> str:
    """The version under which kubernetes ``v1.M.P`` publishes its staging modules: ``v0.M.P``."""
    minor, patch = _minor_patch(kubernetes_version)
    return f"v0.{minor}.{patch}"


def staging_modules(kubernetes_gomod: str) -> tuple[str, ...]:
    """The ``k8s.io/...`` modules kubernetes requires at the ``v0.0.0`` placeholder, sorted."""
    found = {
        m.group(1) for line in kubernetes_gomod.splitlines() if (m := _PLACEHOLDER.match(line))
    }
    if not found:
        raise ClusterError(
            "the go.mod of k8s.io/kubernetes requires no k8s.io module at v0.0.0;"
            " it is not a kubernetes go.mod (check the module download)"
        )
    return tuple(sorted(found))


def go_directives(gomod: str) -> tuple[str, ...]:
    """The ``go`` and ``godebug`` lines of a go.mod, so the wrapper builds as upstream does."""
    return tuple(
        f"{m.group(1)} {m.group(2)}" for line in gomod.splitlines() if (m := _DIRECTIVE.match(line))
    )


def wrapper_gomod(
    kubernetes_version: str, staging: tuple[str, ...], directives: tuple[str, ...]
) -> str:
    """The wrapper's go.mod: require kubernetes, replace each staging placeholder."""
    published = staging_version(kubernetes_version)
    replaces = "".join(f"\t{m} v0.0.0 => {m} {published}\n" for m in staging)
    head = "".join(f"{d}\n" for d in directives)
    return (
        f"module {WRAPPER_MODULE}\n\n{head}\nrequire k8s.io/kubernetes {kubernetes_version}\n\n"
        f"replace (\n{replaces})\n"
    )


def version_ldflags(kubernetes_version: str) -> str:
    """Linker flags that stamp the version, as kubernetes' own build does, and strip symbols."""
    minor, _ = _minor_patch(kubernetes_version)
    stamps = {"gitVersion": kubernetes_version, "gitMajor": "1", "gitMinor": str(minor)}
    stamps["gitTreeState"] = "clean"
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {package}.{name}={value}" for name, value in stamps.items()]
    return " ".join(flags)
