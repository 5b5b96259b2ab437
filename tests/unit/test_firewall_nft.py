"""The rendered ruleset loads in nftables' own checker with the controller drop-in the role writes
(an address inside the management subnet, or outside it), wherever `nft -c` can run."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sparkctl.model import load_inventory
from sparkctl.render import common, host

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "example"


def _nft_check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nft", "-c", "-f", str(path)], capture_output=True, text=True, timeout=30)


@pytest.fixture(scope="module")
def nft_works(tmp_path_factory: pytest.TempPathFactory) -> None:
    if shutil.which("nft") is None:
        pytest.skip("nft is not installed")
    probe = tmp_path_factory.mktemp("nft") / "probe.nft"
    probe.write_text("table inet sparkctl_probe {\n}\n")
    if _nft_check(probe).returncode != 0:
        pytest.skip("nft -c cannot run here (needs CAP_NET_ADMIN)")


@pytest.mark.parametrize("controller", ["192.168.7.1", "203.0.113.9"])
def test_the_ruleset_and_the_controller_dropin_pass_nft(
    nft_works: Any, tmp_path: Path, controller: str
) -> None:
    cluster = load_inventory(EXAMPLE)
    dropins = tmp_path / "firewall.d"
    dropins.mkdir()
    (dropins / "controller.nft").write_text(
        f"add element inet sparkctl admin_sources {{ {controller} }}\n"
    )
    ruleset = host.firewall(cluster, cluster.head).replace(common.FIREWALL_DROPIN_DIR, str(dropins))
    path = tmp_path / "firewall.nft"
    path.write_text(ruleset)
    proc = _nft_check(path)
    assert proc.returncode == 0, proc.stderr
