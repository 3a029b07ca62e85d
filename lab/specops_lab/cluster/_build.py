"""Build (once per version) and locate the control plane's executables.

kube-apiserver, kube-controller-manager and kube-scheduler are compiled from the Go
modules of ``k8s.io/kubernetes`` through a generated wrapper module; kwok is
``go install``-ed; etcd comes from the system (Debian ``etcd-server``). Each build
writes a stamp only when it has finished and checked itself, so an interrupted build
is redone rather than trusted. With the stamps present nothing runs but a few stats.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from specops.errors import ClusterError
from specops_lab.cluster._config import Binaries
from specops_lab.cluster._gomod import (
    go_directives,
    staging_modules,
    staging_version,
    version_ldflags,
    wrapper_gomod,
)
from specops_lab.cluster._layout import KUBE_BINARIES, CacheLayout, Versions

__all__ = [
    "KWOK_STAGES",
    "Progress",
    "ensure_binaries",
    "find_etcd",
    "find_go",
    "kwok_stage_files",
]

Progress = Callable[[str], None]

# kwok's default stages (its kustomize/stage tree): nodes become Ready and keep their
# lease fresh, pods become Ready, finish, and go away when deleted.
KWOK_STAGES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)

_GO_HINT = (
    "install Go 1.22 or newer (https://go.dev/dl/, e.g. into /usr/local/go) and put its bin"
    " directory on PATH, or set SPECOPS_GO to the go executable; newer toolchains that"
    " kubernetes asks for are fetched through the Go module proxy"
)
_ETCD_HINT = "install it with `apt-get install etcd-server`, or set SPECOPS_ETCD to an etcd binary"
_PROGRESS_EVERY_S = 60.0
_LOG_TAIL_LINES = 25


def _jobs(env: Mapping[str, str]) -> str:
    """Go build parallelism: low by default so the machine stays usable while building."""
    return env.get("SPECOPS_BUILD_JOBS", "2")


def _find(name: str, variable: str, fallback: Path, env: Mapping[str, str]) -> Path | None:
    for candidate in (env.get(variable), shutil.which(name, path=env.get("PATH", ""))):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return fallback if fallback.is_file() else None


def find_go(
    env: Mapping[str, str] = os.environ, fallback: Path = Path("/usr/local/go/bin/go")
) -> Path:
    """The go executable: ``$SPECOPS_GO``, else ``go`` on PATH, else the usual install place."""
    found = _find("go", "SPECOPS_GO", fallback, env)
    if found is None:
        raise ClusterError(f"the Go toolchain is missing (no `go` on PATH): {_GO_HINT}")
    return found


def find_etcd(env: Mapping[str, str] = os.environ, fallback: Path = Path("/usr/bin/etcd")) -> Path:
    """The etcd executable: ``$SPECOPS_ETCD``, else ``etcd`` on PATH, else Debian's place."""
    found = _find("etcd", "SPECOPS_ETCD", fallback, env)
    if found is None:
        raise ClusterError(f"etcd is missing: {_ETCD_HINT}")
    return found


def _go_env(go: Path, extra: Mapping[str, str] = {}) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{go.parent}{os.pathsep}{env.get('PATH', '')}"
    env["GOWORK"] = "off"
    env.update(extra)
    return env


def _tail(log: Path) -> str:
    lines = log.read_text(errors="replace").splitlines()
    return "\n".join(lines[-_LOG_TAIL_LINES:])


