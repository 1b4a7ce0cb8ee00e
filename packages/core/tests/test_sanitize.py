"""The sanitizer against a corpus of realistic log lines, one for every kind of secret and identity it must hide."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from atomdyn_core.sanitize import Sanitizer, node_names, sanitize, sanitize_file
from atomdyn_core.sanitize.sanitizer import strip_colours

# (line as a cluster would write it, the sanitized line, the substrings that must never survive)
CORPUS: list[tuple[str, str, list[str]]] = [
    (
        "export HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
        "export HF_TOKEN=<redacted:hf-token>",
        ["hf_AbCd"],
    ),
    (
        "huggingface_hub: using token hf_ZyXwVuTsRqPoNmLkJiHgFeDcBa9876543210 from HF_HOME",
        "huggingface_hub: using token <redacted:hf-token> from HF_HOME",
        ["hf_ZyX"],
    ),
    (
        "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "AWS_ACCESS_KEY_ID=<redacted:aws-access-key> AWS_SECRET_ACCESS_KEY=<redacted:secret>",
        ["AKIAIOSFODNN7", "wJalrXUtnFEMI"],
    ),
    (
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "aws_secret_access_key = <redacted:secret>",
        ["wJalr"],
    ),
    (
        "GOOGLE_API_KEY: AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
        "GOOGLE_API_KEY: <redacted:gcp-api-key>",
        ["AIzaSy"],
    ),
    (
        "DefaultEndpointsProtocol=https;AccountName=acmeml;AccountKey=q1w2e3r4t5y6u7i8o9p0==;EndpointSuffix=core",
        "DefaultEndpointsProtocol=https;AccountName=account-1;AccountKey=<redacted:cloud-key>;EndpointSuffix=core",
        ["q1w2e3", "acmeml"],  # the storage account's name identifies the site too
    ),
    (
        "NGC_API_KEY=nvapi-Qx7Lw2Vb9Kp4Rt6Ym1Zs3Hd8Jf5Gc0Nn",
        "NGC_API_KEY=<redacted:api-key>",
        ["nvapi-Qx7"],
    ),
    (
        "git clone https://ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8@github.com/acme/private.git",
        "git clone https://<redacted:github-token>@github.com/acme/private.git",
        ["ghp_A1b2"],
    ),
    (
        'curl -H "Authorization: Bearer 9f8e7d6c5b4a39281706f5e4d3c2b1a0" http://10.42.7.19:8000/v1/models',
        'curl -H "Authorization: Bearer <redacted:bearer-token>" http://192.0.2.1:8000/v1/models',
        ["9f8e7d6c", "10.42.7.19"],
    ),
    (
        "Authorization: Basic YWxpY2U6aHVudGVyMlNlY3JldA==",
        "Authorization: Basic <redacted:basic-auth>",
        ["YWxpY2U6"],
    ),
    (
        "token=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.Sf1KxwRJSMeKKF2QT4fwpMeJf36POk6yJV",
        "token=<redacted:jwt>",
        ["eyJhbGci"],
    ),
    (
        "ETCD_ENDPOINTS=http://etcdadmin:S3cr3t-Pass@10.42.7.19:2379",
        "ETCD_ENDPOINTS=http://user-1:<redacted:password>@192.0.2.1:2379",
        ["S3cr3t", "etcdadmin", "10.42.7.19"],
    ),
    (
        "postgresql://svc_dynamo:pa55w0rd!@db.acme-corp.internal:5432/runs",
        "postgresql://user-1:<redacted:password>@host-1:5432/runs",
        ["pa55w0rd", "svc_dynamo", "acme-corp"],
    ),
    (
        'cluster.env: SLURM_PASSWORD="correct horse battery" and "api_key": "abc123def456ghi"',
        'cluster.env: SLURM_PASSWORD="<redacted:secret>" and "api_key": "<redacted:secret>"',
        ["correct horse", "abc123def"],
    ),
    (
        "python -m dynamo.frontend --hf-token hf_QwErTyUiOpAsDfGhJkLzXcVbNm123456789",
        "python -m dynamo.frontend --hf-token <redacted:hf-token>",
        ["hf_QwE"],
    ),
    (
        "slurmstepd: error: *** JOB 48213 ON gpu-mi355x-017 CANCELLED AT 2026-11-30T00:12:34 DUE TO TIME LIMIT ***",
        "slurmstepd: error: *** JOB 48213 ON host-1 CANCELLED AT 2026-11-30T00:12:34 DUE TO TIME LIMIT ***",
        ["gpu-mi355x-017"],
    ),
    (
        "slurmstepd-gpu-mi355x-017: error: *** STEP 48213.0 ON gpu-mi355x-017 CANCELLED AT 2026-11-30T00:52:11 ***",
        "slurmstepd-host-1: error: *** STEP 48213.0 ON host-1 CANCELLED AT 2026-11-30T00:52:11 ***",
        ["gpu-mi355x-017"],
    ),
    (
        "\x1b[2m2026-11-30T00:52:10.824513Z\x1b[0m \x1b[32m INFO\x1b[0m manager: TCP request plane "
        "\x1b[3mhost\x1b[0m\x1b[2m=\x1b[0m10.65.208.1 \x1b[3mport\x1b[0m\x1b[2m=\x1b[0mOS-assigned",
        "2026-11-30T00:52:10.824513Z  INFO manager: TCP request plane host=192.0.2.1 port=OS-assigned",
        ["10.65.208.1", "\x1b["],
    ),
    (
        "start frontend env HOME=/scratch/u/runs/r1/home/decode/frontend python -m dynamo.frontend",
        "start frontend env HOME=/cluster/path-1/r1/home/decode/frontend python -m dynamo.frontend",
        ["/scratch/u/runs"],
    ),
    (
        "redis://:Rd1sPa55@cache01:6379/0 and http://gpu-mi355x-017:8000/health and https://github.com/ai-dynamo",
        "redis://:<redacted:password>@host-1:6379/0 and http://host-2:8000/health and https://github.com/ai-dynamo",
        ["Rd1sPa55", "cache01", "gpu-mi355x-017"],
    ),
    (
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBGVt3xABCAC7\n-----END PGP PRIVATE KEY BLOCK-----",
        "<redacted:private-key>",
        ["lQOYBGVt"],
    ),
    (
        "   NodeList=gpu-mi355x-017 BatchHost=gpu-mi355x-017 UserId=jdoe(41027) Account=acme-ml-prj",
        "   NodeList=host-1 BatchHost=host-1 UserId=user-1(41027) Account=account-1",
        ["gpu-mi355x", "jdoe", "acme-ml"],
    ),
    (
        "#SBATCH --account=acme-ml-prj --partition=mi355x-prod --qos=high-prio -w gpu-mi355x-018",
        "#SBATCH --account=account-1 --partition=partition-1 --qos=qos-1 -w host-1",
        ["acme-ml", "mi355x-prod", "high-prio", "gpu-mi355x-018"],
    ),
    (
        "jdoe@gpu-mi355x-018:~$ ls /home/jdoe/dynamo-atom /lustre/orgs/acme-ml/models/Qwen3-8B",
        "user-1@host-1:~$ ls /home/user-1/dynamo-atom /cluster/path-1/models/Qwen3-8B",
        ["jdoe", "gpu-mi355x", "acme-ml"],
    ),
    (
        '{"role": "decode", "node_requested": "gpu-mi355x-018", "node_ran": "gpu-mi355x-018", "exit_code": 0}',
        '{"role": "decode", "node_requested": "host-1", "node_ran": "host-1", "exit_code": 0}',
        ["gpu-mi355x"],
    ),
    (
        "(EngineCore_DP0 pid=4242) INFO 11-30 00:12:34 [nixl_connector.py:802] side channel "
        "VLLM_NIXL_SIDE_CHANNEL_HOST=10.42.7.20 port 20097 on gpu-mi355x-017.cluster.acme.internal",
        "(EngineCore_DP0 pid=4242) INFO 11-30 00:12:34 [nixl_connector.py:802] side channel "
        "VLLM_NIXL_SIDE_CHANNEL_HOST=192.0.2.1 port 20097 on host-1",
        ["10.42.7.20", "cluster.acme.internal"],
    ),
    (
        "ucx rocm GID[1] fe80::690:81ff:fe3f:7e10%ionic_0 and 2603:c020:4005:8a00:9c1b::21 dev ib0 mac 06:90:81:3f:7e:10",
        "ucx rocm GID[1] 2001:db8::1 and 2001:db8::2 dev ib0 mac 02:00:00:00:00:01",
        ["fe80::690", "2603:c020", "06:90:81"],
    ),
    (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAq8Lw2y7c3zV0xA9\nbX8s1kQ==\n-----END RSA PRIVATE KEY-----",
        "<redacted:private-key>",
        ["MIIEowIBAAKCAQEA"],
    ),
    (
        '"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0B\\n-----END PRIVATE KEY-----\\n"',
        '"private_key": "<redacted:private-key>\\n"',
        ["MIIEvQIB"],
    ),
]

# Lines with nothing to hide: must come out unchanged (no false positives that would garble the evidence).
BENIGN = [
    "2026-11-30T00:12:34.123456Z  INFO dynamo_llm::http::service::openai: http response sent status=200 "
    "prefill_worker_id=7587888281234 decode_worker_id=7587888281999",
    '{"index": 3, "status": 200, "ok": true, "completion_tokens": 32, "prompt_tokens": 371, "kv_hit_rate": 0.96}',
    "(EngineCore_DP0 pid=4242) INFO 11-30 00:12:35 [metrics.py:103] KVConnectorType: NIXL, KV Transfer metrics: "
    "Num successful transfers=4, Avg xfer time (ms)=1.588, Avg MB per transfer=2.25",
    "nixlUcxContext::memReg VRAM_SEG on 0x7f3a2c000000 len=2359296; loaded model Qwen/Qwen3-8B from config.json",
    "AMDSMI Tool: 25.5.1+41065ee | AMDSMI Library version: 25.5.1.0 | ROCm version: 7.0.1 | fw_ver: 1.117.1.63",
    "frontend listening on 0.0.0.0:8000, metrics on 127.0.0.1:9090 and [::1]:9091",
    'vllm:nixl_bytes_transferred_sum{engine="0",model_name="Qwen/Qwen3-8B"} 2.359296e+06',
    "python -m dynamo.vllm --disaggregation-mode prefill --tensor-parallel-size 1 --max-num-seqs 32",
    "Endpoint service completed unexpectedly for endpoint: dyn://atomdyn-20261130t005209z.backend.generate",
    "run as root with USER=root; mkdir -p /tmp/atomdyn-x; at 00:33:04 took 12:34.5 minutes; a[::2] std::string",
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",
]


@pytest.mark.parametrize(("raw", "expected", "hidden"), CORPUS, ids=[c[1][:40] for c in CORPUS])
def test_corpus_line(raw: str, expected: str, hidden: list[str]) -> None:
    out = sanitize(raw)
    assert out == expected
    for secret in hidden:
        assert secret not in out


@pytest.mark.parametrize("line", BENIGN)
def test_benign_lines_are_unchanged(line: str) -> None:
    assert sanitize(line) == line


def test_whole_corpus_hides_everything_and_is_idempotent_and_deterministic() -> None:
    text = "\n".join(raw for raw, _, _ in CORPUS) + "\n" + "\n".join(BENIGN)
    out = sanitize(text)
    for _, _, hidden in CORPUS:
        for secret in hidden:
            assert secret not in out
    assert sanitize(out) == out
    assert sanitize(text) == out
    for line in BENIGN:
        assert line in out


def test_json_stays_json() -> None:
    doc = {
        "use_token": True,
        "token_budget": 1.5,
        "api_key": None,
        "password": "hunter2",
        "host": "gpu-a17",
        "addresses": ["10.1.2.3", "fe80::1"],
        "private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQ\n-----END PRIVATE KEY-----\n",
    }
    out = json.loads(sanitize(json.dumps(doc, indent=1)))
    assert out == {
        "use_token": True,
        "token_budget": 1.5,
        "api_key": None,
        "password": "<redacted:secret>",
        "host": "host-1",
        "addresses": ["192.0.2.1", "2001:db8::1"],
        "private_key": "<redacted:private-key>\n",
    }


def test_one_sanitizer_keeps_placeholders_stable_across_texts() -> None:
    s = Sanitizer()
    first = s.sanitize("prefill on node=gpu-a17 (10.1.2.3), decode on node=gpu-a18 (10.1.2.4)")
    second = s.sanitize("later: 10.1.2.4 answered, gpu-a17 went away")
    assert first == "prefill on node=host-1 (192.0.2.1), decode on node=host-2 (192.0.2.2)"
    assert second == "later: 192.0.2.2 answered, host-1 went away"  # learned names are replaced when bare


def test_known_values_are_replaced_where_no_pattern_would_find_them() -> None:
    s = Sanitizer(hosts=["mi355-a"], users=["jdoe"], paths=["/srv/teams/acme/shared"], accounts=["acme-ml"])
    out = s.sanitize("mi355-a ready; jdoe owns /srv/teams/acme/shared/runs/x; charged to acme-ml")
    assert out == "host-1 ready; user-1 owns /cluster/path-1/runs/x; charged to account-1"


def test_plain_word_accounts_are_replaced_only_in_slurm_contexts() -> None:
    s = Sanitizer(accounts=["rehearsal", "acme-ml"])
    out = s.sanitize("platform: rehearsal (CPU) --partition=rehearsal --account=acme-ml, billed to acme-ml")
    assert out == "platform: rehearsal (CPU) --partition=partition-1 --account=account-2, billed to account-2"


def test_a_name_first_seen_bare_is_replaced_when_learned_later_in_the_same_text() -> None:
    text = "started by jdoe\nHOME=/home/jdoe"
    assert sanitize(text) == "started by user-1\nHOME=/home/user-1"


def test_many_addresses_stay_distinct() -> None:
    text = " ".join(f"10.9.{i // 200}.{i % 200 + 1}" for i in range(600))
    placeholders = sanitize(text).split()
    assert len(set(placeholders)) == 600
    assert placeholders[0] == "192.0.2.1" and placeholders[254] == "198.51.100.1"


def test_sanitize_file_streams_and_survives_binary_garbage(tmp_path: Path) -> None:
    log = tmp_path / "prefill.worker.log"
    payload = (
        b"boot on node=gpu-a17 as jdoe\n" + bytes(range(256)) * 64 + b"\nHF_TOKEN=hf_" + b"x" * 34 + b"\n"
    )
    log.write_bytes(payload + b"gpu-a17 done, home /home/jdoe\n" * 3000)  # several blocks
    out = io.StringIO()
    sanitize_file(log, out)
    text = out.getvalue()
    assert "gpu-a17" not in text and "jdoe" not in text and "hf_xxx" not in text
    assert text.startswith("boot on node=host-1 as user-1\n")
    assert text.count("host-1 done, home /home/user-1\n") == 3000
    assert "\ufffd" in text  # undecodable bytes are shown as such, not dropped silently


def test_spaced_key_before_prose_is_kept_but_spaced_keys_still_hide_hosts() -> None:
    text = "host = gpu-node-07 port = 22\nnode: mi355x-a17 is down\nhost = mi355x-b3 is up\nNODE = Connection traversing PCIe"
    out = sanitize(text)
    assert (
        "gpu-node-07" not in out and "mi355x-a17" not in out and "mi355x-b3" not in out and "port = 22" in out
    )
    assert out.endswith("NODE = Connection traversing PCIe")


def test_node_lists_name_each_node() -> None:
    assert node_names("gpu-[01-03,07],login-02 rack[1-2]-n[8-9]", strict=True) == [
        "gpu-01",
        "gpu-02",
        "gpu-03",
        "gpu-07",
        "login-02",
        "rack1-n8",
        "rack1-n9",
        "rack2-n8",
        "rack2-n9",
    ]
    assert node_names("odd[name]", strict=True) == [
        "odd[name]"
    ]  # brackets that hold no range: a literal name


def test_a_configured_node_list_too_large_is_an_error_but_a_logged_one_is_kept_whole() -> None:
    with pytest.raises(ValueError, match=r"node list 'gpu-\[0-99999999\]' names more than"):
        Sanitizer(hosts=["gpu-[0-99999999]"])
    out = sanitize("NodeList=gpu-[0-99999999] State=RUNNING")
    assert out == "NodeList=host-1 State=RUNNING"


def test_a_node_list_in_a_log_teaches_its_nodes() -> None:
    out = sanitize("NodeList=gpu-[01-02,07]\ngpu-07 drained, gpu-02 up, gpu-04 unknown")
    assert out == "NodeList=host-1\nhost-4 drained, host-3 up, gpu-04 unknown"


def test_one_identifier_keeps_its_placeholder_in_every_notation() -> None:
    """A MAC, a GUID and an address written as different tools write them are the same placeholder."""
    text = (
        "ether 06:90:81:3f:7e:10 is 06-90-81-3F-7E-10 is 0690.813f.7e10\n"
        "Node GUID: 0x0c42a10300fa1234 node_guid 0c42:a103:00fa:1234 "
        "link/infiniband 80:00:00:48:fe:80:00:00:00:00:00:00:0c:42:a1:03:00:fa:12:34\n"
        "ip-10-20-30-42 is 10.20.30.42 is host_10.20.30.42\n"
    )
    assert sanitize(text) == (
        "ether 02:00:00:00:00:01 is 02-00-00-00-00-01 is 0200.0000.0001\n"
        "Node GUID: 0x0200000000000001 node_guid 0200:0000:0000:0001 "
        "link/infiniband 80:00:00:48:fe:80:00:00:00:00:00:00:02:00:00:00:00:00:00:01\n"
        "ip-192-0-2-1 is 192.0.2.1 is host_192.0.2.1\n"
    )


def test_json_with_cloud_and_hardware_ids_stays_json() -> None:
    doc = {
        "Account": "123456789012",
        "subscriptionId": "3f2b1c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d",
        "gpus": ["GPU-5f3c2a10-8f2b-4e5c-9d1a-0b2c3d4e5f60"],
        "serial": "1654922001234",
        "machine-id": "3f1c2b4a5d6e7f8091a2b3c4d5e6f708",
        "headers": {"Authorization": "Token 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"},
        "cmd": "sshpass -p 'Sup3r S3cret' ssh root@127.0.0.1",
    }
    assert json.loads(sanitize(json.dumps(doc, indent=1))) == {
        "Account": "aws-account-1",
        "subscriptionId": "subscription-1",
        "gpus": ["GPU-uuid-1"],
        "serial": "serial-1",
        "machine-id": "machine-id-1",
        "headers": {"Authorization": "Token <redacted:token>"},
        "cmd": "sshpass -p '<redacted:password>' ssh root@127.0.0.1",
    }


# Dynamo 1.3.0's vllm worker (ensure_side_channel_host, logger.info("Using existing
# VLLM_NIXL_SIDE_CHANNEL_HOST=%s", ...)) and the line after it, as the H200 P/D run
# 20261204T183531Z-disagg-vllm wrote them into logs/prefill.prefill.log, colours and all.
SIDE_CHANNEL_H200 = (
    "\x1b[2m2026-12-04T18:36:00.256451Z\x1b[0m \x1b[32m INFO\x1b[0m \x1b[2margs.ensure_side_channel_host\x1b[0m"
    "\x1b[2m:\x1b[0m Using existing VLLM_NIXL_SIDE_CHANNEL_HOST=127.0.0.1\n"
    "\x1b[2m2026-12-04T18:36:00.256563Z\x1b[0m \x1b[32m INFO\x1b[0m \x1b[2margs.create_kv_events_config\x1b[0m"
    "\x1b[2m:\x1b[0m Using user-provided kv_events_config KVEventsConfig(enable_kv_cache_events=True, "
    "publisher='zmq', endpoint='tcp://*:21008', replay_endpoint=None, buffer_steps=10000, hwm=100000, "
    "max_queue_size=100000, topic='')\n"
)
# vLLM's attention line further down the same log: "Using" after the target made it "host-1 FLASH_ATTN".
FLASH_ATTN_H200 = (
    "(EngineCore pid=3765) INFO 12-04 18:36:26 [cuda.py:378] Using FLASH_ATTN attention backend out of potential "
    "backends: ['FLASH_ATTN', 'TRITON_ATTN', 'FLEX_ATTENTION'].\n"
)
# The same line from the CPU P/D run 20261204T193220Z-disagg-vllm-cpu (logs/prefill.prefill.log), whose
# launcher set the variable to the node's address.
SIDE_CHANNEL_CPU = (
    "\x1b[2m2026-12-04T19:32:27.831143Z\x1b[0m \x1b[32m INFO\x1b[0m \x1b[2margs.ensure_side_channel_host\x1b[0m"
    "\x1b[2m:\x1b[0m Using existing VLLM_NIXL_SIDE_CHANNEL_HOST=10.65.208.1\n"
)


def test_a_log_records_target_ending_in_host_names_no_host() -> None:
    """The tracing target args.ensure_side_channel_host is a function, "Using" the message's first word: it was
    learned as a host, and every "Using" of the log became host-N."""
    s = Sanitizer()
    out = s.sanitize(SIDE_CHANNEL_H200)
    assert out == strip_colours(SIDE_CHANNEL_H200)
    assert s.sanitize(FLASH_ATTN_H200) == FLASH_ATTN_H200
    assert s.known_count() == (0, 0)


def test_the_side_channel_line_still_hides_the_host_it_names() -> None:
    s = Sanitizer()
    assert s.sanitize(SIDE_CHANNEL_CPU) == (
        "2026-12-04T19:32:27.831143Z  INFO args.ensure_side_channel_host: "
        "Using existing VLLM_NIXL_SIDE_CHANNEL_HOST=192.0.2.1\n"
    )
    # The variable set to the node's name (the address of the CPU line's node replaced by a name, the rest
    # of Dynamo's line as logged): that name is learned and hidden wherever it stands.
    named = strip_colours(SIDE_CHANNEL_CPU).replace("10.65.208.1", "gpu-a17")
    assert s.sanitize(named) == (
        "2026-12-04T19:32:27.831143Z  INFO args.ensure_side_channel_host: "
        "Using existing VLLM_NIXL_SIDE_CHANNEL_HOST=host-1\n"
    )
    assert s.sanitize("GPU-A17") == "host-1"
