"""Run-time entry points (`invoke --list`). Each package owns its collection; this file assembles them and
applies the rules every task's command line follows (`CliTask`).

Shell completion: `invoke --print-completion-script bash` (or zsh, fish) prints a script to source.
"""

from __future__ import annotations

import atexit
import importlib.util
import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from invoke.collection import Collection
from invoke.context import Context
from invoke.exceptions import Exit, ParseError
from invoke.parser.argument import Argument
from invoke.tasks import Task, task

from atomdyn_core.console import stdout_gone

ROOT = Path(__file__).resolve().parent

# Native packages are built, not installed editable: their tasks are listed even where they are not built
# (their invoke_tasks modules import the package only when a task runs, and then say how to build it).
NATIVE_TASKS = {
    "dmabuf_shim": ROOT / "packages/dmabuf-shim/src/dmabuf_shim/invoke_tasks.py",
    "mori_repro": ROOT / "packages/mori-repro/src/mori_repro/invoke_tasks.py",
}


class CliTask(Task[Callable[..., Any]]):
    """A task whose options follow the project's rules: ``-h`` always means help (no option takes it as a
    short flag), an option whose default is None takes the type its annotation names (``int | None`` reads
    an INT), a value of the wrong type is a usage error, a concrete default is shown in the option's help,
    and output into a closed pipe (`| head`) ends the task without a traceback."""

    @classmethod
    def of(cls, source: Task[Any]) -> CliTask:
        return cls(
            source.body,
            name=source.name,
            aliases=source.aliases,
            positional=source.positional,
            optional=source.optional,
            default=source.is_default,
            auto_shortflags=source.auto_shortflags,
            help=dict(source.help),
            pre=source.pre,
            post=source.post,
            autoprint=source.autoprint,
            iterable=source.iterable,
            incrementable=source.incrementable,
        )

    def arg_opts(self, name: str, default: str, taken_names: set[str]) -> dict[str, Any]:
        opts = super().arg_opts(name, default, taken_names | {"h"})
        if default is None and "kind" not in opts:
            opts["kind"] = _annotated_type(self.body, name)
        notes = [_UNLABELED_KINDS.get(opts.get("kind", str), "")]
        if opts["positional"]:
            notes.append("required")
        shown = _shown_default(opts.get("kind"), opts.get("default"))
        text = opts.get("help", "")
        if shown and "default" not in text:
            notes.append(f"default: {shown}")
        if any(notes):
            opts["help"] = f"{text} [{', '.join(n for n in notes if n)}]".strip()
        return opts

    def get_arguments(self, ignore_unknown_help: bool | None = None) -> list[Argument]:
        arguments = super().get_arguments(ignore_unknown_help)
        for argument in arguments:
            argument.__class__ = _CheckedArgument
        return arguments

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            result = super().__call__(*args, **kwargs)
            sys.stdout.flush()
        except BrokenPipeError:
            stdout_gone()
            raise Exit(code=1) from None
        return result


# invoke's help names STRING and INT values only; the others are named in the option's help.
_UNLABELED_KINDS: dict[object, str] = {float: "FLOAT", list: "STRING, repeatable"}


class _CheckedArgument(Argument):
    """A value of the wrong type is a usage error naming the option, not a traceback."""

    def set_value(self, value: Any, cast: bool = True) -> None:
        try:
            super().set_value(value, cast)
        except ValueError:
            kind = getattr(self.kind, "__name__", "value")
            raise ParseError(
                f"--{self.names[0]}: {value!r} is not {'an' if kind == 'int' else 'a'} {kind}"
            ) from None


def _annotated_type(body: Callable[..., Any], name: str) -> type:
    """``int`` for ``int | None``, etc.; str where the annotation names no single scalar type."""
    hint = typing.get_type_hints(body).get(name)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = members[0] if len(members) == 1 else None
    return hint if hint in (int, float) else str


def _shown_default(kind: object, default: object) -> str:
    if kind is bool:
        return "on" if default else "off"
    if default is None or default == "" or default == []:
        return ""  # the help text must say what happens without the option
    return str(default)


def _flush_at_exit() -> None:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_gone()


def _quiet_broken_pipe(hook: Callable[..., Any]) -> Callable[..., Any]:
    def excepthook(kind: type[BaseException], value: BaseException, tb: types.TracebackType | None) -> None:
        if issubclass(kind, BrokenPipeError):
            stdout_gone()  # invoke's own output (--list, --help) into a closed pipe
            return
        hook(kind, value, tb)

    return excepthook


def _lock_cli(*args: str) -> None:
    # In-process, with an argument list: nothing a user types reaches a shell.
    from atomdyn_core.cli import main

    code = main(list(args))
    if code:
        raise Exit(code=code)


