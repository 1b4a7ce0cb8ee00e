"""The invoke command line (tasks.py) as a user meets it: arguments are data, every option documented and
typed, `-h` is help, `invoke --list` without the native builds, a closed pipe is not a traceback.

Tasks and options are enumerated from the assembled invoke collection, so a new task is covered unasked.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
INVOKE_TIMEOUT_S = 120

# Loads tasks.py the way invoke does and describes every option of every task, as `--help` shows it.
_DESCRIBE = r"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("atomdyn_tasks_described", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
out = []
for ctx in module.ns.to_contexts():
    for arg in ctx.args.values():
        spec_text, help_text = ctx.help_for("--" + arg.names[0])
        out.append({
            "task": ctx.name, "option": arg.names[0], "names": list(arg.names), "kind": arg.kind.__name__,
            "positional": arg.positional, "spec": spec_text, "help": help_text,
        })
print(json.dumps(out))
"""

# Runs invoke with an audit hook that records every process this interpreter starts (and, for a task
# that would otherwise start a whole cluster, stops at the first one).
_RUN_INVOKE = r"""
import json, os, sys
log_path, mode, *argv = sys.argv[1:]
SPAWNS = {"subprocess.Popen", "os.system", "os.posix_spawn", "os.exec", "os.spawn"}

def text(item):
    return os.fsdecode(item) if isinstance(item, (bytes, os.PathLike)) else str(item)

def hook(event, args):
    if event not in SPAWNS:
        return
    command = args[0] if event == "os.system" else args[1]
    if isinstance(command, (str, bytes, os.PathLike)):
        command = [command]
    with open(log_path, "a") as log:
        log.write(json.dumps({"event": event, "argv": [text(a) for a in command]}) + "\n")
    if mode == "stop":
        raise RuntimeError(f"stopped by the test at its first process ({event})")

sys.addaudithook(hook)
from invoke.main import program
sys.argv = ["invoke", *argv]
program.run()
"""

SHELLS = {"sh", "bash", "dash", "zsh", "ksh"}
# Whole-cluster tasks: their string options are used only after a cluster is up and a run is done.
STOP_AT_FIRST_PROCESS = {"demo"}
# Documented as "arguments, split like a shell would split them": split, never run by a shell.
SPLIT_INTO_ARGUMENTS = {("nodes.prepare", "build-args")}
# Keeps a task short and off the network; the option under test still gets the payload.
EXTRA_OPTIONS: dict[str, dict[str, str | None]] = {
    "wheels.fetch": {"mirror": "EMPTY"},
    "nixl.bench": {"quick": None},
}


@functools.cache
def options() -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-c", _DESCRIBE, str(ROOT / "tasks.py")],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    described: list[dict[str, Any]] = json.loads(done.stdout)
    return described


def string_options() -> list[tuple[str, str, bool]]:
    return [(o["task"], o["option"], o["positional"]) for o in options() if o["kind"] in ("str", "list")]


def payload(canaries: Path) -> str:
    """One value holding each way a shell would run something: `;`, `$()`, backticks, a newline, a pipe."""
    c = canaries
    return (
        f"h7mark value with spaces; touch {c}/semicolon $(touch {c}/dollar) `touch {c}/backtick` "
        f"| touch {c}/pipe\ntouch {c}/newline"
    )


def cluster_env(tmp_path: Path) -> Path:
    """A configuration the tasks accept, whose cluster cannot be reached: Slurm's commands refuse its
    slurm.conf at once (no ClusterName) and nothing listens at its etcd endpoint."""
    shared, model = tmp_path / "shared", tmp_path / "model"
    shared.mkdir(exist_ok=True)
    model.mkdir(exist_ok=True)
    (tmp_path / "unusable-slurm.conf").write_text("# no cluster here\n")
    env = tmp_path / "cluster.env"
    env.write_text(
        "SLURM_ACCOUNT=acct\nSLURM_PARTITION=part\nSLURM_QOS=normal\n"
        "PRIMARY_NODE=n1\nPREFILL_NODE=n1\nDECODE_NODE=n2\n"
        f"SHARED_DIR={shared}\nMODEL_PATH={model}\nENGINE_PROFILE=mocker\nRUNTIME=venv\n"
        f"PROJECT_DIR={ROOT}\nSLURM_CONF={tmp_path}/unusable-slurm.conf\nETCD_ENDPOINTS=http://127.0.0.1:9\n"
    )
    return env


