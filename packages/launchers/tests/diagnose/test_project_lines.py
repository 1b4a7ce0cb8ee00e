"""The project's own lines, as its code prints them, are diagnosed as their entries: the RDMA check's problems
(job/rdma.py, on the ibv_devinfo texts of tests/fixtures) and etcd's silence (contract/leases.py). The job
script's and the launcher's lines are shown on the local cluster (tests/run/test_faults_quick.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from atomdyn_launchers.contract.leases import EtcdSilence
from atomdyn_launchers.diagnose.scan import diagnose_log
from atomdyn_launchers.job.rdma import check_devices, parse_devinfo

DEVINFO = Path(__file__).resolve().parents[1] / "fixtures" / "ibv_devinfo"


def _first(tmp_path: Path, lines: list[str]) -> str | None:
    log = tmp_path / "rdma.log"
    log.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    found = diagnose_log(log)
    return found.first.entry.id if found.first else None


@pytest.mark.parametrize(
    "devinfo,kwargs,entry",
    [
        ("none.txt", {}, "rdma-no-device-visible"),
        ("ionic.txt", {"net_devices": ["mlx5_9:1"]}, "rdma-net-device-not-visible"),
        ("ionic.txt", {"net_devices": ["ionic_0:1"], "gid_index": "7"}, "rdma-gid-index-wrong"),
        ("ionic.txt", {"net_devices": ["ionic_0:1"], "gid_index": "0"}, "rdma-gid-index-not-rocev2"),
        ("ionic.txt", {"need_srq": True}, "rdma-no-srq"),
    ],
)
def test_the_rdma_checks_problems_are_diagnosed(
    tmp_path: Path, devinfo: str, kwargs: dict[str, object], entry: str
) -> None:
    problems = check_devices(parse_devinfo((DEVINFO / devinfo).read_text()), **kwargs)  # type: ignore[arg-type]
    assert problems, (devinfo, kwargs)
    assert _first(tmp_path, problems) == entry, problems


def test_etcds_silence_is_diagnosed(tmp_path: Path) -> None:
    silence = EtcdSilence(lost_after_s=0.0)
    silence.failed("timed out")
    why = silence.lost("http://10.0.0.1:2379")
    assert why is not None
    assert _first(tmp_path, [f"register: etcd lost: {why}"]) == "etcd-not-answering"