def _run_logged(
    argv: list[str], *, cwd: Path, env: Mapping[str, str], log: Path, what: str, progress: Progress
) -> None:
    """Run a build step with its output in ``log``, saying every minute that it is still going."""
    started = time.monotonic()
    with log.open("a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        try:
            proc = subprocess.Popen(
                argv, cwd=cwd, env=dict(env), stdout=out, stderr=subprocess.STDOUT
            )
        except OSError as exc:
            raise ClusterError(
                f"could not run {argv[0]} to build {what}: {exc}; {_GO_HINT}"
            ) from exc
        try:
            while True:
                try:
                    code = proc.wait(timeout=_PROGRESS_EVERY_S)
                    break
                except subprocess.TimeoutExpired:
                    minutes = (time.monotonic() - started) / 60
                    progress(f"  still building {what} ({minutes:.0f} min so far; log: {log})")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if code != 0:
        raise ClusterError(
            f"building {what} failed (exit {code}); the full log is {log}."
            f" Last lines:\n{_tail(log)}"
        )


def _go_json(go: Path, args: list[str], what: str) -> dict[str, str]:
    try:
        done = subprocess.run(
            [str(go), *args], env=_go_env(go), capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        raise ClusterError(
            f"could not download {what} through the Go module proxy: {detail.strip()}"
            " (check GOPROXY and network access to it)"
        ) from exc
    data = json.loads(done.stdout)
    assert isinstance(data, dict)
    return {k: v for k, v in data.items() if isinstance(v, str)}


def _stamped(stamp: Path, expected: Mapping[str, str], outputs: list[Path]) -> bool:
    if not stamp.is_file() or not all(p.is_file() for p in outputs):
        return False
    try:
        return bool(json.loads(stamp.read_text()) == dict(expected))
    except json.JSONDecodeError:
        return False


def _check_version(binary: Path, version: str) -> None:
    try:
        reported = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClusterError(f"the freshly built {binary} does not run: {exc}") from exc
    if version not in reported.split():
        raise ClusterError(
            f"{binary} reports version {reported.strip()!r}, expected {version};"
            " the version ldflags did not apply"
        )


def _once(
    root: Path, expected: Mapping[str, str], outputs: list[Path], build: Callable[[], None]
) -> None:
    """Run ``build`` unless its stamp says it is done; one builder at a time per directory."""
    if _stamped(root / "build.json", expected, outputs):
        return
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _stamped(root / "build.json", expected, outputs):
            build()
            (root / "build.json").write_text(json.dumps(dict(expected)))


def _build_kubernetes(root: Path, version: str, progress: Progress) -> None:
    bin_dir, src, log = root / "bin", root / "src", root / "build.log"
    go = find_go()
    bin_dir.mkdir(parents=True, exist_ok=True)
    src.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    progress(
        f"Building {', '.join(KUBE_BINARIES)} {version} from the Go modules of k8s.io/kubernetes"
        f" (once per version; about 6 min on 2 cores; log: {log})"
    )
    started = time.monotonic()
    info = _go_json(go, ["mod", "download", "-json", f"k8s.io/kubernetes@{version}"], "kubernetes")
    upstream = Path(info["GoMod"]).read_text()
    staging = staging_modules(upstream)
    (src / "go.mod").write_text(wrapper_gomod(version, staging, go_directives(upstream)))
    progress(
        f"  wrapper module {src} replaces {len(staging)} staging modules"
        f" with {staging_version(version)}"
    )
    argv = [str(go), "build", "-mod=mod", "-p", _jobs(os.environ), "-trimpath"]
    argv += ["-ldflags", version_ldflags(version), "-o", f"{bin_dir}/"]
    argv += [f"k8s.io/kubernetes/cmd/{b}" for b in KUBE_BINARIES]
    _run_logged(argv, cwd=src, env=_go_env(go), log=log, what="kubernetes", progress=progress)
    for binary in KUBE_BINARIES:
        _check_version(bin_dir / binary, version)
    progress(f"  built kubernetes {version} in {(time.monotonic() - started) / 60:.1f} min")


def _build_kwok(root: Path, version: str, progress: Progress) -> None:
    bin_dir, stages, log = root / "bin", root / "stages", root / "build.log"
    go = find_go()
    bin_dir.mkdir(parents=True, exist_ok=True)
    stages.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    progress(f"Building kwok {version} with go install (once per version; about 1-2 min)")
    started = time.monotonic()
    info = _go_json(go, ["mod", "download", "-json", f"sigs.k8s.io/kwok@{version}"], "kwok")
    for stage in KWOK_STAGES:
        shutil.copyfile(Path(info["Dir"]) / "kustomize" / "stage" / stage, stages / _flat(stage))
    argv = [str(go), "install", "-p", _jobs(os.environ), "-trimpath", "-ldflags", "-s -w"]
    argv.append(f"sigs.k8s.io/kwok/cmd/kwok@{version}")
    env = _go_env(go, {"GOBIN": str(bin_dir)})
    _run_logged(argv, cwd=root, env=env, log=log, what="kwok", progress=progress)
    progress(f"  built kwok {version} in {(time.monotonic() - started) / 60:.1f} min")


def _flat(stage: str) -> str:
    return stage.replace("/", "-")


def kwok_stage_files(layout: CacheLayout, version: str) -> tuple[Path, ...]:
    """Where the build keeps its copy of kwok's stage configs, in ``KWOK_STAGES`` order."""
    stages = layout.kwok(version) / "stages"
    return tuple(stages / _flat(stage) for stage in KWOK_STAGES)


def ensure_binaries(layout: CacheLayout, versions: Versions, progress: Progress) -> Binaries:
    """Every executable of the cluster, building what the cache lacks (Go only when it must)."""
    etcd = find_etcd()
    kube, kwok = layout.kubernetes(versions.kubernetes), layout.kwok(versions.kwok)
    kube_bins = [kube / "bin" / b for b in KUBE_BINARIES]
    kube_stamp = {
        "kubernetes": versions.kubernetes,
        "ldflags": version_ldflags(versions.kubernetes),
    }
    _once(
        kube, kube_stamp, kube_bins, lambda: _build_kubernetes(kube, versions.kubernetes, progress)
    )
    kwok_outputs = [kwok / "bin" / "kwok", *kwok_stage_files(layout, versions.kwok)]
    kwok_stamp = {"kwok": versions.kwok, "stages": ",".join(KWOK_STAGES)}
    _once(kwok, kwok_stamp, kwok_outputs, lambda: _build_kwok(kwok, versions.kwok, progress))
    apiserver, controller_manager, scheduler = kube_bins
    return Binaries(etcd, apiserver, controller_manager, scheduler, kwok_outputs[0])
