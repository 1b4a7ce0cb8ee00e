"""``timeline.jsonl``: the events as they happened (submission, first good response, requests done, failures)."""

from __future__ import annotations

from collections import deque

from atomdyn_launchers.contract.rundir import parse_requests_done
from atomdyn_launchers.evidence.readers.base import Reader, Signals, jsonl

_MAX_EVENTS = 5000


def read_timeline(signals: Signals) -> None:
    path = signals.run_dir / "timeline.jsonl"
    if not path.exists():
        for name in (
            "timeline.complete",
            "timeline.startup_s",
            "timeline.requests_total",
            "timeline.requests_ok",
            "timeline.submitted_roles",
        ):
            signals.absent(name, "timeline.jsonl is missing")
        signals.set("timeline.backwards", 0)
        signals.set("timeline.corrupt_lines", 0)
        return
    first: dict[str, float] = {}
    done: tuple[int, int] | None = None
    submitted: set[str] = set()  # roles whose job was submitted
    tail: deque[str] = deque(maxlen=6)
    shown = 0
    backwards = 0
    last: float | None = None
    for number, text, record in jsonl(path, signals):
        event, t = record.get("event"), record.get("t")
        if not isinstance(event, str) or not isinstance(t, int | float) or isinstance(t, bool):
            continue
        # Events are appended as they happen (docs/run-directory.md): a time before the one above, or before
        # 1970, is a timeline that does not make sense.
        if t < 0 or (last is not None and t < last):
            backwards += 1
            if backwards <= 4:
                signals.excerpt(
                    "timeline.nonsense", f"timeline.jsonl:{number}: {text} <- before the event above it"
                )
        last = float(t) if last is None else max(last, float(t))
        first.setdefault(event, float(t))
        if event == "submitted" and isinstance(record.get("role"), str):
            submitted.add(record["role"])
        if event == "requests_done" and done is None:
            done = parse_requests_done(record.get("detail"))
        if len(signals.events) < _MAX_EVENTS:
            signals.events.append({"t": float(t), "event": event, "role": record.get("role")})
        if shown < 24:
            signals.excerpt("timeline", f"timeline.jsonl: {text}")
            shown += 1
        else:
            tail.append(f"timeline.jsonl: {text}")
    if tail:
        signals.excerpt("timeline", "timeline.jsonl: ...")
        signals.excerpts["timeline"].extend(tail)
    needed = ("submitted", "first_good_response", "requests_done")
    lacking = [e for e in needed if e not in first]
    signals.set("timeline.complete", not lacking)
    if lacking:
        signals.problems.append(f"timeline.jsonl lacks {', '.join(lacking)}")
    if "submitted" in first and "first_good_response" in first:
        signals.set("timeline.startup_s", round(first["first_good_response"] - first["submitted"], 3))
    else:
        signals.absent("timeline.startup_s", "timeline.jsonl lacks submitted or first_good_response")
    signals.set("timeline.submitted_roles", len(submitted))
    if done is not None:
        signals.set("timeline.requests_ok", done[0])
        signals.set("timeline.requests_total", done[1])
    else:
        for name in ("timeline.requests_total", "timeline.requests_ok"):
            signals.absent(name, "timeline.jsonl has no requests_done event with an ok/total detail")
    signals.set("timeline.failed_events", sum(1 for e in signals.events if e["event"] == "failed"))
    signals.set("timeline.backwards", backwards)
    signals.set("timeline.corrupt_lines", signals.corrupt_count.get(path.name, 0))
    for line in signals.corrupt.get(path.name, []):
        signals.excerpt("timeline.nonsense", line)


READER = Reader(
    "timeline.jsonl",
    frozenset({
        "timeline.complete", "timeline.startup_s", "timeline.requests_total", "timeline.requests_ok",
        "timeline.submitted_roles", "timeline.failed_events", "timeline.backwards", "timeline.corrupt_lines",
    }),
    read_timeline,
)  # fmt: skip
