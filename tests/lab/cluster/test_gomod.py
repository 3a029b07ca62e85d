"""The wrapper go.mod is derived from kubernetes' own go.mod."""

from __future__ import annotations

import pytest
from specops_lab.cluster._gomod import (
    go_directives,
    staging_modules,
    staging_version,
    version_ldflags,
    wrapper_gomod,
)

from specops.errors import ClusterError

KUBERNETES_GOMOD = """\
module k8s.io/kubernetes

go 1.26.0

godebug default=go1.26

require (
\tgithub.com/spf13/cobra v1.10.0
\tk8s.io/api v0.0.0
\tk8s.io/klog/v2 v2.130.1
\tk8s.io/client-go v0.0.0 // indirect
\tk8s.io/utils v0.0.0-20251002143259-bc988d571ff4
)

require k8s.io/kms v0.0.0

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/sample-controller => ./staging/src/k8s.io/sample-controller
)
"""


def test_staging_modules_are_the_v000_placeholders_only() -> None:
    assert staging_modules(KUBERNETES_GOMOD) == ("k8s.io/api", "k8s.io/client-go", "k8s.io/kms")


def test_a_gomod_without_placeholders_is_refused() -> None:
    with pytest.raises(ClusterError, match=r"no k8s\.io module at v0\.0\.0"):
        staging_modules("module example.com/x\n\nrequire k8s.io/api v0.36.3\n")


def test_go_directives_keep_go_and_godebug() -> None:
    assert go_directives(KUBERNETES_GOMOD) == ("go 1.26.0", "godebug default=go1.26")


def test_staging_version_maps_v1_to_v0() -> None:
    assert staging_version("v1.36.3") == "v0.36.3"


@pytest.mark.parametrize("bad", ["1.36.3", "v1.36", "v2.0.0", "v1.36.3-rc.1"])
def test_malformed_kubernetes_version_is_refused(bad: str) -> None:
    with pytest.raises(ClusterError, match=r"v1\.<minor>\.<patch>"):
        staging_version(bad)


def test_wrapper_requires_kubernetes_and_replaces_every_placeholder() -> None:
    staging = staging_modules(KUBERNETES_GOMOD)
    text = wrapper_gomod("v1.36.3", staging, go_directives(KUBERNETES_GOMOD))
    lines = text.splitlines()
    assert "require k8s.io/kubernetes v1.36.3" in lines
    assert "go 1.26.0" in lines and "godebug default=go1.26" in lines
    replaced = [line.strip() for line in lines if "=>" in line]
    assert replaced == [f"{m} v0.0.0 => {m} v0.36.3" for m in staging]


def test_ldflags_stamp_version_major_minor_and_strip() -> None:
    flags = version_ldflags("v1.36.3")
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"-X {package}.gitVersion=v1.36.3" in flags
        assert f"-X {package}.gitMajor=1" in flags
        assert f"-X {package}.gitMinor=36" in flags
    assert flags.startswith("-s -w ")
