"""Records generated from ``evidence/``: results/RESULTS.md and the README's "Result at a glance".

Only evidence that verifies is published: every summary is judged again from its collected data first
(evidence/verify.py), so what these records say is what the data says. Evidence that was edited after
collection stops the report; evidence collected in the old format (no data to recompute from) is left out
of both and named. RESULTS.md is a chronological record, one entry per collected run, ordered by run id (its
UTC timestamp); entries already there are kept as they are. The README table lives between two marker
comments: the latest run of each capability and platform, its rows merged with those already there (a row
whose evidence lies in another evidence root stays; one of this root is drawn again from its summary).

Every row says who signed its bundle (a key of ``evidence/allowed_signers``, checked here) or ``unsigned``. A
row whose platform is hardware (anything but a rehearsal) from a bundle no allowed key signed goes into a
second, separately headed table of unverified claims, never into the results table itself: a bundle whose
``data/`` was written by hand verifies, so only a signature made where the run ran backs a hardware claim
(docs/run-directory.md).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_text
from atomdyn_launchers.evidence import mdtext, signature
from atomdyn_launchers.evidence.certify_report import BUNDLE_PREFIX, STATE_FILE, verify_certify
from atomdyn_launchers.evidence.jsonfile import read_json, read_whole_text
from atomdyn_launchers.evidence.summary import JOBS_FINGERPRINTS, SCHEMA_VERSION, verdict_words
from atomdyn_launchers.evidence.verify import verify_evidence

GLANCE_BEGIN = "<!-- result-at-a-glance:begin -->"
GLANCE_END = "<!-- result-at-a-glance:end -->"
_ENTRY = re.compile(r"^<!-- run:(\S+) -->$", re.MULTILINE)
_HEADER = (
    "# Results\n\n"
    "Chronological record of collected runs, appended by `invoke evidence.report`. Each entry names the\n"
    "platform it ran on and the lock digest; the linked evidence holds the gates, excerpts and fingerprint.\n"
)

_CAPABILITY = {
    "agg-single": "Single-node aggregated serving",
    "agg-two": "Two-node aggregated serving",
    "disagg": "Two-node disaggregated prefill/decode",
}
# The same kinds where the roles' own fingerprints name one host (two Slurm nodes of one machine, as on the H200
# runs): never called two-node.
_ONE_HOST = {
    "agg-two": "Aggregated serving, two roles on one host",
    "disagg": "Disaggregated prefill/decode on one host",
}


class ReportError(ValueError):
    """A README or RESULTS.md that cannot be updated safely."""


def load_summaries(
    evidence_root: Path, names: Collection[str] | None = None, signers: Path | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """The summaries of ``evidence_root/<run-id>/`` (only those ``names`` names, when given) that verify,
    oldest run first, and a line for each one left out (collected in an older format). An evidence root that
    is not a directory or holds no evidence, or evidence that does not verify, raises ReportError. Each
    summary's ``_signed_by`` is the principal of ``signers`` (an allowed-signers file) whose key signed it,
    else None (unsigned, or a signature no allowed key made: it is named in the skipped lines)."""
    if not evidence_root.is_dir():
        raise ReportError(f"{evidence_root}: no such evidence directory")
    paths = sorted(p for p in evidence_root.glob("*/summary.json") if names is None or p.parent.name in names)
    if not paths:
        raise ReportError(
            f"{evidence_root}: holds no evidence (no <run-id>/summary.json): nothing to publish"
        )
    found, skipped = [], []
    for path in paths:
        try:
            summary = read_json(path, expect=None)
        except (OSError, ValueError) as exc:
            raise ReportError(f"{path}: unreadable summary: {exc}") from exc
        if not isinstance(summary, dict):
            raise ReportError(f"{path}: not a JSON object")
        if summary.get("schema_version") != SCHEMA_VERSION:
            skipped.append(f"{path.parent.name}: summary format {summary.get('schema_version')!r} keeps no data "
                           "to recompute its gates from")  # fmt: skip
            continue
        verdict = verify_evidence(path.parent)
        if not verdict.intact:
            raise ReportError(f"{path.parent} does not verify; nothing published:\n{verdict.text().rstrip()}")
        summary["_dir"] = path.parent.name
        summary["_signed_by"] = None
        if signers is not None and (path.parent / signature.SIGNATURE).exists():
            try:
                good, who = signature.check(path.parent, signers)
            except signature.SignatureError as exc:  # a signers file with no key: nothing it signed counts
                good, who = False, str(exc)
            if good:
                summary["_signed_by"] = who
            else:
                summary["_signature_note"] = f"{path.parent.name}: shown as unsigned: {who}"
        found.append(summary)
    return sorted(found, key=lambda s: str(s.get("run_id"))), skipped


def _gate(summary: dict[str, Any], gate_id: str) -> dict[str, Any] | None:
    return next((g for g in summary.get("gates", []) if g.get("id") == gate_id), None)


def _requests(summary: dict[str, Any]) -> str:
    figures = summary.get("figures", {})
    if "requests_total" in figures:
        return mdtext.text(f"{figures.get('requests_ok', 0)}/{figures['requests_total']} requests")
    return "no requests"


def _entry(summary: dict[str, Any], link: str) -> str:
    """One run's entry. Every value comes from verified evidence, and every one a run supplied is escaped
    (mdtext); the run id is a plain name (collect and verify require it)."""
    t = mdtext.text
    figures = summary.get("figures", {})
    failed = [t(g["id"]) for g in summary.get("gates", []) if g.get("verdict") == "fail"]
    lines = [
        f"<!-- run:{summary['run_id']} -->",
        f"## {t(summary['run_id'])}: {t(summary.get('kind'))} / {t(summary.get('engine_profile'))}: "
        f"{t(str(summary.get('verdict')).upper())}",
        "",
        f"- platform: {t(summary.get('platform'))}; runtime: {t(summary.get('runtime'))}; "
        f"model profile: {t(summary.get('model_profile'))}",
        f"- lock digest: {mdtext.code(summary.get('lock_digest'), in_table=False)}",
        f"- gates: {verdict_words(summary)}" + (f": {', '.join(failed)}" if failed else ""),
        f"- {_requests(summary)}"
        + (f"; first good response {t(figures['startup_to_first_good_response_s'])} s after submission"
           if "startup_to_first_good_response_s" in figures else ""),
        f"- evidence: [{link}]({link})",
        "",
    ]  # fmt: skip
    return "\n".join(lines)


def load_climbs(evidence_root: Path) -> list[dict[str, Any]]:
    """The published bring-up ladders of ``evidence_root`` (certify-<id>/), each verified (recomputed from its
    certify.json); one that does not verify raises ReportError."""
    found = []
    for path in sorted(evidence_root.glob(f"{BUNDLE_PREFIX}*/{STATE_FILE}")):
        verdict = verify_certify(path.parent)
        if not verdict.intact:
            raise ReportError(f"{path.parent} does not verify; nothing published:\n{verdict.text().rstrip()}")
        try:
            state = read_json(path)
        except (OSError, ValueError) as exc:
            raise ReportError(f"{path}: unreadable: {exc}") from None
        state["_dir"] = path.parent.name
        found.append(state)
    return found


def _climb_entry(state: dict[str, Any], link: str) -> str:
    """One climb's entry, keyed like a run's (``certify-<id>``): its verdict line, the lock, each rung."""
    t = mdtext.text
    rungs = "; ".join(f"{r['number']} {t(r['name'])} {t(r['verdict'])}" for r in state.get("rungs", []))
    key = state.get("key") or {}
    lines = [
        f"<!-- run:{state['_dir']} -->",
        f"## {t(state['_dir'])}: bring-up ladder / {t(state.get('engine'))}: {t(state.get('verdict'))}",
        "",
        f"- lock digest: {mdtext.code(key.get('lock_digest'), in_table=False)}; model profile: "
        f"{t(state.get('model'))}",
        f"- rungs: {rungs}",
        f"- report: [{link}]({link})",
        "",
    ]
    return "\n".join(lines)


@dataclass
class PlannedResults:
    """RESULTS.md as it will be written (``text`` None: unchanged), and the runs added and rewritten."""

    path: Path
    text: str | None
    added: list[str] = field(default_factory=list)
    rewritten: list[str] = field(default_factory=list)

    def write(self) -> None:
        if self.text is not None:
            atomic_write_text(self.path, self.text)


def plan_results(
    results_md: Path,
    summaries: Iterable[dict[str, Any]],
    link_prefix: str,
    climbs: Iterable[dict[str, Any]] = (),
) -> PlannedResults:
    """What :func:`append_results` would write, written by nothing yet."""
    try:
        text = read_whole_text(results_md, "results record") if results_md.exists() else _HEADER
    except ValueError as exc:
        raise ReportError(str(exc)) from None
    if not text.endswith("\n"):
        text += "\n"
    starts = list(_ENTRY.finditer(text))
    head = text[: starts[0].start()] if starts else text
    entries = {m.group(1): text[m.start() : (starts[i + 1].start() if i + 1 < len(starts) else len(text))]
               for i, m in enumerate(starts)}  # fmt: skip
    planned = PlannedResults(results_md, None)
    made = [(str(s["run_id"]), _entry(s, f"{link_prefix}/{s['_dir']}/summary.md")) for s in summaries]
    made += [(str(c["_dir"]), _climb_entry(c, f"{link_prefix}/{c['_dir']}/README.md")) for c in climbs]
    for run_id, text_of_entry in made:
        entry = text_of_entry + "\n"
        if run_id not in entries:
            planned.added.append(run_id)
        elif entries[run_id].rstrip("\n") != entry.rstrip("\n"):
            planned.rewritten.append(run_id)
        else:
            continue
        entries[run_id] = entry
    if planned.added or planned.rewritten:
        body = "".join(entries[k].rstrip("\n") + "\n\n" for k in sorted(entries))
        planned.text = head.rstrip("\n") + "\n\n" + body.rstrip("\n") + "\n"
    return planned


def append_results(
    results_md: Path, summaries: Iterable[dict[str, Any]], link_prefix: str
) -> tuple[list[str], list[str]]:
    """Add entries for runs not yet in ``results_md``, and rewrite those whose verified evidence now says
    something else (collected again), so the record never contradicts the evidence it links. Entries of runs
    whose evidence is not among ``summaries`` stay as they are. The run ids (added, rewritten)."""
    planned = plan_results(results_md, summaries, link_prefix)
    planned.write()
    return planned.added, planned.rewritten


_ORDER = (*_CAPABILITY.values(), *_ONE_HOST.values(), "KV handoff", "KV correctness", "Prefix-cache hit")


def _rank(capability: str) -> int:
    """Simple capabilities first, in the order of the table's story."""
    return next((i for i, name in enumerate(_ORDER) if capability.startswith(name)), len(_ORDER))