def run_invoke(
    tmp_path: Path, args: list[str], *, stop: bool = False, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    log = tmp_path / "spawned.jsonl"
    work = tmp_path / "cwd"
    work.mkdir(exist_ok=True)
    environment = {
        **os.environ,
        "ATOMDYN_REPO": str(tmp_path),  # no local cluster state of the developer's is touched
        "ATOMDYN_LOCK": str(ROOT / "release-lock.json"),
        "ATOMDYN_CLUSTER_ENV": str(cluster_env(tmp_path)),
        **(env or {}),
    }
    command = [sys.executable, "-c", _RUN_INVOKE, str(log), "stop" if stop else "run"]
    command += ["--search-root", str(ROOT), *args]
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=work, env=environment, timeout=INVOKE_TIMEOUT_S
    )
    spawned = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return done, spawned


def test_every_task_string_option_is_enumerated() -> None:
    found = {(task, option) for task, option, _ in string_options()}
    # A sample the enumeration must contain (the two from the issue among them); the test below covers all.
    assert {("lock.verify", "path"), ("wheels.fetch", "cache"), ("nodes.prepare", "shim-wheel")} <= found
    assert len(found) >= 40


@pytest.mark.parametrize(("task", "option", "positional"), string_options(), ids=lambda v: str(v))
def test_string_options_are_data_never_shell(
    tmp_path: Path, task: str, option: str, positional: bool
) -> None:
    canaries = tmp_path / "canaries"
    canaries.mkdir()
    value = payload(canaries)
    # Other required (positional) options get a harmless value; the one under test gets the payload.
    empty = tmp_path / "empty"
    empty.mkdir()
    args = [task]
    for name, extra in EXTRA_OPTIONS.get(task, {}).items():
        if name != option:
            args += [f"--{name}", *([str(empty)] if extra == "EMPTY" else [])]
    for other in options():
        if other["task"] == task and other["positional"] and other["option"] != option:
            args.append("missing-path")
    args += [value] if positional else [f"--{option}", value]
    done, spawned = run_invoke(tmp_path, args, stop=task in STOP_AT_FIRST_PROCESS)
    output = done.stdout + done.stderr

    assert sorted(p.name for p in canaries.iterdir()) == [], f"a shell ran part of the value: {output}"
    for record in spawned:
        argv = record["argv"]
        assert record["event"] != "os.system", f"os.system ran {argv}"
        if Path(argv[0]).name in SHELLS and "-c" in argv[:-1]:
            script = argv[argv.index("-c") + 1]
            assert "h7mark" not in script, f"the value went into a shell script: {argv}"
        pieces = [a for a in argv if "h7mark" in a]
        if (task, option) not in SPLIT_INTO_ARGUMENTS:
            assert all(value in a for a in pieces), f"the value was split on its way to {argv}"
    if task in STOP_AT_FIRST_PROCESS:
        assert "stopped by the test at its first process" in output
        return
    assert "Traceback (most recent call last)" not in output, output
    if done.returncode != 0:
        assert output.strip(), f"{task} --{option}: exit {done.returncode} without saying why"


def test_the_unreachable_cluster_is_accepted_and_fails_at_slurm(tmp_path: Path) -> None:
    # Otherwise every task above would stop at the configuration, before using its options.
    done, spawned = run_invoke(tmp_path, ["nodes.check", "--nodes", "n1"])
    assert done.returncode == 1
    assert "sbatch: error: ClusterName needs to be specified" in done.stderr + done.stdout
    assert any(Path(r["argv"][0]).name == "sbatch" and "--nodelist=n1" in r["argv"] for r in spawned)


