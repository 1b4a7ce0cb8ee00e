"""Run-owned etcd for clusters that run none (ETCD_ENDPOINTS unset).

The binary comes from the lock's ``etcd`` Debian package (Debian's maintained etcd-server build, pinned by the
.deb's size and sha256): fetched and verified by ``atomdyn_core.fetch`` (apt's cache, ``apt-get download``
or a mirror directory), then ``usr/bin/etcd`` is read out of the package, checked against the package's own
md5sums and placed under ``SHARED_DIR/bin`` (temporary name, then rename), so every node runs the same file.

A run starts it as a small job of its own on the prefill (or primary) node. The node-side helper
(``python -m atomdyn_launchers.job.owned_etcd serve``) starts etcd with a node-local data directory, waits
for ``/health``, and only then publishes ``etcd.json`` (endpoint, node, pid, version) atomically in the run
directory. The launcher waits for that file (with a deadline, failing at once if the job ends) before it
submits any role, so every role starts against a serving etcd. At the end of the run, success or failure, the
launcher sends the job SIGTERM; the helper stops etcd, removes its data directory and records ``stopped`` in
``etcd.json``; the launcher then checks that the endpoint no longer answers.

Inside an allocation (a run's ``--allocation``) the etcd is a job step of it on the same node instead (``srun
--jobid --nodelist NODE --nodes 1 --ntasks 1 --overlap bash scripts/etcd.sbatch``, named
``atomdyn-etcd@<run id>``), its output in the same ``logs/etcd.slurm.out``; it is stopped by SIGTERM to the
step's processes and, when it does not end, cancelled alone, never the allocation.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_bytes, atomic_write_text
from atomdyn_core.fetch import FetchError, deb_artifact, fetch_artifact
from atomdyn_core.lock import LockError, load_lock
from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.job import owned_etcd
from atomdyn_launchers.job.owned_etcd import OwnedEtcdError, etcd_healthy, read_record
from atomdyn_launchers.nodes import jobs
from atomdyn_launchers.slurm.client import JobInfo, Slurm, SlurmError
from atomdyn_launchers.slurm.steps import StepSet, step_name

ETCD_ROLE = "etcd"
ENDPOINT_FILE = "etcd.json"
START_TIMEOUT_S = 30.0
_POLL_S = 0.05


# --- the verified binary ------------------------------------------------------------------------------------

ETCD_MEMBER = "usr/bin/etcd"


def _ar_members(data: bytes, name: str) -> dict[str, bytes]:
    """The members of an ar archive (a .deb is one: debian-binary, control.tar.*, data.tar.*)."""
    if not data.startswith(b"!<arch>\n"):
        raise OwnedEtcdError(f"{name} is not a Debian package (no ar header)")
    members: dict[str, bytes] = {}
    offset = 8
    while offset + 60 <= len(data):
        header = data[offset : offset + 60]
        member = header[:16].decode("ascii", "replace").strip().rstrip("/")
        try:
            size = int(header[48:58].decode("ascii").strip())
        except ValueError:
            raise OwnedEtcdError(f"{name}: a corrupt ar header at byte {offset}") from None
        members[member] = data[offset + 60 : offset + 60 + size]
        offset += 60 + size + (size % 2)
    return members


def _tar_member(members: dict[str, bytes], prefix: str, name: str, member: str) -> bytes:
    """``member`` from the ``prefix``.tar.* of a .deb (xz or gzip, as Debian builds them)."""
    archive = next((key for key in members if key.startswith(prefix + ".tar")), None)
    if archive is None:
        raise OwnedEtcdError(f"{name} has no {prefix}.tar.*")
    try:
        with tarfile.open(fileobj=io.BytesIO(members[archive]), mode="r:*") as tar:
            extracted = tar.extractfile(f"./{member}")
            if extracted is None:
                raise KeyError(member)
            return extracted.read()
    except (tarfile.TarError, KeyError) as exc:
        raise OwnedEtcdError(f"{name}: cannot read {member} from {archive}: {exc}") from exc


def extract_etcd(deb: Path) -> bytes:
    """The etcd executable of a verified .deb, checked against the package's own md5sums list."""
    members = _ar_members(deb.read_bytes(), deb.name)
    binary = _tar_member(members, "data", deb.name, ETCD_MEMBER)
    sums = _tar_member(members, "control", deb.name, "md5sums").decode()
    listed = next((line.split()[0] for line in sums.splitlines() if line.endswith(" " + ETCD_MEMBER)), None)
    actual = hashlib.md5(binary, usedforsecurity=False).hexdigest()
    if listed != actual:
        raise OwnedEtcdError(f"{ETCD_MEMBER} in {deb.name}: md5 {actual} differs from its md5sums ({listed})")
    return binary


