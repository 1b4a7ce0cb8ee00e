"""``doctor/<role>.json``: nixl-compat doctor's report from inside each worker's container."""

from __future__ import annotations

from atomdyn_launchers.evidence.jsonfile import read_json
from atomdyn_launchers.evidence.readers.base import Reader, Signals, worker_roles


def read_doctor(signals: Signals) -> None:
    """``doctor/<role>.json``: nixl-compat doctor's report from inside each worker's container: the NIXL
    backend the worker's ``rixl`` resolved to and whether that backend moved and verified bytes."""
    workers = sorted(worker_roles(signals))
    signals.set("run.worker_roles", workers)
    backends: dict[str, str | None] = {}
    selftest: dict[str, bool] = {}
    for role in workers:
        path = signals.run_dir / "doctor" / f"{role}.json"
        try:
            report = read_json(path, expect=None)
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            signals.problems.append(f"doctor/{role}.json: unreadable: {exc}")
            continue
        if not isinstance(report, dict):
            signals.problems.append(f"doctor/{role}.json: not a JSON object")
            continue
        backend = report.get("backend")
        module = backend.get("module") if isinstance(backend, dict) else None
        backends[role] = module if isinstance(module, str) else None
        test = report.get("selftest")
        selftest[role] = isinstance(test, dict) and test.get("ok") is True
        signals.excerpt(
            "doctor",
            f"doctor/{role}.json: backend={backends[role]} "
            f"version={backend.get('version') if isinstance(backend, dict) else None} "
            f"selftest_ok={selftest[role]}",
        )
    signals.set("doctor.backends", backends)
    signals.set("doctor.selftest_ok", selftest)
    signals.set("doctor.missing_roles", len([r for r in workers if r not in backends]))
    if selftest:
        signals.set("doctor.failed_selftests", len([r for r in workers if not selftest.get(r, True)]))
    else:
        signals.absent("doctor.failed_selftests", "no worker kept a doctor report (doctor/<role>.json)")


READER = Reader(
    "doctor/<role>.json",
    frozenset({"run.worker_roles", "doctor.backends", "doctor.selftest_ok", "doctor.missing_roles",
               "doctor.failed_selftests"}),
    read_doctor,
)  # fmt: skip
