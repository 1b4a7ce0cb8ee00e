"""The launcher's side of etcd during a run: its presence key under a lease, and a watch on the roles' keys
feeding a queue of events."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import socket
import threading
import time
from dataclasses import dataclass

from atomdyn_launchers.contract.leases import ETCD_LOST_S, LEASE_TTL_S, REFRESH_S, EtcdSilence
from atomdyn_launchers.contract.readiness import ReadinessError, Registration
from atomdyn_launchers.etcd.client import EtcdClient, Watch


class Presence:
    """The launcher's key under a lease kept alive by a thread. If the launcher dies hard, the lease expires,
    the key vanishes and each role's helper stops its job: nothing outlives the launcher by more than its TTL
    plus a few seconds (~15 s at the default). ``lost_after_s`` is the engine's etcd grace, as its helpers'."""

    def __init__(
        self, client: EtcdClient, key: str, ttl_s: int = LEASE_TTL_S, lost_after_s: float = ETCD_LOST_S
    ) -> None:
        if lost_after_s >= ttl_s:
            raise ValueError(f"the lease TTL ({ttl_s} s) must outlive the etcd grace ({lost_after_s:g} s)")
        self.client = client
        self.key = key
        self.ttl_s = ttl_s
        self._stop = threading.Event()
        self._lease: int | None = None
        self._thread = threading.Thread(target=self._run, name="etcd-presence", daemon=True)
        self._silence = EtcdSilence(lost_after_s)

    def start(self) -> None:
        self._lease = self.client.grant(self.ttl_s)
        value = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        self.client.put(self.key, json.dumps(value), self._lease)
        self._silence.answered()
        self._thread.start()

    def _run(self) -> None:
        assert self._lease is not None
        while not self._stop.wait(min(REFRESH_S, self.ttl_s / 3)):
            try:
                remaining = self.client.keepalive(self._lease)
            except ReadinessError as exc:  # a slow or failed answer: the next refresh retries; lost() judges
                self._silence.failed(str(exc))
                continue
            if remaining <= 0:
                self._silence.failed("the launcher's lease expired on the server")
                continue
            self._silence.answered()

    @property
    def silent_s(self) -> float:
        """Seconds since the lease was last refreshed."""
        return self._silence.silent_s

    def lost(self) -> str | None:
        """Why etcd counts as lost (see :class:`EtcdSilence`), or None."""
        if self._lease is None or self._stop.is_set():
            return None
        why = self._silence.lost(self.client.endpoint.url)
        return None if why is None else f"{why}: the run's registrations cannot be kept"

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self._lease is not None:
            with contextlib.suppress(ReadinessError):
                self.client.revoke(self._lease)
            self._lease = None


@dataclass(frozen=True)
class RoleEvent:
    kind: str  # "registered" | "deregistered" | "watch-error"
    role: str
    registration: Registration | None = None
    detail: str = ""


class RoleWatcher:
    """Follows ``<prefix><role>`` keys in a background thread and posts RoleEvents to ``events``."""

    def __init__(self, client: EtcdClient, prefix: str, events: queue.Queue[RoleEvent]) -> None:
        self.client = client
        self.prefix = prefix
        self.events = events
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="etcd-watch", daemon=True)
        self._watch: Watch | None = None

    def start(self) -> None:
        current, revision = self.client.get_prefix(self.prefix)
        for key, value in current.items():
            self._post("PUT", key, value)
        self._watch = self.client.watch(self.prefix, revision + 1)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        # Closed also when the watch broke and its thread ended: its socket is still open then.
        if self._watch is not None:
            self._watch.close()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _post(self, kind: str, key: str, value: str) -> None:
        role = key[len(self.prefix) :]
        if kind == "PUT":
            try:
                self.events.put(RoleEvent("registered", role, Registration.from_json(value)))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                self.events.put(RoleEvent("watch-error", role, detail=f"bad registration {value!r}: {exc}"))
        else:
            self.events.put(RoleEvent("deregistered", role))

    def _run(self) -> None:
        try:
            assert self._watch is not None  # set by start() before the thread runs
            for kind, key, value in self._watch:
                self._post(kind, key, value)
        except ReadinessError as exc:
            if not self._stop.is_set():
                self.events.put(RoleEvent("watch-error", "", detail=str(exc)))