# The keys whose signature makes a hardware row a result: the repository's, each added by a maintainer in a
# reviewed commit (docs/run-directory.md says how).
ALLOWED_SIGNERS = Path("evidence/allowed_signers")
UNSIGNED = "unsigned"
REHEARSAL = "rehearsal"  # the platform label's first word for runs that claim no hardware
_UNVERIFIED_HEAD = (
    "**Unverified claims.** Hardware results whose bundle no key of `evidence/allowed_signers` signed: their "
    "verdict follows from their `data/`, but nothing shows that `data/` is what ran on that hardware "
    '(docs/run-directory.md, "what a bundle proves"). They are not results of this project until signed.'
)


def signed_cell(summary: dict[str, Any]) -> str:
    """``signed by <principal>`` when a key of the allowed signers signed the bundle, else ``unsigned``."""
    who = summary.get("_signed_by")
    return f"signed by {mdtext.text(who)}" if isinstance(who, str) and who else UNSIGNED


def is_hardware_claim(platform: str) -> bool:
    """Every platform label but a rehearsal's names hardware the run claims to have run on."""
    return not platform.startswith(REHEARSAL)


def verified_row(row: tuple[str, str, str, str, str]) -> bool:
    """A row of the results table itself: a rehearsal, or a hardware claim an allowed key signed."""
    return not is_hardware_claim(row[2]) or row[3].startswith("signed by ")


