"""``ucx_info -v -c -p -e -u t -P inter`` through the UCX libraries a NIXL wheel bundles, which ship no
``ucx_info``: ``python -m nixl_compat.ucpinfo``. The same calls as ``ucx_info`` at the pinned UCX
(``src/tools/info/proto_info.c``: ``print_ucp_info``, ``print_ucp_ep_info``; ``version_info.c``), so what
is printed is UCX's own text: ``ucp_config_print`` (``-c``), ``ucp_context_print_info`` (``-p``), and
``ucp_ep_print_info`` of an endpoint made from a second worker's network-only address (``-e -P inter``),
after a flush. UCX reads the worker's UCX variables from the environment, as in the worker. Standard library
only.

Where the library comes from: ``--libucp PATH``, else the ``libucp`` of the installed NIXL wheel (its
``nixl*.libs`` directory), else the exit status is 2 with the reason.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import sys
from pathlib import Path

WHEELS = ("nixl_cu13", "nixl_cu12", "nixl")
# ucp.h at the pin: UCP_PARAM_FIELD_FEATURES, UCP_FEATURE_TAG, UCP_WORKER_ATTR_FIELD_ADDRESS(_FLAGS),
# UCP_WORKER_ADDRESS_FLAG_NET_ONLY, UCP_EP_PARAM_FIELD_REMOTE_ADDRESS; ucs/config/types.h:
# UCS_CONFIG_PRINT_CONFIG.
PARAM_FIELD_FEATURES = 1 << 0
FEATURE_TAG = 1 << 0
WORKER_ATTR_FIELD_ADDRESS = 1 << 1
WORKER_ATTR_FIELD_ADDRESS_FLAGS = 1 << 2
WORKER_ADDRESS_FLAG_NET_ONLY = 1 << 0
EP_PARAM_FIELD_REMOTE_ADDRESS = 1 << 0
CONFIG_PRINT_CONFIG = 1 << 0
INPROGRESS = 1  # UCS_INPROGRESS
ERR_LAST = -100  # UCS_ERR_LAST: a status pointer at or above it (as unsigned) is an error


class _WorkerAttr(ctypes.Structure):
    # ucp_worker_attr_t up to address_length (the rest is zeroed padding below).
    _fields_ = [
        ("field_mask", ctypes.c_uint64),
        ("thread_mode", ctypes.c_int),
        ("address_flags", ctypes.c_uint32),
        ("address", ctypes.c_void_p),
        ("address_length", ctypes.c_size_t),
        ("_rest", ctypes.c_byte * 512),
    ]


class _EpParams(ctypes.Structure):
    # ucp_ep_params_t: field_mask, then the remote worker address; the rest zeroed.
    _fields_ = [
        ("field_mask", ctypes.c_uint64),
        ("address", ctypes.c_void_p),
        ("_rest", ctypes.c_byte * 1024),
    ]


class _Params(ctypes.Structure):
    # ucp_params_t: field_mask, features; the rest zeroed.
    _fields_ = [
        ("field_mask", ctypes.c_uint64),
        ("features", ctypes.c_uint64),
        ("_rest", ctypes.c_byte * 1024),
    ]


def wheel_libucp() -> Path | None:
    """The libucp a NIXL wheel installed beside this Python bundles (auditwheel's ``<wheel>.libs``)."""
    for name in WHEELS:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        site = Path(next(iter(spec.submodule_search_locations))).parent
        for found in sorted((site / f"{name}.libs").glob("libucp*.so*")):
            return found
    return None


class _Ucp:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.lib = ctypes.CDLL(str(path))
        libc = ctypes.CDLL(None)
        self.fflush = libc.fflush
        self.stdout = ctypes.c_void_p.in_dll(libc, "stdout")
        lib = self.lib
        lib.ucp_get_version_string.restype = ctypes.c_char_p
        for name in ("ucp_request_check_status", "ucp_worker_progress", "ucp_init_version"):
            getattr(lib, name).restype = ctypes.c_int
        lib.ucp_ep_flush_nbx.restype = ctypes.c_void_p
        lib.ucp_ep_flush_nbx.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.ucp_request_check_status.argtypes = [ctypes.c_void_p]
        lib.ucp_worker_progress.argtypes = [ctypes.c_void_p]

    def out(self, text: str) -> None:
        """Python's text in order with UCX's own (both through C's stdout)."""
        self.flush()
        sys.stdout.write(text)
        sys.stdout.flush()

    def flush(self) -> None:
        sys.stdout.flush()
        self.fflush(self.stdout)


def run(ucp: _Ucp, *, config_print: bool = True) -> int:
    """ucx_info's order: version, configuration, context, endpoint. 0 when every step was made."""
    lib, stdout = ucp.lib, ucp.stdout
    ucp.out(f"# Library version: {lib.ucp_get_version_string().decode()}\n# Library path: {ucp.path}\n")
    config = ctypes.c_void_p()
    if lib.ucp_config_read(None, None, ctypes.byref(config)) != 0:
        ucp.out("<Failed to read UCP configuration>\n")
        return 1
    if config_print:
        lib.ucp_config_print(config, stdout, None, CONFIG_PRINT_CONFIG)
    major, minor, release = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
    lib.ucp_get_version(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(release))
    params = _Params(field_mask=PARAM_FIELD_FEATURES, features=FEATURE_TAG)
    context = ctypes.c_void_p()
    if lib.ucp_init_version(major, minor, ctypes.byref(params), config, ctypes.byref(context)) != 0:
        ucp.out("<Failed to create UCP context>\n")
        return 1
    lib.ucp_context_print_info(context, stdout)
    ucp.flush()
    worker, peer = ctypes.c_void_p(), ctypes.c_void_p()
    wparams = (ctypes.c_byte * 1024)()  # ucp_worker_params_t with an empty field mask
    if lib.ucp_worker_create(context, wparams, ctypes.byref(worker)) != 0:
        ucp.out("<Failed to create UCP worker>\n")
        return 1
    if lib.ucp_worker_create(context, wparams, ctypes.byref(peer)) != 0:
        ucp.out("<Failed to create peer UCP worker>\n")
        return 1
    attr = _WorkerAttr(
        field_mask=WORKER_ATTR_FIELD_ADDRESS | WORKER_ATTR_FIELD_ADDRESS_FLAGS,
        address_flags=WORKER_ADDRESS_FLAG_NET_ONLY,  # -P inter: the peer as another node sees it
    )
    if lib.ucp_worker_query(peer, ctypes.byref(attr)) != 0:
        ucp.out("<Failed to get UCP worker address>\n")
        return 1
    ep = ctypes.c_void_p()
    ep_params = _EpParams(field_mask=EP_PARAM_FIELD_REMOTE_ADDRESS, address=attr.address)
    if lib.ucp_ep_create(worker, ctypes.byref(ep_params), ctypes.byref(ep)) != 0:
        ucp.out("<Failed to create UCP endpoint>\n")
        return 1
    request_param = (ctypes.c_byte * 256)()  # ucp_request_param_t with an empty op_attr_mask
    request = lib.ucp_ep_flush_nbx(ep, request_param)
    if request is not None and request >= (1 << 64) + ERR_LAST:
        ucp.out("<Failed to flush UCP endpoint>\n")
        return 1
    while request is not None:
        status = lib.ucp_request_check_status(request)
        if status != INPROGRESS:
            lib.ucp_request_free(ctypes.c_void_p(request))
            if status != 0:
                ucp.out("<Failed to flush UCP endpoint>\n")
                return 1
            break
        lib.ucp_worker_progress(worker)
        lib.ucp_worker_progress(peer)
    lib.ucp_ep_print_info(ep, stdout)
    ucp.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nixl_compat.ucpinfo",
        description="ucx_info -v -c -p -e -u t -P inter through a bundled libucp (UCX's own print functions)",
    )
    parser.add_argument("--libucp", type=Path, help="the libucp to load (default: the NIXL wheel's)")
    parser.add_argument("--no-config", action="store_true", help="leave out UCX's configuration (-c)")
    args = parser.parse_args(argv)
    path = args.libucp or wheel_libucp()
    if path is None:
        print(f"no libucp: none of {', '.join(WHEELS)} is installed with its .libs", file=sys.stderr)
        return 2
    try:
        ucp = _Ucp(path)
    except (OSError, AttributeError) as exc:
        print(f"cannot load {path}: {exc}", file=sys.stderr)
        return 2
    return run(ucp, config_print=not args.no_config)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    # Leave without UCX's teardown (the endpoints and workers are the process's; ucx_info closes them, the
    # exit does the same here without a flush that could wait on a peer that is this process).
    import os

    os._exit(code)
