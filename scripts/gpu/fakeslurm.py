#!/usr/bin/env python3
"""A stand-in for the Slurm commands the launchers call, for a machine with no Slurm (the lent H200).

Installed as sbatch, squeue, scontrol, sacct, sinfo and scancel (symbolic links to this file, first on PATH);
what it answers is what the launchers parse (atomdyn_launchers/slurm/client.py), nothing more. State lives
in $FAKESLURM_DIR (one JSON file per job).

A job is started as Slurm's batch step starts it: ``bash SCRIPT`` as the leader of its own process group and
session (so the script's sweep of its process group applies), in --chdir (else the submit directory), stdout
and stderr to --output (truncated, as Slurm's default open mode), with the submitter's environment
(sbatch's default --export=ALL) plus the SLURM_* variables of a one-node, one-task job on the node named by
--nodelist. Not done: no resource accounting or queueing (every job runs at once), no cgroup (what a job
leaves running outside its process group survives it; what stays in its group is killed when the script
ends, as Slurm's step cleanup would), no GRES (--gres=gpu:N sets CUDA_VISIBLE_DEVICES to the first N GPUs),
no accounting (scontrol answers, AccountingStorageType=accounting_storage/none), no time limit.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

STATE = Path(os.environ.get("FAKESLURM_DIR", "/tmp/fakeslurm"))
PARTITION = os.environ.get("FAKESLURM_PARTITION", "h200")
NODES = os.environ.get("FAKESLURM_NODES", "h200-0,h200-1").split(",")
KILL_WAIT_S = 30.0


def _job_path(job_id: int) -> Path:
    return STATE / "jobs" / f"{job_id}.json"


def _load(job_id: int) -> dict | None:
    try:
        return json.loads(_job_path(job_id).read_text())
    except (OSError, ValueError):
        return None


def _save(job: dict) -> None:
    path = _job_path(job["id"])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(job))
    os.replace(tmp, path)


def _update(job_id: int, **fields: object) -> None:
    with open(STATE / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        job = _load(job_id) or {"id": job_id}
        job.update(fields)
        _save(job)


def _next_id() -> int:
    (STATE / "jobs").mkdir(parents=True, exist_ok=True)
    with open(STATE / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        counter = STATE / "next_id"
        job_id = int(counter.read_text()) if counter.exists() else 1000
        counter.write_text(str(job_id + 1))
    return job_id


def _sbatch_directives(script: Path) -> list[str]:
    out = []
    for line in script.read_text().splitlines()[1:]:
        if line.startswith("#SBATCH "):
            out.append(line.split(None, 1)[1].strip())
        elif line.strip() and not line.startswith("#"):
            break
    return out


def _options(args: list[str]) -> dict[str, str]:
    opts: dict[str, str] = {}
    for arg in args:
        if arg.startswith("--"):
            key, _, value = arg[2:].partition("=")
            opts[key] = value
    return opts


def sbatch(argv: list[str]) -> int:
    script = Path(argv[-1])
    opts = _options(_sbatch_directives(script))
    opts.update(_options(argv[:-1]))  # the command line wins over #SBATCH lines
    job_id = _next_id()
    node = opts.get("nodelist") or NODES[0]
    job = {
        "id": job_id, "name": opts.get("job-name", script.name), "state": "PENDING", "reason": "None",
        "node": node, "script": str(script.resolve()), "output": opts.get("output", f"slurm-{job_id}.out"),
        "chdir": opts.get("chdir", os.getcwd()), "gres": opts.get("gres", ""), "account": opts.get("account", ""),
        "partition": opts.get("partition", PARTITION), "submitted": time.time(),
    }  # fmt: skip
    _save(job)
    env = dict(os.environ)
    (STATE / "env").mkdir(parents=True, exist_ok=True)
    (STATE / "env" / f"{job_id}.json").write_text(json.dumps(env))
    # The supervisor (slurmstepd's part) outlives this command, in a session of its own.
    subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "_supervise", str(job_id)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True,
    )  # fmt: skip
    print(job_id if "parsable" in opts else f"Submitted batch job {job_id}")
    return 0


def _supervise(job_id: int) -> int:
    job = _load(job_id)
    assert job is not None
    env = json.loads((STATE / "env" / f"{job_id}.json").read_text())
    nodes = job["node"]
    env.update({
        "SLURM_JOB_ID": str(job_id), "SLURM_JOBID": str(job_id), "SLURM_JOB_NAME": job["name"],
        "SLURMD_NODENAME": nodes, "SLURM_JOB_NODELIST": nodes, "SLURM_NODELIST": nodes, "SLURM_NNODES": "1",
        "SLURM_JOB_NUM_NODES": "1", "SLURM_NTASKS": "1", "SLURM_NPROCS": "1", "SLURM_SUBMIT_DIR": job["chdir"],
        "SLURM_SUBMIT_HOST": os.uname().nodename, "SLURM_JOB_PARTITION": job["partition"],
        "SLURM_JOB_ACCOUNT": job["account"], "SLURM_CLUSTER_NAME": "fakeslurm", "SLURM_CPUS_ON_NODE": str(os.cpu_count()),
        "ENVIRONMENT": "BATCH", "SLURM_JOB_USER": env.get("USER", "root"), "SLURM_TASK_PID": str(os.getpid()),
    })  # fmt: skip
    gres = job.get("gres") or ""
    if gres.startswith("gpu:"):
        count = int(gres.rsplit(":", 1)[-1])
        env["CUDA_VISIBLE_DEVICES"] = env["SLURM_JOB_GPUS"] = ",".join(str(i) for i in range(count))
    output = Path(job["output"].replace("%j", str(job_id)))
    output.parent.mkdir(parents=True, exist_ok=True)
    with open(output, "wb") as out:
        proc = subprocess.Popen(
            ["bash", job["script"]], cwd=job["chdir"], env=env, stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    _update(job_id, state="RUNNING", pid=proc.pid, started=time.time())
    status = proc.wait()
    # The step's end: whatever stayed in the job's process group goes with it.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    job = _load(job_id) or {}
    if status < 0:
        exit_code = f"0:{-status}"
        state = "CANCELLED" if job.get("cancelled") else "FAILED"
    else:
        exit_code = f"{status}:0"
        state = "CANCELLED" if job.get("cancelled") else ("COMPLETED" if status == 0 else "FAILED")
    _update(job_id, state=state, exit_code=exit_code, ended=time.time())
    return 0


def _jobs(filter_ids: str | None) -> list[dict]:
    ids = None if not filter_ids else {int(x) for x in filter_ids.split(",") if x.strip().isdigit()}
    found = []
    for path in sorted((STATE / "jobs").glob("*.json")):
        job = json.loads(path.read_text())
        if ids is None or job["id"] in ids:
            found.append(job)
    return found


def _format(fmt: str, job: dict) -> str:
    values = {"i": str(job["id"]), "j": job["name"], "T": job["state"], "r": job.get("reason", "None"),
              "N": job["node"] if job["state"] != "PENDING" else "", "P": job["partition"]}  # fmt: skip
    out, i = "", 0
    while i < len(fmt):
        if fmt[i] == "%" and i + 1 < len(fmt):
            out += values.get(fmt[i + 1], "")
            i += 2
        else:
            out += fmt[i]
            i += 1
    return out


def squeue(argv: list[str]) -> int:
    fmt, ids, i = "%i %T", None, 0
    while i < len(argv):
        arg = argv[i]
        if arg == "-o":
            fmt, i = argv[i + 1], i + 1
        elif arg.startswith("--jobs="):
            ids = arg.split("=", 1)[1]
        elif arg == "-s":
            return 0  # no job steps: batch jobs only
        i += 1
    for job in _jobs(ids):
        if job["state"] in ("PENDING", "RUNNING"):
            print(_format(fmt, job))
    return 0


def scontrol(argv: list[str]) -> int:
    words = [a for a in argv if not a.startswith("-")]
    if words[:2] == ["show", "config"]:
        print("AccountingStorageType   = accounting_storage/none")
        print("ClusterName             = fakeslurm")
        print("MinJobAge               = 300 sec")
        return 0
    if words[:2] == ["show", "hostnames"]:
        for name in words[2].split(","):
            print(name)
        return 0
    if words[:2] == ["show", "job"]:
        job = _load(int(words[2])) if len(words) > 2 and words[2].isdigit() else None
        if job is None:
            print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
            return 1
        code = job.get("exit_code", "0:0")
        nodes = job["node"] if job["state"] != "PENDING" else "(null)"
        print(
            f"JobId={job['id']} JobName={job['name']} JobState={job['state']} Reason={job.get('reason', 'None')} "
            f"Partition={job['partition']} NodeList={nodes} BatchHost={nodes} ExitCode={code} DerivedExitCode={code}"
        )
        return 0
    print(f"fakeslurm: scontrol {' '.join(argv)} is not implemented", file=sys.stderr)
    return 1


def sinfo(argv: list[str]) -> int:
    if "-N" in argv:
        for node in NODES:
            print(f"{node} idle")
    else:
        print(f"{PARTITION}*")
    return 0


def scancel(argv: list[str]) -> int:
    batch = "--batch" in argv
    sig = next((a.split("=", 1)[1] for a in argv if a.startswith("--signal=")), None)
    for arg in argv:
        if not arg.isdigit():
            continue
        job = _load(int(arg))
        if job is None or job["state"] not in ("PENDING", "RUNNING") or "pid" not in job:
            continue
        signum = getattr(signal, "SIG" + sig.upper().removeprefix("SIG")) if sig else signal.SIGTERM
        try:
            if batch:  # the batch shell alone
                os.kill(job["pid"], signum)
            elif sig:  # every process of the job
                os.killpg(job["pid"], signum)
            else:  # cancel: SIGTERM to every process, SIGKILL after KillWait
                _update(job["id"], cancelled=True)
                os.killpg(job["pid"], signal.SIGTERM)
                subprocess.Popen(
                    ["bash", "-c", f"sleep {KILL_WAIT_S:.0f}; kill -KILL -- -{job['pid']} 2>/dev/null"],
                    start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
        except ProcessLookupError:
            pass
    return 0


def sacct(argv: list[str]) -> int:
    print("sacct: Slurm accounting storage is disabled", file=sys.stderr)
    return 1


COMMANDS = {"sbatch": sbatch, "squeue": squeue, "scontrol": scontrol, "sinfo": sinfo, "scancel": scancel,
            "sacct": sacct}  # fmt: skip


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "_supervise":
        return _supervise(int(sys.argv[2]))
    name = Path(sys.argv[0]).name
    if name not in COMMANDS:
        print(f"fakeslurm: called as {name}; link it as one of {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    (STATE / "jobs").mkdir(parents=True, exist_ok=True)
    return COMMANDS[name](sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
