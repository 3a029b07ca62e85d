"""scripts/debian-packages installs what is missing without starting, stopping or killing
any service: run with stand-ins for apt-get, systemctl and pkill on a PATH of their own."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "debian-packages"
_TOOLS = ("bash", "env", "id", "printf", "tee", "chmod", "rm", "cat", "sh", "test", "[")


def _stand_in(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def _run(tmp_path: Path, policy: Path) -> tuple[str, str]:
    """Runs the script on a machine that lacks every package; returns (apt log, other log)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in _TOOLS:
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    apt_log, other_log = tmp_path / "apt.log", tmp_path / "other.log"
    _stand_in(
        bin_dir,
        "apt-get",
        f'echo "apt-get $* policy=$([ -x {policy} ] && {{ {policy}; echo $?; }} || echo none)"'
        f" >> {apt_log}",
    )
    for name in ("systemctl", "pkill", "service", "killall"):
        _stand_in(bin_dir, name, f'echo "{name} $*" >> {other_log}')
    env = {"PATH": str(bin_dir), "SPECOPS_POLICY_RC_D": str(policy), "HOME": str(tmp_path)}
    subprocess.run([str(bin_dir / "bash"), str(SCRIPT)], env=env, check=True, timeout=30)
    read = [p.read_text() if p.exists() else "" for p in (apt_log, other_log)]
    return read[0], read[1]


@pytest.mark.skipif(os.geteuid() != 0, reason="the script uses sudo when not root")
def test_packages_install_with_service_starts_refused_and_nothing_stopped(tmp_path: Path) -> None:
    policy = tmp_path / "policy-rc.d"
    apt, other = _run(tmp_path, policy)
    lines = apt.splitlines()
    assert lines[0] == "apt-get update -qq policy=101"
    install = lines[1].split()
    assert install[:5] == ["apt-get", "install", "-y", "-qq", "--no-install-recommends"]
    assert set(install[5:8]) == {"python3-venv", "prometheus", "etcd-server"}
    assert install[-1] == "policy=101"  # every start refused while apt ran
    assert not policy.exists()  # and the refusal gone afterwards
    assert other == ""  # no service stopped, no process killed


@pytest.mark.skipif(os.geteuid() != 0, reason="the script uses sudo when not root")
def test_a_policy_the_machine_had_is_left_as_it_was(tmp_path: Path) -> None:
    policy = tmp_path / "policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 0\n")
    policy.chmod(0o755)
    apt, other = _run(tmp_path, policy)
    assert apt.splitlines()[-1].endswith("policy=0")
    assert policy.read_text() == "#!/bin/sh\nexit 0\n"
    assert other == ""