def test_lock_verify_gets_the_path_intact(tmp_path: Path) -> None:
    canaries = tmp_path / "canaries"
    canaries.mkdir()
    value = payload(canaries)
    done, _ = run_invoke(tmp_path, ["lock.verify", "--path", value])
    assert done.returncode == 2
    assert f"error: $: {value}: cannot read the lock: No such file or directory" in done.stderr
    assert list(canaries.iterdir()) == []


def test_wheels_fetch_gets_the_cache_intact(tmp_path: Path) -> None:
    canaries = tmp_path / "canaries"
    canaries.mkdir()
    value = payload(canaries)
    mirror = tmp_path / "empty-mirror"
    mirror.mkdir()
    done, _ = run_invoke(
        tmp_path, ["wheels.fetch", "--only", "nixl", "--mirror", str(mirror), "--cache", value]
    )
    assert done.returncode == 1
    assert f"nixl-1.5.1-py3-none-any.whl is missing from the mirror {mirror}" in done.stderr
    # The cache directory was created under exactly the name given (relative to the working directory).
    assert (tmp_path / "cwd" / value).is_dir()
    assert list(canaries.iterdir()) == []


def test_every_option_has_help_with_its_default_and_a_typed_value() -> None:
    problems = []
    for o in options():
        where = f"{o['task']} --{o['option']}"
        if not o["help"]:
            problems.append(f"{where}: no help")
            continue
        if "default" not in o["help"] and not (o["positional"] and "required" in o["help"]):
            problems.append(f"{where}: help does not say the default: {o['help']!r}")
        if o["kind"] == "bool":
            continue
        typed = any(t in o["spec"] for t in ("=STRING", "=INT")) or any(
            t in o["help"] for t in ("[FLOAT", "[STRING, repeatable")
        )
        if not typed:
            problems.append(f"{where}: the value's type is not shown ({o['spec']!r}, {o['help']!r})")
    assert problems == []


def test_no_option_takes_dash_h() -> None:
    assert [f"{o['task']} --{o['option']}" for o in options() if "h" in o["names"]] == []


def test_dash_h_shows_help(tmp_path: Path) -> None:
    done, spawned = run_invoke(tmp_path, ["nodes.prepare", "-h"])
    assert done.returncode == 0, done.stderr
    assert "Usage: inv[oke] [--core-opts] nodes.prepare" in done.stdout
    assert "--shim-wheel=STRING" in done.stdout
    assert spawned == []


def test_int_options_without_a_default_read_an_int(tmp_path: Path) -> None:
    described = {(o["task"], o["option"]): o for o in options()}
    assert "--requests=INT" in described[("disagg.run", "requests")]["spec"]
    assert "[FLOAT]" in described[("disagg.run", "ready-timeout")]["help"]
    done, _ = run_invoke(tmp_path, ["disagg.run", "--requests", "many"])
    assert done.returncode != 0
    assert "Traceback" not in done.stderr and "many" in done.stderr + done.stdout


# Loads tasks.py the way invoke does, after invoke itself (what invoke imports is not the collection's doing:
# its vendored YAML loads PyYAML's C module, so `yaml` is there before any task module is), and records each
# module the collection adds with the module whose import statement brought it in.
_COLLECTION_IMPORTS = r"""
import importlib.abc, importlib.util, json, sys
from invoke.main import program

before = set(sys.modules)
importers = {}

class Recorder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        frame = sys._getframe(1)
        while frame is not None and frame.f_globals.get("__name__", "").startswith(("importlib", "_frozen_importlib")):
            frame = frame.f_back
        importers.setdefault(name, frame.f_globals.get("__name__", "?") if frame is not None else "?")
        return None

sys.meta_path.insert(0, Recorder())
spec = importlib.util.spec_from_file_location("tasks.py", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
added = sorted(set(sys.modules) - before)
packages = [name for name in added if hasattr(sys.modules[name], "__path__")]
print(json.dumps({"added": added, "packages": packages, "importers": importers}))
"""