def etcd_binary(config: ClusterConfig, *, lock_path: Path | None = None, mirror: str | None = None) -> Path:
    """The lock's etcd executable under SHARED_DIR/bin, fetched, verified and extracted when missing."""
    if lock_path is None and not os.environ.get("ATOMDYN_LOCK"):
        lock_path = config.project_dir / "release-lock.json"
    try:
        lock = load_lock(lock_path)
    except (LockError, OSError) as exc:
        raise OwnedEtcdError(f"cannot read the release lock: {exc}") from exc
    entry = next((d for d in lock.debs.values() if ETCD_ROLE in d.roles), None)
    if entry is None:
        raise OwnedEtcdError("the release lock has no Debian package with role 'etcd' ($.debs, etcd-server)")
    if entry.sha256 is None:
        raise OwnedEtcdError(f"the lock's {entry.filename} has no recorded sha256: refusing to run it")
    target = config.shared_dir / "bin" / f"etcd-{entry.version}-{entry.sha256[:16]}" / "etcd"
    stamp = target.with_name("etcd.sha256")
    if target.is_file() and stamp.is_file() and _sha(target) == stamp.read_text().strip():
        return target
    try:
        fetched = fetch_artifact(deb_artifact(entry), config.shared_dir / "cache" / "debs", mirror=mirror)
    except FetchError as exc:
        raise OwnedEtcdError(f"cannot fetch {entry.filename}: {exc}") from exc
    data = extract_etcd(fetched.path)
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(target, data, mode=0o755)
    atomic_write_text(stamp, hashlib.sha256(data).hexdigest() + "\n")
    return target


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- submit side --------------------------------------------------------------------------------------------


