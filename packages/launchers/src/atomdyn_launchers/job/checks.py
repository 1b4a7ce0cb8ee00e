"""One row of a node check (``nodes.check``'s node side): a name, a status and a detail, as every check on the
node and every image store (:mod:`atomdyn_launchers.job.stores`) answers it."""

from __future__ import annotations

from dataclasses import dataclass

PASS, FAIL, NOT_NEEDED, UNKNOWN = "pass", "fail", "not needed", "unknown"


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail}
