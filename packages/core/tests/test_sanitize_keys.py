"""Which keys hold secrets: credentials named token are redacted, measurements of text tokens are not, and a
redaction never turns JSON into something that is not JSON.

``fixtures/aiperf/profile_export_aiperf.json`` is aiperf 0.13.0's ``profile_export_aiperf.json`` as a benchmark
of a rehearsal run wrote it (the same file as the launchers' fixture): the sanitizer once took its
``time_to_first_token``, ``time_to_second_token`` and ``time_to_first_output_token`` for secrets and wrote
``"time_to_first_token": <redacted:secret>`` in place of the object's opening brace.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from atomdyn_core.sanitize import Sanitizer, sanitize

AIPERF_EXPORT = Path(__file__).parent / "fixtures" / "aiperf" / "profile_export_aiperf.json"
SECRET = "Zq8vR2mW5tY7uI0pXc3"  # no pattern of its own: only its key can hide it
REDACTED = "<redacted:secret>"

# aiperf's metrics, each an object of unit and statistics, as the export writes them (two-space indent).
AIPERF_LINES = """\
  "time_to_first_token": {
    "unit": "ms",
    "avg": 87.43752532812499,
    "p50": 80.9413965,
  "time_to_second_token": {
  "time_to_first_output_token": {
  "output_token_throughput": {
    "unit": "tokens/sec",
    "avg": 1447.1109910791527
  "output_token_count": {
  "input_sequence_length": {
    "unit": "tokens",
  "total_token_throughput": {
  "input_token_throughput": {
  "tokens_in_flight": {
  "output_token_throughput_per_user": {
      "time_to_first_token": 200.0,
      "inter_token_latency": 20.0
    "cli_command": "aiperf profile --streaming --goodput 'time_to_first_token:200 inter_token_latency:20'"
""".splitlines()

# The same measurements as other tools and logs write them: YAML, key=value, flags, camel case.
METRIC_LINES = [
    "time_to_first_token: 81.04",
    'time_to_first_token: {"unit": "ms", "avg": 12.3}',
    '{"time_to_first_token": {"unit": "ms", "avg": 12.3, "p50": 11.9}, "request_count": {"avg": 64.0}}',
    '{"metric": "time_to_second_token", "time_to_second_token": "0.37 ms"}',
    "time_to_first_output_token=81.04ms",
    "tokens_per_second=1447.1 output_tokens_per_second: 396.9 prefill_tokens_per_second=12895.3",
    "prefill_token_throughput: 12895.3 decode_token_throughput=1330.5 output_token_count=64",
    "--time-to-first-token 200 --goodput time_to_first_token:200",
    '{"timeToFirstToken": "81 ms", "msPerToken": "1.0 ms", "first_token": "Hello", "inter_token": "0.9 ms"}',
    '{"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": null}',
]

# Credential keys: every one must lose its value, in JSON, environment, YAML and command-line forms.
SECRET_KEYS = [
    "token",
    "api_token",
    "access_token",
    "hf_token",
    "HF_TOKEN",
    "auth_token",
    "bearer_token",
    "refresh_token",
    "id_token",
    "x-auth-token",
    "NGC_API_KEY",
    "VAULT_TOKEN",
    "CI_JOB_TOKEN",
    "CONSUL_HTTP_TOKEN",
    "apiToken",
    "session.token",
]


def _forms(key: str) -> list[str]:
    flag = key.lower().replace("_", "-").replace(".", "-")
    return [
        json.dumps({key: SECRET}),
        json.dumps({"auth": {key: SECRET}, "n": 1}, indent=2),
        f"{{'{key}': '{SECRET}'}}",
        f"export {key}={SECRET}",
        f"{key}={SECRET} python -m dynamo.frontend",
        f'{key}="{SECRET}"',
        f"{key}: {SECRET}",
        f"python -m dynamo.frontend --{flag} {SECRET} --port 8000",
        f'curl -H "{key}: {SECRET}" http://127.0.0.1:8000/v1/models',
    ]


@pytest.mark.parametrize("line", [line for line in AIPERF_LINES + METRIC_LINES], ids=str)
def test_measurements_of_tokens_keep_their_values(line: str) -> None:
    assert sanitize(line) == line


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_credential_keys_lose_their_values_in_every_form(key: str) -> None:
    for line in _forms(key):
        out = sanitize(line)
        assert SECRET not in out, line
        assert REDACTED in out, line
        assert sanitize(out) == out


def test_the_token_itself_and_its_flag() -> None:
    assert sanitize('{"token": "abc123def456"}') == '{"token": "<redacted:secret>"}'
    assert (
        sanitize("huggingface-cli login --token xyz789") == "huggingface-cli login --token <redacted:secret>"
    )
    assert sanitize("HF_TOKEN=abc123def456") == "HF_TOKEN=<redacted:secret>"
    assert sanitize("NGC_API_KEY=nvkey12345") == "NGC_API_KEY=<redacted:secret>"


def test_an_aiperf_export_keeps_every_figure_and_stays_json() -> None:
    raw = AIPERF_EXPORT.read_text()
    original = json.loads(raw)
    out = Sanitizer().sanitize(raw)
    assert REDACTED not in out
    sanitized = json.loads(out)
    assert sanitized.keys() == original.keys()
    for key, value in original.items():
        if key not in {"input_config", "run_info"}:  # the model's path, the frontend's address: the site's
            assert sanitized[key] == value, key
    for metric in ("time_to_first_token", "time_to_second_token", "time_to_first_output_token"):
        assert sanitized[metric]["unit"] == "ms" and sanitized[metric]["count"] == 64
    assert sanitized["input_config"]["slos"] == {"time_to_first_token": 200.0, "inter_token_latency": 20.0}
    assert sanitize(out) == out


def test_an_export_damaged_by_the_old_rule_is_left_as_it_is() -> None:
    """Committed evidence holds the old redaction: sanitizing it again changes nothing (verify's fixed point)."""
    line = '  "time_to_first_token": <redacted:secret>'
    assert sanitize(line) == line


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"credentials": {"kind": "svc", "password": SECRET}}, {"credentials": REDACTED}),
        ({"api_token": {"value": SECRET, "expires_in": 3600}, "n": 2}, {"api_token": REDACTED, "n": 2}),
        # "auth" means a secret itself (issue 36): the object it holds is redacted whole, still JSON
        ({"auth": {"token": [SECRET, "x]y{z"]}, "ok": True}, {"auth": REDACTED, "ok": True}),
        ({"login": {"token": [SECRET, "x]y{z"]}, "ok": True}, {"login": {"token": REDACTED}, "ok": True}),
        (
            {"token": 5, "id_token": True, "refresh_token": None},
            {"token": 5, "id_token": True, "refresh_token": None},
        ),
        ({"token": {}, "hf_token": []}, {"token": {}, "hf_token": []}),
        ({"password": f'a"b\\c {SECRET}'}, {"password": REDACTED}),
        ([{"secret": SECRET}, {"secret": 7}], [{"secret": REDACTED}, {"secret": 7}]),
    ],
)
def test_a_redacted_json_value_is_a_json_string(doc: Any, expected: Any) -> None:
    for indent in (None, 1, 2):
        text = json.dumps(doc, indent=indent)
        out = sanitize(text)
        parsed = json.loads(out)
        if indent is None:  # on one line an object or array a secret key holds is replaced whole
            assert parsed == expected and SECRET not in out


def test_a_pretty_printed_secret_object_stays_json_and_its_secret_members_are_hidden() -> None:
    """Lines are sanitized one by one: the opening brace stays, and each member is judged by its own key."""
    doc = {
        "credentials": {"kind": "svc", "password": SECRET},
        "time_to_first_token": {"unit": "ms", "avg": 1.5},
    }
    out = json.loads(sanitize(json.dumps(doc, indent=2)))
    assert out == {
        "credentials": {"kind": "svc", "password": REDACTED},
        "time_to_first_token": {"unit": "ms", "avg": 1.5},
    }


def _document(rng: random.Random, depth: int) -> Any:
    keys = [
        "token",
        "api_token",
        "password",
        "secret",
        "time_to_first_token",
        "output_token_count",
        "unit",
        "n",
    ]
    if depth == 0 or rng.random() < 0.3:
        return rng.choice([SECRET, f"{SECRET}}}]", 12.5, 3, True, None, "", "ms", 'q"uo}te'])
    if rng.random() < 0.3:
        return [_document(rng, depth - 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(keys): _document(rng, depth - 1) for _ in range(rng.randint(0, 4))}


def test_sanitized_json_is_always_json() -> None:
    rng = random.Random(20261201)
    for _ in range(400):
        doc = _document(rng, 4)
        for indent in (None, 1, 2):
            text = json.dumps(doc, indent=indent)
            out = sanitize(text)
            json.loads(out)  # raises where a redaction broke the document
            assert sanitize(out) == out
