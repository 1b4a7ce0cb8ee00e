"""How long the run's etcd leases live and when etcd counts as lost: one rule for the in-job helpers and the
launcher alike."""

from __future__ import annotations

import time

LEASE_TTL_S = 10
# Leases are refreshed every REFRESH_S; etcd counts as lost once no refresh succeeded for ETCD_LOST_S (well
# inside the TTL, so it is noticed before the keys expire). With the client's 3 s call timeout a helper or
# launcher notices a stopped or hung etcd within ETCD_LOST_S + REFRESH_S + 3 s = 9 s.
REFRESH_S = 1.0
ETCD_LOST_S = 5.0


def call_timeout_for(etcd_lost_s: float, default_s: float) -> float:
    """An etcd call's timeout under ``etcd_lost_s`` of grace: the default, or longer for a longer grace (on a
    starved 2-core node etcd answered in 4-5 s for a while: calls that gave up at 2 s made it look lost)."""
    return default_s if etcd_lost_s <= ETCD_LOST_S else max(default_s, min(8.0, etcd_lost_s / 4))


def lease_ttl_for(etcd_lost_s: float) -> int:
    """A lease TTL that outlives ``etcd_lost_s`` of etcd silence: keys must not expire before the loss is named."""
    return LEASE_TTL_S if etcd_lost_s <= ETCD_LOST_S else int(etcd_lost_s) + LEASE_TTL_S


class EtcdSilence:
    """The one rule for "etcd is lost", kept by the role helpers and the launcher alike: no call succeeded for
    ``lost_after_s`` and the latest one failed (timed out, refused, or found the lease gone). A call that merely
    had no turn yet (a starved machine) is no loss."""

    def __init__(self, lost_after_s: float = ETCD_LOST_S) -> None:
        self.lost_after_s = lost_after_s
        self._last_ok = time.monotonic()
        self._last_error = ""  # the latest failure since the last success; "" when none failed

    def answered(self) -> None:
        self._last_ok = time.monotonic()
        self._last_error = ""

    def failed(self, why: str) -> None:
        self._last_error = why

    @property
    def silent_s(self) -> float:
        """Seconds since the last successful call."""
        return time.monotonic() - self._last_ok

    def lost(self, url: str) -> str | None:
        """Why etcd counts as lost, naming ``url``, the silence and the last failure; None while it does not."""
        silent = self.silent_s
        if silent < self.lost_after_s or not self._last_error:
            return None
        return f"etcd at {url} has not answered for {silent:.0f} s ({self._last_error})"
