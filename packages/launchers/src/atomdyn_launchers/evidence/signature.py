"""An optional signature over collected evidence, made with OpenSSH's ``ssh-keygen -Y sign`` where the run ran.

``evidence.collect --sign KEY`` signs the evidence's ``summary.json`` (which lists the sha256 of every other
file of the evidence) with a key the cluster user holds, into ``summary.json.sig``; ``evidence.verify --signer
KEYS`` checks it against KEYS: an OpenSSH allowed-signers file (``principal key-type base64-key``, one a line)
or public keys (``key-type base64-key [comment]``, a ``.pub`` file), which are then allowed under any name.
What a signed and an unsigned bundle prove is in docs/run-directory.md.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from atomdyn_core.bounded import MIB, FileReadError, read_text

SIGNATURE = "summary.json.sig"
NAMESPACE = "atomdyn-evidence"  # ssh-keygen's signature namespace: a signature for anything else never counts
_TIMEOUT_S = 60
SIGNERS_MAX_BYTES = 1 * MIB  # a few keys a line each


class SignatureError(ValueError):
    """A key that cannot sign, or a signer file that cannot be read; the message names the file."""


def _ssh_keygen() -> str:
    found = shutil.which("ssh-keygen")
    if found is None:
        raise SignatureError("ssh-keygen is not installed (Debian: openssh-client)")
    return found


def check_key(key: Path) -> None:
    """Refuse a key file that is not there before anything is collected."""
    if not Path(key).is_file():
        raise SignatureError(f"{key}: no such key file to sign with")
    _ssh_keygen()


def sign(summary_json: Path, key: Path) -> Path:
    """Write ``<summary.json>.sig`` with ``key`` (a private key, or a public one whose private half the
    ssh-agent holds); its path."""
    check_key(key)
    target = summary_json.with_name(SIGNATURE)
    target.unlink(missing_ok=True)  # ssh-keygen will not overwrite one
    done = subprocess.run(
        [_ssh_keygen(), "-Y", "sign", "-q", "-f", str(key), "-n", NAMESPACE, str(summary_json)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0 or not target.is_file():
        raise SignatureError(f"{key}: ssh-keygen -Y sign failed: {(done.stderr or done.stdout).strip()}")
    return target


def _allowed_signers(keys: Path, out: Path) -> None:
    """KEYS as an allowed-signers file: a public-key line is allowed under its comment (or ``key-N``)."""
    try:
        lines = read_text(keys, SIGNERS_MAX_BYTES, "signers file").splitlines()
    except FileReadError as exc:
        raise SignatureError(f"cannot read the signers: {exc}") from None
    allowed = []
    for number, line in enumerate(lines, 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0].startswith(("ssh-", "ecdsa-", "sk-")):
            name = re.sub(r"[^\w.@+-]", "_", " ".join(words[2:])) or f"key-{number}"
            allowed.append(f"{name} {words[0]} {words[1] if len(words) > 1 else ''}")
        else:
            allowed.append(line.strip())
    if not allowed:
        raise SignatureError(f"{keys}: holds no public key")
    out.write_text("\n".join(allowed) + "\n", encoding="utf-8")


def check(evidence_dir: Path, keys: Path) -> tuple[bool, str]:
    """(True, who signed) when ``summary.json.sig`` is a valid signature of ``summary.json`` by a key in
    ``keys``; (False, why not) otherwise."""
    sig = evidence_dir / SIGNATURE
    if not sig.is_file():
        return False, f"{SIGNATURE} is missing: the evidence is not signed"
    keygen = _ssh_keygen()
    with tempfile.TemporaryDirectory(prefix="atomdyn-signers.") as tmp:
        allowed = Path(tmp) / "allowed_signers"
        _allowed_signers(Path(keys), allowed)
        found = subprocess.run(
            [keygen, "-Y", "find-principals", "-s", str(sig), "-f", str(allowed)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
            check=False,
        )
        principals = found.stdout.split() if found.returncode == 0 else []
        if not principals:
            return False, f"{SIGNATURE}: not signed by a key in {keys}"
        with open(evidence_dir / "summary.json", "rb") as message:
            done = subprocess.run(
                [
                    keygen,
                    "-Y",
                    "verify",
                    "-f",
                    str(allowed),
                    "-I",
                    principals[0],
                    "-n",
                    NAMESPACE,
                    "-s",
                    str(sig),
                ],
                stdin=message,
                capture_output=True,
                text=True,
                timeout=_TIMEOUT_S,
                check=False,
            )
    if done.returncode != 0:
        return False, f"{SIGNATURE}: the signature does not verify against summary.json (by a key in {keys})"
    return True, principals[0]