@dataclass
class OwnedEtcd:
    """A running run-owned etcd: its job, its endpoint, and the run directory that records it."""

    config: ClusterConfig
    slurm: Slurm
    run_dir: Path
    node: str
    job_id: int  # inside an allocation: the allocation's (the etcd is its step, ``steps``)
    endpoint: str
    steps: StepSet | None = None

    @property
    def record_path(self) -> Path:
        return self.run_dir / ENDPOINT_FILE

    @property
    def label(self) -> str:
        """``job N``, or ``step A.S`` inside an allocation."""
        if self.steps is None:
            return f"job {self.job_id}"
        return f"step {self.steps.steps[ETCD_ROLE].step}"

    @classmethod
    def start(
        cls,
        config: ClusterConfig,
        run_dir: Path,
        node: str,
        *,
        slurm: Slurm | None = None,
        timeout_s: float = 120.0,
        lock_path: Path | None = None,
        allocation: int | None = None,
        run_id: str | None = None,
    ) -> OwnedEtcd:
        """Submit the etcd job and wait until it published a healthy endpoint. ``allocation``: start it as a
        step of that allocation instead, named after ``run_id`` (default: the run directory's name)."""
        slurm = slurm or Slurm(config)
        binary = etcd_binary(config, lock_path=lock_path)
        record = run_dir / ENDPOINT_FILE
        (run_dir / "scripts").mkdir(parents=True, exist_ok=True)
        (run_dir / "logs").mkdir(parents=True, exist_ok=True)
        args = [
            "serve",
            "--binary",
            str(binary),
            "--record",
            str(record),
            "--log",
            str(run_dir / "logs" / "etcd.log"),
        ]
        script = run_dir / "scripts" / "etcd.sbatch"
        atomic_write_text(script, jobs.script(config, owned_etcd.MODULE, args), mode=0o755)
        output = run_dir / "logs" / "etcd.slurm.out"
        steps: StepSet | None = None
        if allocation is not None:
            steps = StepSet.open(slurm, allocation)
            srun = step_args(slurm, allocation, node, run_dir, run_id or run_dir.name)
            name = step_name("atomdyn-etcd", run_id or run_dir.name)
            steps.start(ETCD_ROLE, srun, script, name=name, node=node, log=output)
            job_id = allocation
        else:
            job_id = slurm.submit(
                script, job_name="atomdyn-etcd", nodelist=node, output=output, chdir=run_dir
            )
        owned = cls(config, slurm, run_dir, node, job_id, "", steps)
        try:
            owned._await_endpoint(output, timeout_s)
        except BaseException:  # a timeout, an unhealthy endpoint, an interrupt: no etcd outlives the start
            with contextlib.suppress(SlurmError):
                owned._cancel()
            raise
        return owned

    def _await_endpoint(self, output: Path, timeout_s: float) -> None:
        record = self.record_path
        deadline = time.monotonic() + timeout_s
        last_state = "SUBMITTED"
        while True:
            published = read_record(record)
            if published is not None:
                break
            info = self._info()
            last_state = info.state
            if info.terminal:
                raise OwnedEtcdError(
                    f"the run-owned etcd {self.label} on {self.node} ended {info.state} before publishing "
                    f"{record.name}; last lines of {output}:\n{jobs.tail(output, 15)}"
                )
            if time.monotonic() >= deadline:
                raise OwnedEtcdError(
                    f"timed out after {timeout_s:.0f} s waiting for the run-owned etcd to publish {record} "
                    f"({self.label} on {self.node}: {last_state})"
                )
            time.sleep(_POLL_S)
        self.endpoint = str(published["endpoint"])
        if not etcd_healthy(self.endpoint, timeout=5.0):
            raise OwnedEtcdError(
                f"the run-owned etcd published {self.endpoint} but it does not answer /health here"
            )

    def _info(self) -> JobInfo:
        if self.steps is None:
            return self.slurm.job(self.job_id)
        self.steps.discover()
        return self.steps.steps[ETCD_ROLE].info()

    def _cancel(self) -> None:
        """Cancel the job, or the step alone (never its allocation), and wait for srun to exit."""
        if self.steps is None:
            self.slurm.cancel([self.job_id])
            return
        self.steps.cancel_live()

    def stop(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """SIGTERM the job (a step: its processes), wait until it ended and the endpoint stopped answering."""
        if self.steps is not None:
            info = self.steps.stop(ETCD_ROLE, timeout_s)
            if not info.terminal:
                raise OwnedEtcdError(f"the run-owned etcd's {self.label} had not ended after scancel")
        else:
            with contextlib.suppress(SlurmError):
                self.slurm.signal_batch([self.job_id])
            try:
                info = self.slurm.wait_terminal(self.job_id, timeout=timeout_s)
            except TimeoutError:
                self.slurm.cancel([self.job_id])
                info = self.slurm.wait_terminal(self.job_id, timeout=timeout_s)
        gone = not etcd_healthy(self.endpoint, timeout=1.0)
        record = read_record(self.record_path) or {}
        if not gone:
            raise OwnedEtcdError(f"the run-owned etcd at {self.endpoint} still answers after its job ended")
        return {"job_state": info.state, "endpoint_gone": gone, "stopped": record.get("stopped")}


def step_args(slurm: Slurm, allocation: int, node: str, run_dir: Path, run_id: str) -> list[str]:
    """The srun command line that starts the run-owned etcd's script (``bash`` then the script follows) as a
    step of ``allocation`` on ``node``, its output where the batch job's goes (``logs/etcd.slurm.out``)."""
    args = slurm.srun_args(
        allocation=allocation,
        nodelist=node,
        job_name=step_name("atomdyn-etcd", run_id),
        output=run_dir / "logs" / "etcd.slurm.out",
        chdir=run_dir,
    )
    return [*args, "bash"]


def owned_etcd_node(config: ClusterConfig, kind: str) -> str:
    """Where the run's etcd goes: the prefill node of a disaggregated run, else the primary node."""
    return config.prefill_node if kind == "disagg" else config.primary_node
