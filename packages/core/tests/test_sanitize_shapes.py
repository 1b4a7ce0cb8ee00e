"""Secrets by shape and data kept intact (issue 36, item 4), beyond the line cases of sanitize_corpus/shapes.txt
and keep-data.txt: a lone private key header, JSON documents, the allow-list of safe values, whole files."""

from __future__ import annotations

import json
from pathlib import Path

from test_sanitize_corpus import SHAPES

from atomdyn_core.sanitize import Sanitizer, sanitize, sanitize_file_to

RANDOM = "Zq8vN2xT4pL9wR7mK3bY6cH1dF5gJ0sA"


def test_a_lone_private_key_header_blanks_only_its_block() -> None:
    text = (
        "starting\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n"
        "INFO 12:00:01 ttft_ms=41.7 prompt_tokens=37\nINFO 12:00:02 done in 00:01:02:03:04:05\n"
    )
    out = sanitize(text)
    assert "MIIEvQ" not in out
    assert out == (
        "starting\n<redacted:private-key>\n"
        "INFO 12:00:01 ttft_ms=41.7 prompt_tokens=37\nINFO 12:00:02 done in 00:01:02:03:04:05\n"
    )


def test_a_lone_private_key_header_in_a_file_blanks_only_its_block(tmp_path: Path) -> None:
    src = tmp_path / "raw.log"
    src.write_text("a\n-----BEGIN RSA PRIVATE KEY-----\n" + "line of the log\n" * 5000)
    dest = tmp_path / "clean.log"
    sanitize_file_to(src, dest, block_bytes=1024)
    assert dest.read_text() == "a\n<redacted:private-key>\n" + "line of the log\n" * 5000


def test_a_key_inside_a_json_string_is_redacted_and_the_document_stays_json() -> None:
    key = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n"
    doc = {"type": "service_account", "private_key": key, "client_email": "loader@example.com"}
    out = json.loads(sanitize(json.dumps(doc, indent=1)))
    assert "MIIEvQ" not in json.dumps(out) and out["type"] == "service_account"


def test_every_held_out_line_as_a_json_value_stays_json_and_hides_its_secrets() -> None:
    for case in SHAPES:
        sanitizer = Sanitizer(**case.known)  # type: ignore[arg-type]
        text = json.dumps({"line": case.raw, "n": 1}, indent=1, sort_keys=True, ensure_ascii=False)
        out = json.loads(sanitizer.sanitize(text))  # a redaction that broke the document raises here
        assert out["n"] == 1
        for value in case.hidden:
            assert value not in out["line"], (case.where, value, out["line"])


def test_a_high_entropy_token_is_redacted_unless_named_safe() -> None:
    line = f"upload token {RANDOM} accepted\n"
    assert Sanitizer().sanitize(line) == "upload token <redacted:token> accepted\n"
    assert Sanitizer(safe=[RANDOM]).sanitize(line) == line


def test_the_projects_own_fields_keep_their_digests_and_ids() -> None:
    for line in (
        '"run_id": "20261201T130556Z-disagg-vllm-cpu",\n',
        '"lock_digest": "sha256:6a57c59e650bda0e4f7428628f8f30613dbee38bf7a1d1eaea24121d75c43d2c",\n',
        f'"sha256": "{RANDOM}",\n',
    ):
        assert sanitize(line) == line


def test_identifiers_and_paths_are_no_high_entropy_tokens() -> None:
    for line in (
        "vllm.engine.async_llm_engine.AsyncLLMEngineDeadError: Qwen2TokenizerFast failed\n",
        "loading /tmp/models/Qwen2.5-0.5B-Instruct/model-00001-of-00002.safetensors\n",
        'time_to_first_token_seconds_bucket{le="0.25",model_name="Qwen/Qwen3-0.6B"} 17\n',
        "commit 5fd1d34bd3c12a8a5b1d34bd3c12a8a5b1d34bd3 request cmpl-8a5b1c2d3e4f4a6b8c0d1e2f3a4b5c6d\n",
    ):
        assert sanitize(line) == line


def test_the_short_secret_words_keep_what_they_do_not_hide() -> None:
    for line in (
        "PWD=/tmp/atomdyn-run\n",
        "OLDPWD=/tmp\n",
        "--seed 42 --key /etc/munge/munge.key\n",
        "auth: required\n",
        '{"key": "vllm-cpu-tiny-qwen3-bf16-4166b23594e2407b", "sort_key": "a1b2c3"}\n',
        "bypass=1 passed=12\n",
    ):
        assert sanitize(line) == line, line