@task(klass=CliTask, help={"path": "lock file (default: release-lock.json found upward from here)"})
def verify(c: Context, path: str = "") -> None:
    """Validate release-lock.json and print its digest."""
    _lock_cli(*([f"--lock={path}"] if path else []), "verify")


@task(
    klass=CliTask,
    help={
        "cache": "directory for verified wheels",
        "mirror": "local mirror directory (path or file://) (default: none, fetch from the network)",
        "role": "only wheels with this role: image-base, image-overlay, rehearsal, gpu-evidence, etcd, accuracy "
        "(default: every role)",
        "only": "comma-separated lock entry names (default: every wheel)",
        "allow_unrecorded": "comma-separated entries (or 'all') accepted without a recorded hash; recorded as "
        "an override (default: none)",
    },
)
def fetch(
    c: Context,
    cache: str = ".atomdyn/wheels",
    mirror: str = "",
    role: str = "",
    only: str = "",
    allow_unrecorded: str = "",
) -> None:
    """Download every wheel the lock names into a cache, verifying size and sha256 (the PoC's fetch step)."""
    args = ["fetch", f"--cache={cache}"]
    if mirror:
        args.append(f"--mirror={mirror}")
    if role:
        args.append(f"--role={role}")
    if only:
        args += ["--only", *(name.strip() for name in only.split(",") if name.strip())]
    args += [f"--allow-unrecorded={name}" for name in allow_unrecorded.split(",") if name]
    _lock_cli(*args)


@task(
    klass=CliTask,
    help={
        "engine": "vllm-cpu: real vLLM prefill and decode, KV over NIXL (minutes); mocker: the fast path (seconds)",
        "requests": "smoke requests (default: the launcher's default for a disaggregated run, 32)",
        "evidence": "where the run's evidence goes (default: beside the runs, .atomdyn/evidence; 'evidence' "
        "publishes into the project's committed evidence/)",
        "keep_cluster": "leave the local cluster up afterwards",
    },
)
def demo(
    c: Context,
    engine: str = "vllm-cpu",
    requests: int | None = None,
    evidence: str = "",
    keep_cluster: bool = False,
) -> None:
    """The local rehearsal end to end: cluster up, disagg.run (real vLLM engines on CPU, or the mock engine),
    evidence collected and verified, cluster down."""
    from atomdyn_launchers.rehearsal.demo import DemoError, run_demo

    try:
        print(run_demo(engine, requests, Path(evidence) if evidence else None, keep_cluster=keep_cluster))
    except DemoError as exc:
        raise Exit(f"demo FAILED: {exc}", code=1) from None


def _native_collection(package: str) -> Collection:
    # From this checkout's file, not through the package: it may be unbuilt, or an installed build of
    # another revision. The tasks import the installed package when they run.
    spec = importlib.util.spec_from_file_location(f"_{package}_invoke_tasks", NATIVE_TASKS[package])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    collection: Collection = module.ns
    return collection


def _package_collections() -> list[Collection]:
    from atomdyn_launchers.tasks import COLLECTIONS, EXTRA_TASKS
    from nixl_compat.invoke_tasks import ns as nixl

    cluster, nodes, agg, disagg, evidence, validate = COLLECTIONS
    for task_name, extra in EXTRA_TASKS["nixl"]:  # nixl.cross_node: the launchers' NIXL job pair
        nixl.add_task(extra, name=task_name)
    dmabuf, mori = _native_collection("dmabuf_shim"), _native_collection("mori_repro")
    return [cluster, nodes, agg, disagg, evidence, validate, dmabuf, nixl, mori]


def _root_tasks() -> tuple[Task[Any], ...]:
    from atomdyn_launchers.tasks import ROOT_TASKS

    return ROOT_TASKS


def cli_collection(source: Collection) -> Collection:
    """``source`` with every task a `CliTask` (names, aliases and the default task kept)."""
    out = Collection(source.name)
    for name, item in source.tasks.items():
        out.add_task(item if isinstance(item, CliTask) else CliTask.of(item), name=name)
    if source.default:
        out.default = source.default
    for sub in source.collections.values():
        out.add_collection(cli_collection(sub))
    return out


sys.excepthook = _quiet_broken_pipe(sys.excepthook)
atexit.register(_flush_at_exit)

ns = Collection(demo)
for _root_task in _root_tasks():
    ns.add_task(CliTask.of(_root_task))
ns.add_collection(Collection("lock", verify))
ns.add_collection(Collection("wheels", fetch))
for _collection in _package_collections():
    ns.add_collection(cli_collection(_collection))
