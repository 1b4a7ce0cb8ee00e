"""`nox -s lint`'s second secret scan (scripts/secret_scan.py): the real detect-secrets over evidence git tracks."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "secret_scan.py"
DIGEST = "9f2c4e1a7b3d5f60812a4c6e8b0d2f4a6c8e0b2d4f6a8c0e2b4d6f8a0c2e4b6d"
# Made up here rather than written out, so that no scanner takes this test file for a leak.
AWS_KEY = "AKIA" + "Q3EGRVBNHZ7T2XMW"
PRIVATE_KEY = "-----BEGIN " + "RSA PRIVATE KEY-----"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("secret_scan", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["secret_scan"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def run_scan(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root)], capture_output=True, text=True, check=False
    )


def evidence_repo(tmp_path: Path, files: dict[str, str]) -> Path:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    subprocess.run(["git", "add", "--", *files], cwd=tmp_path, check=True)
    return tmp_path


def test_the_committed_evidence_has_no_finding() -> None:
    done = run_scan(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "secret scan: no finding in" in done.stdout


def test_a_planted_key_fails_naming_file_line_and_plugin_but_not_the_value(tmp_path: Path) -> None:
    root = evidence_repo(
        tmp_path,
        {
            # The known-safe forms pass on their own lines ...
            "evidence/run-1/summary.json": (
                f'{{\n  "files": {{\n    "data/run.json": "{DIGEST}",\n    "summary.md": "{DIGEST[::-1]}"\n  }},\n'
                f'  "run_dir": "/cluster/path-1/runs/20261201T164645Z-disagg-vllm-cpu"\n}}\n'
            ),
            "evidence/run-1/data/fingerprints/decode.json": f'{{\n  "freeze_sha256": "{DIGEST}"\n}}\n',
            # ... a key does not, in a log or beside a digest on one line (the exclusions are whole lines).
            "evidence/run-1/data/logs/decode.log": f"starting\nexport AWS_ACCESS_KEY_ID={AWS_KEY}\n",
            "evidence/run-1/data/requests.jsonl": f'{{"summary.md": "{DIGEST}", "key": "{AWS_KEY}"}}\n',
            "evidence/run-2/excerpts/run.txt": f"a\nb\n{PRIVATE_KEY}\nMIIEpAIBAAKCAQEA\n",
        },
    )
    done = run_scan(root)
    assert done.returncode == 1, done.stdout + done.stderr
    findings = sorted(line for line in done.stderr.splitlines() if line.startswith("evidence/"))
    assert findings == [
        "evidence/run-1/data/logs/decode.log:2: AWS Access Key",
        "evidence/run-1/data/requests.jsonl:1: AWS Access Key",
        "evidence/run-1/data/requests.jsonl:1: Hex High Entropy String",  # that line's digest too
        "evidence/run-2/excerpts/run.txt:3: Private Key",
    ]
    assert "4 finding(s) in 5 evidence files" in done.stderr
    assert AWS_KEY not in done.stdout + done.stderr


def test_every_plugin_runs_and_the_safe_forms_are_only_digests_and_placeholder_paths(tmp_path: Path) -> None:
    secret_scan = load_script()
    listed = subprocess.run(
        [sys.executable, "-m", "detect_secrets", "scan", "--list-all-plugins"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    root = evidence_repo(
        tmp_path,
        {
            "evidence/x/a.json": (
                # a path with a long random component is not the sanitizer's placeholder path
                '{\n  "run_dir": "/cluster/path-1/runs/Zx8QpL2vR7tN4kW9yB6mC3hJ5sD1fG0a"\n}\n'
            ),
        },
    )
    result = secret_scan.scan(root, secret_scan.tracked_evidence(root))
    assert sorted(result.plugins) == sorted(listed.stdout.split())
    assert [(f.path, f.line, f.plugin) for f in result.findings] == [
        ("evidence/x/a.json", 2, "Base64 High Entropy String")
    ]