FIRST_PARTY = {
    "atomdyn_core",
    "atomdyn_launchers",
    "atomdyn_images",
    "nixl_compat",
    "rixl",
    "dmabuf_shim",
    "mori_repro",
}
# Besides invoke and the standard library, loading the collection may import the task modules, their packages and
# these: where options' defaults and help texts come from, each importing nothing but the standard library.
LIGHT = {
    "atomdyn_core.console",
    "atomdyn_launchers.nodes.strategies",
    "atomdyn_launchers.profiles.models",
    "atomdyn_launchers.slurm.flags",
}
# What a task module once imported at its top (~430 ms on every `invoke` call, `--list` and `-h` too); named
# here for the failure's sake: the allow-list above refuses any other module as well.
HEAVY = (
    "atomdyn_launchers.run.launch",
    "atomdyn_launchers.certify.nixl",
    "atomdyn_launchers.config.cluster",
    "atomdyn_launchers.config.recipes",
    "atomdyn_launchers.evidence.cli",
    "atomdyn_launchers.slurm.client",
    "atomdyn_launchers.engines",
    "atomdyn_core.sanitize",
    "jsonschema",
    "matplotlib",
)


def _imported_by(name: str, importers: dict[str, str]) -> str:
    chain = [name]
    while chain[-1] in importers and len(chain) < 20:
        chain.append(importers[chain[-1]])
    return " <- ".join(chain)


def test_listing_the_tasks_imports_no_heavy_module() -> None:
    """CONTRIBUTING.md: a task imports heavy or native modules inside its body; every `invoke` call, `--list`
    and `-h` too, loads every task module."""
    done = subprocess.run(
        [sys.executable, "-c", _COLLECTION_IMPORTS, str(ROOT / "tasks.py")],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=INVOKE_TIMEOUT_S,
    )
    found = json.loads(done.stdout)
    added, importers = found["added"], found["importers"]
    assert (
        "atomdyn_launchers.tasks" in added and "atomdyn_launchers.run.tasks" in added
    )  # the probe loaded them
    heavy = [n for n in added if any(n == h or n.startswith(f"{h}.") for h in HEAVY)]
    assert heavy == [], "heavy modules loaded with the task collection:\n" + "\n".join(
        _imported_by(n, importers) for n in heavy
    )

    def allowed(name: str) -> bool:
        top, _, _ = name.partition(".")
        if top in sys.stdlib_module_names or top == "invoke":
            return True
        if top not in FIRST_PARTY:
            return False  # a third-party dependency of a task: import it in the task's body
        leaf = name.rpartition(".")[2]
        return name in found["packages"] or leaf in ("tasks", "invoke_tasks") or name in LIGHT

    refused = [n for n in added if not allowed(n)]
    assert refused == [], (
        "modules the task collection must not load (import them inside the task's body, or move an option's "
        "default to a light module and add it to LIGHT):\n"
        + "\n".join(_imported_by(n, importers) for n in refused)
    )


# Makes the native packages unimportable, as in a checkout where they were never built.
_WITHOUT_NATIVE = r"""
import sys
for name in ("dmabuf_shim", "dmabuf_shim._native", "mori_repro", "mori_repro.native"):
    sys.modules[name] = None
from invoke.main import program
sys.argv = ["invoke", *sys.argv[1:]]
program.run()
"""


def _without_native(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT_NATIVE, "--search-root", str(ROOT), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=INVOKE_TIMEOUT_S,
    )


def test_list_works_without_the_native_builds() -> None:
    done = _without_native("--list")
    assert done.returncode == 0, done.stderr
    for name in ("dmabuf.env", "dmabuf.bench", "mori.run", "mori.report", "lock.verify", "disagg.run"):
        assert f"  {name} " in done.stdout


@pytest.mark.parametrize(("task", "package"), [("dmabuf.env", "dmabuf-shim"), ("mori.run", "mori-repro")])
def test_a_native_task_without_its_build_says_how_to_build_it(task: str, package: str) -> None:
    done = _without_native(task)
    assert done.returncode == 2
    assert f"{package} is not built here" in done.stderr
    assert f"pip install ./packages/{package}" in done.stderr
    assert "Traceback" not in done.stderr


def test_shell_completion_is_documented_and_works() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "invoke --print-completion-script bash" in readme
    done = subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(ROOT), "--print-completion-script", "bash"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and "complete -F" in done.stdout