def role_hosts(summary: dict[str, Any]) -> set[str] | None:
    """The hosts the roles' own fingerprints name (sanitized names), or None where the run saved none."""
    if summary.get("fingerprint_source") != JOBS_FINGERPRINTS:
        return None
    fingerprints = summary.get("fingerprint")
    if not isinstance(fingerprints, dict):
        return None
    names = {f.get("hostname") for f in fingerprints.values() if isinstance(f, dict)}
    return {str(n) for n in names if n} or None


def capability_name(summary: dict[str, Any]) -> str:
    """The capability a run shows, as Markdown: its kind's name, said of one host where the roles' fingerprints
    name one (a two-node kind run on one machine is not a two-node result)."""
    kind = str(summary.get("kind"))
    hosts = role_hosts(summary)
    if kind in _ONE_HOST and hosts is not None and len(hosts) == 1:
        return _ONE_HOST[kind]
    return _CAPABILITY.get(kind, mdtext.text(summary.get("kind")))


def glance_rows(summaries: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """(capability, result, platform, run dir) rows, as Markdown (run-supplied text escaped): the latest run
    per capability and platform."""
    return [(c, r, p, d) for c, r, p, _, d in _glance_rows(summaries)]


def _glance_rows(summaries: list[dict[str, Any]]) -> list[tuple[str, str, str, str, str]]:
    """(capability, result, platform, signature, run dir) rows: :func:`glance_rows` with who signed."""
    rows: dict[tuple[str, str], tuple[str, str, str, str, str]] = {}
    for s in summaries:  # oldest first: later runs overwrite
        platform = mdtext.text(s.get("platform"))
        engine = mdtext.text(s.get("engine_profile"))
        signed = signed_cell(s)
        capability = f"{capability_name(s)} ({engine})"
        verdict = mdtext.text(str(s.get("verdict")).upper())
        rows[(capability, platform)] = (capability, f"{verdict}, {_requests(s)}", platform, signed, s["_dir"])
        if s.get("kind") == "disagg":
            for gate_ids, name in (
                # A real engine's own count of KV moved comes first; the mocker has only the worker-id split.
                (("nixl_transfers", "pd_split_responses"), "KV handoff prefill to decode"),
                (
                    ("kv_answer_equals_aggregated",),
                    "KV correctness: P/D answer equals aggregated at temperature 0",
                ),
                (
                    ("decode_external_prefix_hits", "repeat_kv_hit_rate_max", "decode_prefix_hits"),
                    "Prefix-cache hit on decode for a repeated prompt",
                ),
            ):
                judged = (
                    g for g in map(lambda i: _gate(s, i), gate_ids) if g is not None and g["verdict"] != "n/a"
                )
                gate = next(judged, None)
                if gate is not None:
                    value = round(gate["value"], 3) if isinstance(gate["value"], float) else gate["value"]
                    result = mdtext.text(f"{str(gate['verdict']).upper()} ({gate['signal']} = {value})")
                    rows[(f"{name} ({engine})", platform)] = (
                        f"{name} ({engine})",
                        result,
                        platform,
                        signed,
                        s["_dir"],
                    )
    return sorted(rows.values(), key=lambda row: (_rank(row[0]), row[0], row[2]))


_HEAD = ["| capability | result | platform | signature | evidence |", "|---|---|---|---|---|"]
_CELL = re.compile(r"(?<!\\)\|")  # a cell border: a | that mdtext did not escape
_LINK = re.compile(r"^\[[^\]]*\]\((.*)/[^/]+/summary\.md\)$")


def _existing_rows(glance: str) -> list[tuple[str, str, str, str, str]]:
    """The rows of a glance block as the README holds it (either table; a row of the older four-column table
    is unsigned), the last cell the evidence link as written."""
    rows = []
    for line in glance.splitlines():
        cells = [c.strip() for c in _CELL.split(line.strip())]
        if len(cells) < 6 or cells[0] or cells[-1] or line.startswith(("|---", "| capability |")):
            continue
        cells = cells[1:-1]
        if len(cells) == 4:
            cells.insert(3, UNSIGNED)
        if len(cells) == 5 and _LINK.match(cells[4]):
            rows.append((cells[0], cells[1], cells[2], cells[3], cells[4]))
    return rows


def glance_table(summaries: list[dict[str, Any]], link_prefix: str, existing: str = "") -> str:
    """The glance block: the results table, then (when there is one) the unverified claims' table. ``existing``
    (the block the README holds now) is merged: its rows whose evidence lies under another root than
    ``link_prefix`` stay unless a summary here draws a row of the same capability and platform."""
    made = {
        (c, p): (c, r, p, s, f"[{d}]({link_prefix}/{d}/summary.md)")
        for c, r, p, s, d in _glance_rows(summaries)
    }
    for row in _existing_rows(existing):
        link = _LINK.match(row[4])
        if link is not None and link.group(1) != link_prefix:
            made.setdefault((row[0], row[2]), row)
    ordered = sorted(made.values(), key=lambda row: (_rank(row[0]), row[0], row[2]))
    verified = [row for row in ordered if verified_row(row)]
    unverified = [row for row in ordered if not verified_row(row)]
    out = list(_HEAD) + ["| " + " | ".join(row) + " |" for row in verified]
    if not verified:
        out.append("| (no verified result yet) | | | | |")
    if unverified:
        out += ["", _UNVERIFIED_HEAD, "", *_HEAD]
        out += ["| " + " | ".join(row) + " |" for row in unverified]
    return "\n".join(out) + "\n"


def current_glance(readme: Path) -> str:
    """The glance block the README holds now ('' when it has none)."""
    text = _readme_text(readme)
    begin, end = text.find(GLANCE_BEGIN), text.find(GLANCE_END)
    return text[begin + len(GLANCE_BEGIN) : end] if 0 <= begin < end else ""


README_MAX_BYTES = 4 << 20  # the README is tens of KiB: a device or a runaway file is refused, named


def _readme_text(readme: Path) -> str:
    try:
        return read_whole_text(readme, "README", README_MAX_BYTES)
    except FileNotFoundError as exc:
        raise ReportError(f"{readme}: cannot be read: {exc.strerror}") from None
    except ValueError as exc:
        raise ReportError(str(exc)) from None


def readme_with(readme: Path, table: str) -> str | None:
    """The README with ``table`` between the glance markers, or None when it already shows it; ReportError
    when the README cannot be read or lacks the markers."""
    text = _readme_text(readme)
    begin, end = text.find(GLANCE_BEGIN), text.find(GLANCE_END)
    if begin < 0 or end < begin:
        raise ReportError(f"{readme} lacks the markers {GLANCE_BEGIN} ... {GLANCE_END} (in that order)")
    new = text[: begin + len(GLANCE_BEGIN)] + "\n" + table + text[end:]
    return None if new == text else new


def write_readme(readme: Path, text: str) -> None:
    atomic_write_text(readme, text)


def update_readme(readme: Path, table: str) -> bool:
    """Replace the text between the glance markers; True when the README changed."""
    new = readme_with(readme, table)
    if new is None:
        return False
    write_readme(readme, new)
    return True
