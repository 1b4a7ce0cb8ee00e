"""The sanitizer's patterns and :class:`Sanitizer`, which applies them line by line (the reference path).

Identifying values become stable placeholders (``host-1``, ``user-1``, ``account-1``, ``/cluster/path-1``,
documentation-range addresses ``192.0.2.N`` / ``2001:db8::N``) so the evidence still reads: the same host is the
same placeholder everywhere within one :class:`Sanitizer`. Secrets become ``<redacted:KIND>`` markers.
Numbering follows first appearance (known values first, in the order given), so the output is a pure function
of the input and the known values: no clock, no randomness, no environment.
Placeholders are never re-mapped, so sanitizing sanitized text changes nothing.
"""

from __future__ import annotations

import ipaddress
import itertools
import math
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

__all__ = ["NamesState", "NumberingState", "Sanitizer", "node_names", "sanitize", "strip_colours"]

# Names that identify nothing: never learned as users or hosts, never replaced as bare words.
_SYSTEM_USERS = frozenset(
    {
        "root",
        "nobody",
        "slurm",
        "munge",
        "etcd",
        "daemon",
        "admin",
        "user",
        "ubuntu",
        "debian",
        "git",
        "www-data",
    }
)
_KEEP_HOSTS = frozenset(
    {"localhost", "localhost.localdomain", "none", "null", "true", "false", "auto", "any"}
)
_PUBLIC_HOSTS = (
    "github.com",
    "githubusercontent.com",
    "huggingface.co",
    "example.com",
    "example.org",
    "example.net",
)
# Network interfaces (eth0, ens3f0np0, ib0, ionic_0, ...): a prefix and a number, so that host names that merely
# begin with the same letters (login-02, broker-1, ibex-03) are not taken for interfaces.
_INTERFACE = re.compile(
    r"(?:lo|(?:eth|ens|enp|eno|enx|ib|ibp|ibs|bond|docker|veth|br|virbr|wlan|wlp|rdma|ionic_?|mlx\d_|bnxt_re)\d[\w.-]*)\Z",
    re.IGNORECASE,
)
# The numbered placeholders (kinds of value that are identifiers, not secrets): never numbered again.
_NUMBERED_KINDS = (
    *("host", "user", "account", "partition", "qos", "cluster", "group"),
    *("instance", "aws-account", "project", "subscription", "tenant", "resource-group", "ocid"),
    *("uuid", "serial", "machine-id", "boot-id"),
)
_PLACEHOLDER = re.compile(rf"(?:{'|'.join(_NUMBERED_KINDS)})-\d+\Z")
# Groups that identify nothing (id(1)'s groups=, Slurm's AllowGroups=), and Slurm's words for every one.
_SYSTEM_GROUPS = frozenset(
    {
        *(
            "root",
            "wheel",
            "sudo",
            "adm",
            "admin",
            "users",
            "staff",
            "nogroup",
            "nobody",
            "daemon",
            "bin",
            "sys",
        ),
        *(
            "video",
            "render",
            "docker",
            "audio",
            "input",
            "kvm",
            "plugdev",
            "dialout",
            "cdrom",
            "floppy",
            "tty",
        ),
        *("disk", "lp", "mail", "lxd", "systemd-journal", "slurm", "munge", "rdma", "infiniband"),
        *("ALL", "NONE", "all", "none", "normal"),
    }
)

_TLDS = (
    "com|net|org|io|ai|dev|cloud|app|edu|gov|mil|internal|local|localdomain|lan|corp|intra|cluster|hpc|"
    "co|uk|de|fr|jp|cn|kr|ca|au|eu|ch|nl|se|info|biz|tw|sg|ru|pl|ac|nz|tech|xyz|site"
)
# File extensions: after a known host name they make a file name (gpu-a17.log), not a domain.
_FILE_EXTENSIONS = (
    "log|out|err|txt|json|jsonl|ya?ml|toml|cfg|conf|ini|sh|py|csv|tsv|png|svg|md|prom|pid|lock|sock|"
    "gz|tgz|tar|zip|xz|zst|bz2|html|tmp|bak|old|service|slurm|sbatch"
)
_NODE_RANGE = re.compile(r"\[([\d,-]+)\]")
_NODE_LIST_ITEM = re.compile(r"(?:[^,\[\s]|\[[^\]]*\])+")  # commas inside brackets belong to a range
_DISTINCT_LABEL = re.compile(r"[\d-]")  # a host label with a digit or hyphen is no plain word
_MAX_NODE_NAMES = 65536

# --- secrets: (kind, pattern); the whole match (or group "v" where present) becomes <redacted:kind> ---
# A block's body is base64 lines (and the Proc-Type/DEK-Info headers of an encrypted key), its lines apart by line
# ends or, inside a JSON string, by "\n": a header without its END line takes those lines and stops at the first
# line of anything else (a lone BEGIN line blanks nothing after it). A body that runs to the end of the text may
# go on in the next block read (lines.open_key_block).
_KEY_LINE = (
    r"(?:\r?\n|\\n)[ \t]*(?:[A-Za-z0-9+/=]+|(?:Proc-Type|DEK-Info|Comment):[^\r\n\\\"]*)?[ \t]*"
    r"(?=\r?\n|\\n|\"|\Z)"
)
_PRIVATE_KEY = re.compile(
    r"-----BEGIN (?P<kind>[A-Z0-9 ]*)PRIVATE KEY(?P<block>(?: BLOCK)?)-----[ \t]*"
    rf"(?:(?:{_KEY_LINE})*?(?:\r?\n|\\n)?[ \t]*-----END (?P=kind)PRIVATE KEY(?P=block)-----|(?:{_KEY_LINE})*)"
)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>\b[a-zA-Z][\w+.-]*://)(?P<user>[^:/@\s<>]*):(?P<pw>[^@/\s]+)@")
# A user alone before a URL's host (a Sentry DSN's key, git's https://TOKEN@host): a user's placeholder.
_URL_USER = re.compile(r"(?P<scheme>\b[a-zA-Z][\w+.-]*://)(?P<user>[^:/@\s<>\"']+)@")
# Network schemes only: Dynamo's dyn://namespace.component.endpoint names no host.
_URL_HOST = re.compile(
    r"(?P<k>\b(?:https?|wss?|tcp|udp|grpc|etcd|redis|rediss|nats|amqp|postgres(?:ql)?|mysql|mongodb|ftp|sftp|ssh)"
    r"://(?:[^@/\s]*@)?)(?P<v>[A-Za-z][\w.-]*)(?=[:/\s\"'),]|$)"
)
# (kind, literals of which one must be in the line (lower-case ones are looked for case-blind), pattern)
_TOKENS: tuple[tuple[str, tuple[str, ...], re.Pattern[str]], ...] = (
    ("hf-token", ("hf_",), re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")),
    # A secret access key beside its key id (the credentials CSV: id,secret), before the id is redacted.
    (
        "aws-secret-key",
        ("AKIA", "ASIA"),
        re.compile(r"(?P<k>\b(?:AKIA|ASIA)[0-9A-Z]{16}[,;:\s]+)(?P<v>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"),
    ),
    ("aws-access-key", ("AKIA", "ASIA"), re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    # `aws configure set [profile.]aws_secret_access_key VALUE`, or the key and its value apart by whitespace.
    (
        "secret",
        ("aws_secret_access_key", "aws_session_token", "aws_security_token"),
        re.compile(
            r"(?i)(?P<k>(?<![\w-])(?:[\w-]+\.)*aws_(?:secret_access_key|session_token|security_token)[ \t]+)"
            r"(?P<v>[A-Za-z0-9/+=]{16,})"
        ),
    ),
    ("gcp-api-key", ("AIza",), re.compile(r"\bAIza[0-9A-Za-z_\-]{35}")),
    (
        "github-token",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})\b"),
    ),
    ("slack-token", ("xox",), re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}")),
    ("api-key", ("sk-", "nvapi-"), re.compile(r"\b(?:sk|nvapi)-[A-Za-z0-9_-]{20,}")),
    ("jwt", ("eyJ",), re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("bearer-token", ("bearer",), re.compile(r"(?i)\b(?P<k>bearer\s+)(?P<v>[A-Za-z0-9._~+/=-]{8,})")),
    ("basic-auth", ("basic",), re.compile(r"(?i)(?P<k>\bbasic\s+)(?P<v>[A-Za-z0-9+/]{12,}={0,2})")),
    # Any other scheme (Token, ApiKey, SSWS, ...) or none; the credentials hold a digit ("Authorization: required").
    (
        "token",
        ("authorization",),
        re.compile(
            r"(?i)(?P<k>\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:(?!digest\b)[A-Za-z][\w-]*[ \t]+)?)"
            r"(?P<v>(?=[^\s\"',;]*\d)[A-Za-z0-9._~+/-]{8,}=*)(?=$|[\s\"',;])"
        ),
    ),
    # crypt(3) hashes: $1$ MD5, $5$ and $6$ SHA, $2b$ bcrypt, $y$ yescrypt, $apr1$ Apache, $argon2id$.
    (
        "password-hash",
        ("$",),
        re.compile(
            r"(?<![\w$])\$(?:1|2[abxy]?|5|6|7|y|gy|apr1|sha1|md5|argon2(?:id|i|d))\$(?:[\w./=,+-]*\$){1,4}[\w./+=-]{16,}"
        ),
    ),
    # Cookie and Set-Cookie headers: the whole value (every name=value pair, the attributes with them); inside
    # a JSON string it ends at the string's quote.
    (
        "cookie",
        ("cookie",),
        re.compile(
            r"(?i)(?P<k>(?<![\w-])(?:set-)?cookie[ \t]*:[ \t]*)(?P<v>[^\s\"][^\r\n\"]*?)(?=[ \t]*(?:[\r\n\"]|$))"
        ),
    ),
    # Webhooks whose path is the credential: Slack's /services/T.../B.../..., Discord's /api/webhooks/ID/TOKEN.
    (
        "webhook",
        ("/services/", "webhooks/"),
        re.compile(
            r"(?P<k>/services/|/webhooks/)(?P<v>T[A-Z0-9]{6,}/B[A-Z0-9]{6,}/[A-Za-z0-9]{12,}|\d{6,}/[\w-]{20,})"
        ),
    ),
    # Vendor formats: package indexes (PyPI, npm), Vault, GitLab, Stripe, Groq, Databricks.
    (
        "token",
        ("pypi-", "hvs.", "hvb.", "hvr.", "glpat-", "npm_", "whsec_", "k_live_", "k_test_", "gsk_", "dapi"),
        re.compile(
            r"(?<![\w.-])(?:pypi-AgE[A-Za-z0-9_-]{16,}|hv[sbr]\.[A-Za-z0-9_-]{20,}|glpat-[A-Za-z0-9_-]{20,}|"
            r"npm_[A-Za-z0-9]{36,}|whsec_[A-Za-z0-9+/=]{24,}|[sr]k_(?:live|test)_[A-Za-z0-9]{16,}|"
            r"gsk_[A-Za-z0-9]{20,}|dapi[0-9a-f]{32})(?![\w-])"
        ),
    ),
    (
        "cloud-key",
        ("key=", "sig=", "signature="),
        re.compile(
            r"(?i)(?P<k>\b(?:AccountKey|SharedAccessKey|SharedAccessSignature|sig)=)(?P<v>[^;&\s\"']+)"
        ),
    ),
)
# High-entropy tokens no key names: a word of base64 or URL-safe characters holding a run of 16 or more letters,
# digits and "+" with a digit, both cases, a letter past f (hex is left alone: digests, commits and request ids are
# hex), and the character entropy of random text. Known-safe values (the run's id, digests it recorded) are
# given to the sanitizer (``safe``): an allow-list of values, not of shapes.
_ENTROPY_RUN = re.compile(r"[A-Za-z0-9+]{16,}")
# NATS nkey seeds (user, account, operator, server, cluster, curve): S, the type, 56 base32 characters (no lower
# case: the entropy rule passes them by). Looked for where _ENTROPY_RUN finds a run, as it does in a seed.
_NKEY_SEED = re.compile(r"(?<![\w-])S[UAONCXP][A-Z2-7]{56}(?![\w-])")
_PAST_F = re.compile(r"[g-zG-Z]")
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_+/%-")
_ENTROPY_MIN_BITS = 3.5  # per character, of the run (random base62 of 16 characters: about 3.9)
_ENTROPY_MIN_CHANGES = 0.4  # of the places where the kind of character may change, where it does
_SAFE_FIELD = re.compile(
    r"(?i)(?:sha256|sha512|digest|lock_digest|freeze_sha256|run_id|revision|commit)[\"']?\s*[:=]\s*[\"']?(?:sha256:)?\Z"
)


def _random_run(run: str) -> bool:
    """Whether a run of letters, digits and "+" reads as random: both cases, a digit, a letter past f, and
    the entropy of random text."""
    if not (
        any(c.isdigit() for c in run)
        and any(c.isupper() for c in run)
        and any(c.islower() for c in run)
        and any(c.isalpha() and c.lower() > "f" for c in run)
    ):
        return False
    size = len(run)
    # Identifiers are words (AsyncLLMEngine2DeadError, Qwen2TokenizerFast): the kind of character (upper, lower,
    # digit) changes at a few places; in random text at most.
    kinds = [0 if c.isdigit() else 1 if c.isupper() else 2 for c in run]
    changes = sum(a != b for a, b in itertools.pairwise(kinds))
    if changes < _ENTROPY_MIN_CHANGES * (size - 1):
        return False
    counts: dict[str, int] = {}
    for c in run:
        counts[c] = counts.get(c, 0) + 1
    bits = -sum(n / size * math.log2(n / size) for n in counts.values())
    return bits >= _ENTROPY_MIN_BITS


_TOKEN_HINTS = tuple(sorted({g.lower() for _, guards, _ in _TOKENS for g in guards}))
_SECRET_WORDS = ("pass", "secret", "token", "key", "credential", "pwd", "auth", "cookie", "seed", "sig")
# Cheap pre-checks: each starts with a literal, which the regex engine scans for quickly.
_TLD_HINT = re.compile(rf"\.(?i:{_TLDS})(?![\w-])")
_IPV4_HINT = re.compile(r"\.\d{1,3}\.\d{1,3}(?!\d)")
_PATH_HINT = re.compile(
    r"/(?:lustre|gpfs|scratch|nfs|fsx|mnt|shared|projects?|proj|data|datasets|beegfs|cephfs|work|vast|weka)/"
)
# What each Slurm pattern needs in the line (lower case): its flag, its KEY=, its JSON key, the command.
_SLURM_WORDS = {
    "account": (
        "--account",
        "account=",
        "accountname=",
        "accounts=",
        '"account"',
        "srun",
        "sbatch",
        "salloc",
    ),
    "partition": (
        "--partition",
        "partition=",
        "partitionname=",
        "partitions=",
        '"partition"',
        "srun",
        "sbatch",
        "salloc",
    ),
    "qos": ("--qos", "qos=", '"qos"'),
    "group": ("groupid=", "allowgroups=", "denygroups="),
    "cluster": ("clustername=", "cluster_name=", '"cluster_name"'),
}
_HOST_WORDS = ("host", "node", "master_addr", "-w", "-x")


def _any_of(words: Iterable[str]) -> re.Pattern[str]:
    """Whether a text holds one of ``words``: one search, not one substring test per word."""
    return re.compile("|".join(re.escape(w) for w in sorted(set(words), key=len, reverse=True)))


_TOKEN_HINT = _any_of(_TOKEN_HINTS)
_SECRET_WORD = _any_of(_SECRET_WORDS)
_SLURM_WORD = {kind: _any_of(words) for kind, words in _SLURM_WORDS.items()}
_ANY_SLURM_WORD = _any_of(w for words in _SLURM_WORDS.values() for w in words)
_HOST_WORD = _any_of(_HOST_WORDS)
# Key names that mean a secret (issue 36): their last word, or a word they end in (PGPASSWORD, authToken). The
# short words (pass, pwd, auth, cookie, seed, key, sig) count only as a key's own last word (_secret_word).
_SECRET_KEY = (
    r"[A-Za-z0-9_.-]*?(?:password|passwd|passphrase|pass|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|"
    r"private[_-]?key(?:[_-]?id)?|credentials?|sshpass|auth|cookie|seed|signature|sig|key(?:[_-]?data)?)"
)
# A double-quoted value ends at a quote no backslash escapes (JSON writes a password's quote as \"), or else at
# the next quote ("C:\dir\" on a command line).
_SECRET_ASSIGNMENT = re.compile(
    rf"(?i)(?P<k>(?<![\w/-])(?P<q>\\?[\"']?)(?P<name>{_SECRET_KEY})(?P=q)\s*[=:]\s*)"
    r"(?P<v>\\\"(?:[^\"\\\n]|\\[^\"\n])*\\\"|\"(?:[^\"\\\n]|\\.)*\"|\"[^\"\n]*\"|'[^'\n]*'|"
    r"(?:[^\s\"',;&\\]|\\(?![\"']))+)"
)
_SECRET_FLAG = re.compile(rf"(?i)(?P<k>--(?P<name>{_SECRET_KEY})\s+)(?P<v>[^\s-][^\s]*)")
# The option and its value as two items of a logged argument list: ['--db-password', 'VALUE'] (a held-out form).
_SECRET_FLAG_LISTED = re.compile(
    rf"(?i)(?P<k>(?P<q>[\"'])--(?P<name>{_SECRET_KEY})(?P=q),[ \t]*(?P=q))(?P<v>[^\s\"'\\-][^\"'\n]*?)(?=(?P=q))"
)
# A password quoted after the word in prose: "login failed for user 'svc' with password 'VALUE'" (held-out form).
_SECRET_IN_PROSE = re.compile(
    r"(?i)(?P<k>\bpass(?:word|wd|phrase)[ \t]+(?P<q>[\"']))(?P<v>[^\s\"'<][^\s\"']*)(?=(?P=q))"
)
# A .pgpass line, host:port:database:user:password, the password the rest of the line (held-out form); the
# database and user begin with a letter or are "*", so durations (00:01:02:03:04:05) are no such line.
_PGPASS = re.compile(
    r"(?m)^(?P<k>[\w.*-]+:(?:\d{1,5}|\*):[A-Za-z_*][\w.*-]*:[A-Za-z_*][\w.@*-]*:)(?P<v>[^\s<]\S*)$"
)
# A key ending in "token" names a credential (token, api_token, HF_TOKEN, x-auth-token, VAULT_TOKEN, CI_JOB_TOKEN)
# unless its words say which token of a text it times, counts or is: aiperf's time_to_first_token,
# time_to_second_token and time_to_first_output_token, first_token, ms_per_token, a tokenizer's eos_token. Matched
# against the key in snake case (timeToFirstToken is time_to_first_token). No list of credential qualifiers instead:
# every service names its own (VAULT_TOKEN, CONSUL_HTTP_TOKEN), and a key this misses is redacted, not leaked.
_MEASURED_TOKEN = re.compile(
    r"(?:^|[_.-])(?:time[_-]to[_-](?:[a-z0-9]+[_-])*?|(?:first|second|third|last)[_-](?:(?:output|input|prompt|"
    r"generated|decode|prefill)[_-])?|per[_-]|inter[_-]|(?:bos|eos|pad|unk|sep|cls|mask)[_-])token$"
)
_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_KEY_WORDS = re.compile(r"[a-z0-9]+")
# A key's last word that is, or ends in, a word meaning a secret (dbpassword, authtoken, secretkey).
_STRONG_SECRET_WORD = re.compile(
    r"(?:password|passwd|passphrase|secret|token|credentials?|apikey|accesskey|secretkey|privatekey|sshpass)\Z"
)
_SHORT_SECRET_WORDS = frozenset({"pass", "pwd", "auth", "cookie", "seed", "key", "sig", "signature"})
# Keys ending in "key" that name no secret: a sort, cache or routing key, a public key.
_NOT_SECRET_KEYS = frozenset(
    {
        "sort",
        "cache",
        "partition",
        "routing",
        "primary",
        "foreign",
        "lookup",
        "hash",
        "group",
        "shard",
        "metric",
    }
    | {
        "label",
        "prefix",
        "kv",
        "dict",
        "map",
        "index",
        "public",
        "pub",
        "hot",
        "unique",
        "composite",
        "foreign",
    }
)
# Values that the short words hold without being secrets: a path (PWD=/tmp/x, key=/etc/munge/munge.key), an
# etcd key (key=v1/instances/...), a plain word (auth: required).
_PATH_VALUE = re.compile(r"[/~]|[a-z0-9_.-]+(?:/[a-z0-9_.-]*)+\Z")
_PLAIN_VALUE = re.compile(r"[a-z]+(?:[_-][a-z]+)*\Z")

# --- credentials on command lines ---
# A value: one word, or a quoted one; inside a JSON string its quotes are escaped (\"...\"), and a backslash
# before a quote ends it (the JSON string's own quote): the document stays JSON.
_WORD = r"\\\"(?:[^\"\\\n]|\\[^\"\n])*\\\"|\"[^\"\n]*\"|'[^'\n]*'|(?:[^\s\"'|;&\\]|\\(?![\"']))+"
_NAME = r"[A-Za-z_][\w.-]*"  # a user name
_SAME_COMMAND = r"(?:[ \t]+[^\s|;&]+)*?[ \t]+"  # the command's words before the option (none past | ; &)
_LOGINS = r"\b(?:docker|podman|nerdctl|buildah|skopeo|oras|helm registry) login"
# (what the value is, literals of which one must be in the line (lower case), pattern: "v" replaced, "k" kept).
# Case matters: sshpass -P, mysql -P and ipmitool -p name no password.
_COMMAND_CREDENTIALS: tuple[tuple[str, tuple[str, ...], re.Pattern[str]], ...] = (
    ("password", ("sshpass",), re.compile(rf"(?P<k>\bsshpass(?:[ \t]+-[vV])*[ \t]+-p[ \t]*)(?P<v>{_WORD})")),
    # -p alone makes the client ask: a password on the command line is attached to it (-pX)
    (
        "password",
        ("mysql", "mariadb"),
        re.compile(rf"(?P<k>\b(?:mysql|mariadb)[\w-]*{_SAME_COMMAND}-p)(?P<v>{_WORD})"),
    ),
    (
        "user",
        ("mysql", "mariadb"),
        re.compile(rf"(?P<k>\b(?:mysql|mariadb)[\w-]*{_SAME_COMMAND}-u[ \t]*)(?P<v>{_NAME})"),
    ),
    (
        "password",
        ("login",),
        re.compile(rf"(?P<k>{_LOGINS}{_SAME_COMMAND}-p(?:[ \t]+|=)?)(?P<v>{_WORD})"),
    ),
    (
        "user",
        ("login",),
        re.compile(rf"(?P<k>{_LOGINS}{_SAME_COMMAND}-u(?:[ \t]+|=)?)(?P<v>{_NAME})"),
    ),
    (
        "password",
        ("redis-cli",),
        re.compile(rf"(?P<k>\bredis-cli{_SAME_COMMAND}(?:-a|--pass)[ \t]+)(?P<v>{_WORD})"),
    ),
    ("user", ("redis-cli",), re.compile(rf"(?P<k>\bredis-cli{_SAME_COMMAND}--user[ \t]+)(?P<v>{_NAME})")),
    ("password", ("ipmitool",), re.compile(rf"(?P<k>\bipmitool{_SAME_COMMAND}-P[ \t]*)(?P<v>{_WORD})")),
    ("user", ("ipmitool",), re.compile(rf"(?P<k>\bipmitool{_SAME_COMMAND}-U[ \t]*)(?P<v>{_NAME})")),
    (
        "password",
        ("pass:",),
        re.compile(rf"(?P<k>(?<![\w-])-pass(?:in|out)?[ \t]+pass:)(?P<v>{_WORD})"),
    ),  # openssl
    # wget --user=NAME, --username NAME (pip's --user takes no value: "--user NAME" alone is no user)
    (
        "user",
        ("--user",),
        re.compile(rf"(?P<k>(?<![\w-])(?:--user(?:name)?=|--username[ \t]+))(?P<v>{_NAME})(?![\w.@:-])"),
    ),
)
_NETRC_HEAD = r"(?<![\w-])(?:machine[ \t]+[^\s\"']+[ \t]+|default[ \t]+)"
_NETRC: tuple[tuple[str, tuple[str, ...], re.Pattern[str]], ...] = (
    (
        "password",
        ("password",),
        re.compile(
            rf"(?P<k>(?:{_NETRC_HEAD}(?:(?:login|account)[ \t]+[^\s\"']+[ \t]+)*|^[ \t]*)password[ \t]+)"
            r"(?P<v>[^\s\"']+)(?=[ \t]*(?:$|[\s\"']))"
        ),
    ),
    ("user", ("login",), re.compile(rf"(?P<k>{_NETRC_HEAD}login[ \t]+)(?P<v>{_NAME})(?![^\s\"'])")),
)
_COMMAND_CREDENTIALS += _NETRC
# USER:PASSWORD as one word: etcdctl --user, curl -u, ETCDCTL_USER= (quoted, the password may hold spaces).
_USER_PASSWORD = re.compile(
    r"(?P<k>(?:-(?<![\w-]-)(?:-user[= ]|u)|ETCDCTL_USER=)[ \t]*(?P<q>[\"']?))(?P<u>[A-Za-z0-9_][\w.@+-]*):"
    r"(?P<v>[^\s\"']+(?:[ \t]+[^\s\"']+)*?)(?=(?P=q)(?:[\s\"']|$))"
)

# --- users ---
# A user's directory, also below a shared file system's mount (/gpfs/fs1/home/U, /lustre/orgs/x/users/U,
# /scratch/U): the name after home, homes, Users, users, people or scratch.
_HOME = re.compile(
    r"(?P<k>(?<![\w.-])(?:/(?:lustre|gpfs|scratch|nfs|fsx|mnt|shared|projects?|proj|data|datasets|beegfs|cephfs|"
    r"work|vast|weka)(?:/[\w.-]+){0,2})?/(?:home|homes|Users|users|people|scratch)/)(?P<v>[A-Za-z_][\w.-]*)"
)
_HOME_HINT = re.compile(r"/(?:home|homes|users|people|scratch)/")
_USER_KEY = re.compile(
    r"(?P<k>(?<![\w-])(?P<q>[\"']?)(?:user|username|user_name|USER|LOGNAME|SLURM_JOB_USER|UserId|UserName|owner|"
    r"[Uu]id|UID|User ID)(?P=q)"
    r"\s*[=:]\s*(?P<q2>[\"']?))(?P<v>[A-Za-z_][\w.-]*)"
)
# user@host and e-mail addresses (jane.doe+ci@acme.com: the local part is the user).
_USER_AT_HOST = re.compile(
    r"(?<![\w.@/%+-])(?P<u>[A-Za-z0-9_](?:[A-Za-z0-9._%+-]{0,62}[A-Za-z0-9_%+-])?)@"
    r"(?P<h>[A-Za-z0-9][A-Za-z0-9.-]*[A-Za-z0-9])"
)
_NOT_HOST_AFTER_AT = re.compile(r"(?:sha\d+|md5|latest|main|master|head|v?\d[\w.+-]*)\Z", re.IGNORECASE)
_IPV4_ALONE = re.compile(
    r"\d{1,3}(?:\.\d{1,3}){3}\Z"
)  # user@10.1.2.3: the user goes, the address is the IPv4 pass's
# id(1): uid=41027(jdoe) gid=5001(acme-ml) groups=5001(acme-ml),27(sudo)
_ID_OUTPUT = re.compile(
    r"(?P<k>(?<![\w-])(?P<key>e?uid|e?gid|groups)=)(?P<v>\d+\([^()\s]*\)(?:,\d+\([^()\s]*\))*)"
)
_ID_ENTRY = re.compile(r"(?P<n>\d+)\((?P<name>[^()\s]*)\)")

# --- hosts ---
_HOST_KEY = re.compile(
    r"(?i)(?P<k>(?<![\w-])(?P<q>[\"']?)(?:[A-Za-z0-9]+_)*(?:host|hostname|nodename|nodelist|node_list|batchhost|"
    r"submit_host|master_addr|node_ran|node_requested|node|nodes)(?P=q)\s*[=:]\s*(?P<q2>[\"']?)|"
    r"(?<![\w-])(?:(?-i:-w|-x)|--nodelist|--exclude)[= ]\s*)"
    r"(?P<v>[A-Za-z][\w.-]*(?:\[[\d,-]+\])?(?:,[A-Za-z][\w.-]*(?:\[[\d,-]+\])?)*)"
)
# After `KEY = value`, a lowercase word that is not itself a key: the value begins prose (nvidia-smi's legend).
_PROSE_AFTER_SPACED_KEY = re.compile(r"[ \t]+[a-z]{2,}\b(?![\w.-]*\s*[=:])")
_PLAIN_WORD = re.compile(r"[A-Z]?[a-z]+")
_SPACED_KEY_END = re.compile(r"\s[=:]\s*\Z")
# A log record's target (Rust tracing's and Dynamo's Python records: "<time>  INFO args.ensure_side_channel_host:
# Using existing ..."): a level word, then a module path whose last part, a function, may end in "_host". What
# follows its colon is the message, not that key's value: its first word is no host where it is a plain word.
_RECORD_TARGET_BEFORE = re.compile(
    r"(?<![\w-])(?:TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|CRITICAL|FATAL)[ \t]+(?:[\w-]+(?:\.|::))*\Z"
)
_RECORD_TARGET_END = re.compile(r"\w:[ \t]+\Z")
_SLURM_ON_HOST = re.compile(r"(?P<k>\*\*\* (?:JOB|STEP) [\d.]+ ON |\bslurmstepd-)(?P<v>[\w.-]+?)(?=[\s:]|$)")
# A node list with no key before it (srun: error: gpu-[01-03]: ...): a name and a range of numbers in brackets.
_BARE_NODE_RANGE = re.compile(
    r"(?<![\w.\[-])(?P<head>[A-Za-z][\w.-]*?)\[(?P<first>\d+)[-,][\d,-]*\](?:[\w.-]|\[[\d,-]+\])*(?![\w\[-])"
)
_BARE_NODE_RANGE_HINT = re.compile(r"\[\d+[-,]")
_NODE_WORDS = frozenset({"node", "nodes", "nid", "cn", "gpu", "compute", "host", "worker"})
_SRUN_ERROR_ON = re.compile(r"(?P<k>\bsrun: error: )(?P<v>[A-Za-z][\w.-]*)(?=: tasks? \d)")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # terminal colours (Dynamo writes them even into files)
# Labels after the top-level-domain word belong to the name too (login-02.cluster.acme), file extensions do not.
_FQDN = re.compile(
    rf"(?<![\w.-])(?:[A-Za-z0-9](?:[A-Za-z0-9-]{{0,61}}[A-Za-z0-9])?\.)+(?i:{_TLDS})"
    rf"(?:\.(?!(?i:{_FILE_EXTENSIONS})(?![\w-]))[A-Za-z][A-Za-z0-9-]*)*(?![\w-])"
)

# --- addresses ---
# (?<![\w.]) written after the first digit, where the regex engine skips quickly to digits.
# An address may stand inside a name after or before an underscore (host_10.20.30.41, 10.20.30.41_rank0).
_IPV4 = re.compile(r"\d(?<![A-Za-z0-9.]\d)\d{0,2}\.(?:\d{1,3}\.){2}\d{1,3}(?![A-Za-z0-9]|\.\d)")
# EC2's host names write it with dashes (ip-10-20-30-42): the same address, the same placeholder, in dashes.
_IPV4_DASHED = re.compile(r"(?<![\w.-])(?P<k>(?i:ip)[-_])(?P<v>\d{1,3}(?:-\d{1,3}){3})(?![\w-])")
_IPV4_DASHED_HINT = re.compile(r"(?i:p)[-_]\d{1,3}-\d{1,3}-")
# Up to eight groups (a ninth is a port written without brackets), an IPv4-mapped tail, a zone id. A match may
# start after a colon (eth0:fe80::1, peer:fd00::1): finditer takes the leftmost start, so no match begins inside
# a longer run of groups.
_IPV6 = re.compile(
    r"(?<![\w.])(?:[0-9A-Fa-f]{0,4}:){2,8}(?:(?:\d{1,3}\.){3}\d{1,3}(?![\d.])|[0-9A-Fa-f]{0,4})"
    r"(?:%\w+(?:\.\w+)*)?(?![\w:])"
)
_DOC_V6 = ipaddress.IPv6Network("2001:db8::/32")
_MAC = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2}(?![\w:])")
# Cheap tests before the look-behind patterns above (tried at every position): four groups after a colon.
_MAC_HINT = re.compile(r":[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}")
_IPV6_FULL_HINT = re.compile(r":(?:[0-9A-Fa-f]{1,4}:){5}")
_UUID = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
# The same addresses written by other tools: Windows (06-90-81-3F-7E-10), Cisco (0690.813f.7e10).
_MAC_DASHES = re.compile(r"(?<![\w-])(?:[0-9A-Fa-f]{2}-){5}[0-9A-Fa-f]{2}(?![\w-])")
_MAC_DASHES_HINT = re.compile(r"-[0-9A-Fa-f]{2}-[0-9A-Fa-f]{2}-[0-9A-Fa-f]{2}-")
_MAC_DOTS = re.compile(r"(?<![\w.:])[0-9A-Fa-f]{4}\.[0-9A-Fa-f]{4}\.[0-9A-Fa-f]{4}(?![\w.:])")
_MAC_DOTS_HINT = re.compile(r"\.[0-9A-Fa-f]{4}\.")
# An IPoIB link address (ip link: link/infiniband): 4 bytes of flags and QPN, the 8 of the GID prefix, the port
# GUID (replaced). The broadcast address's "GUID" is all 00 and ff bytes: kept.
_IB_LINK = re.compile(
    r"(?<![\w:])(?P<k>(?:[0-9A-Fa-f]{2}:){12})(?P<v>(?:[0-9A-Fa-f]{2}:){7}[0-9A-Fa-f]{2})(?![\w:])"
)
# A GUID as ibv_devinfo, rdma and sysfs write it: four groups of four hex digits, alone (an IPv6 address has more).
_GUID_QUADS = re.compile(r"(?<![\w:.])[0-9A-Fa-f]{4}(?::[0-9A-Fa-f]{4}){3}(?![\w:.])")
_GUID_QUADS_HINT = re.compile(r":[0-9A-Fa-f]{4}:[0-9A-Fa-f]{4}:")
_GUID_PLACEHOLDER_PREFIX = "02000000"
# GPU UUIDs by their tag: nvidia-smi (GPU-uuid, MIG-uuid), rocminfo (GPU- and 16 hex digits); not gpu-a17, a host.
_GPU_UUID = re.compile(
    rf"(?:GPU|MIG)-(?<![\w-]GPU-)(?<![\w-]MIG-)(?P<v>{_UUID}|[0-9A-Fa-f]{{16}})(?![\w-])"
)  # placeholders are 0200000000000001, ... (locally administered, as MACs)
# (kind, literals of which one must be in the line (lower case), pattern): group "v" is replaced, the rest kept.
# Hex identifiers are taken only by their key or their tag (GPU-, "H-), never a bare hex string.
_HARDWARE_IDS: tuple[tuple[str, tuple[str, ...], re.Pattern[str]], ...] = (
    # ibstat (Node GUID: 0x...), ibv_devinfo (node_guid:), rdma dev show, ibnetdiscover (switchguid=0x..(..))
    (
        "guid",
        ("guid",),
        re.compile(
            r"(?i:guid)[\"']?[ \t]*[:=]?[ \t]*[\"']?(?P<v>0x[0-9A-Fa-f]{16}|[0-9A-Fa-f]{16}|[0-9A-Fa-f]{4}(?::[0-9A-Fa-f]{4}){3})"
            r"(?![\w:])(?:\((?P<w>[0-9A-Fa-f]{1,16})\))?"
        ),
    ),
    ("guid", ('"h-', '"s-', '"r-'), re.compile(r"(?<=\")[HSR]-(?P<v>[0-9a-f]{16})(?=\")")),  # ibnetdiscover
    (
        "guid",
        ("\t",),
        re.compile(r"(?<![\w-])[a-z][a-z0-9_]*\d *\t(?P<v>[0-9a-f]{16})(?![\w:])"),
    ),  # ibv_devices
    # rocm-smi (Unique ID:), dmidecode and amd-smi (UUID:)
    (
        "uuid",
        ("unique",),
        re.compile(r"(?i:unique[ _]?id)[ \t]*[:=][ \t]*[\"']?(?P<v>(?:0x)?[0-9A-Fa-f]{8,32})(?![\w-])"),
    ),
    (
        "uuid",
        ("uuid",),
        re.compile(rf"(?<![\w-])(?:UUID|Uuid)[\"']?[ \t]*[:=][ \t]*[\"']?(?P<v>{_UUID})(?![\w-])"),
    ),
    # nvidia-smi -q, dmidecode, smartctl, rocm-smi, amd-smi (PRODUCT_SERIAL:), lspci (Device Serial Number ..),
    # sysfs (product_serial): a value holding a digit ("Not Specified" is none)
    (
        "serial",
        ("serial",),
        re.compile(
            r"(?i:(?<![\w-])(?:[a-z]+_)*serial(?:[ _-]?(?:number|no|num))?[\"']?[ \t]*(?:[:=][ \t]*[\"']?|(?<=number)[ \t]+))"
            r"(?P<v>(?=[^\s\"',;]*\d)[A-Za-z0-9][\w.:/+-]{3,})"
        ),
    ),
    # hostnamectl (Machine ID:, Boot ID:), /etc/machine-id, journald (_MACHINE_ID=, _BOOT_ID=)
    (
        "machine-id",
        ("machine",),
        re.compile(
            r"(?i:(?<![\w-])_?machine[ _-]?id)[\"']?[ \t]*[:=][ \t]*[\"']?(?P<v>[0-9a-f]{32})(?![0-9A-Fa-f])"
        ),
    ),
    (
        "boot-id",
        ("boot",),
        re.compile(
            r"(?i:(?<![\w-])_?boot[ _-]?id)[\"']?[ \t]*[:=][ \t]*[\"']?(?P<v>[0-9a-f]{32})(?![0-9A-Fa-f])"
        ),
    ),
)
_KEEP_V4 = tuple(
    ipaddress.IPv4Network(n)
    for n in ("127.0.0.0/8", "0.0.0.0/32", "255.0.0.0/8", "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")
)
_VERSION_BEFORE = re.compile(
    r"(?i)(?:(?:version|ver|fw|firmware|driver|rev)[\s:=]*|[=<>!~]=)\Z"
)  # also pip's ==
_VERSION_AFTER = re.compile(r"-(?:py|cp)\d")  # a wheel's name: nvidia_cufft_cu12-11.2.1.3-py3-none-...
_V4_POOLS = ("192.0.2.", "198.51.100.", "203.0.113.")
# A four-part version (hipBLASLt 0.12.1.6, libibverbs 1.14.50.0, 2.21.5.1): a public-range dotted quad right after
# a name and a space, with no port or prefix length after it, unless the word before says address.
_VERSION_NAME_BEFORE = re.compile(r"(?<![\w.:/@=-])(?P<w>[A-Za-z][\w+.-]*)[ \t]+v?\Z")
_ADDRESS_WORDS = frozenset(
    {
        "from",
        "to",
        "at",
        "on",
        "via",
        "peer",
        "peers",
        "addr",
        "address",
        "ip",
        "ipv4",
        "inet",
        "host",
        "server",
    }
    | {
        "remote",
        "local",
        "client",
        "src",
        "dst",
        "source",
        "destination",
        "gateway",
        "gw",
        "dns",
        "nameserver",
    }
    | {
        "listen",
        "listening",
        "bind",
        "bound",
        "connect",
        "connecting",
        "connected",
        "endpoint",
        "node",
        "master",
    }
    | {
        "public",
        "private",
        "external",
        "internal",
        "route",
        "ping",
        "nslookup",
        "dig",
        "curl",
        "ssh",
        "telnet",
    }
    | {"accepted", "rejected", "by", "for", "with", "and", "or", "is", "was", "of", "unreachable", "reach"}
)
_NOT_PUBLIC_V4 = tuple(
    ipaddress.IPv4Network(n)
    for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16")
)
_ADDRESS_AFTER = re.compile(r"(?::\d|/\d)")
# An all-decimal MAC is a MAC only after words that say so (ip link's link/ether, ifconfig's HWaddr, "MAC"):
# 00:01:02:03:04:05 elsewhere is a duration or a timer.
_MAC_CONTEXT = re.compile(
    r"(?i)(?:ether|hwaddr|mac|lladdr|link/\w+|addr|address|bssid|permaddr|chaddr|brd)[\"']?[ \t]*[:=]?[ \t]*[\"']?\Z"
)

# --- cluster paths and Slurm identities ---
_CLUSTER_PATH = re.compile(
    r"(?<![\w.-])/(?:lustre|gpfs|scratch|nfs|fsx|mnt|shared|projects?|proj|data|datasets|beegfs|cephfs|work|vast|weka)"
    r"(?:/[^\s/\"':,;=)\]}]+){1,2}"
)
_SLURM_NAMES = r"[A-Za-z_][\w.-]*(?:,[A-Za-z_][\w.-]*)*"  # one name, or a list (AllowAccounts=a,b)
_SLURM_COMMAND = rf"\b(?:srun|sbatch|salloc){_SAME_COMMAND}"  # srun -A ACCOUNT -p PARTITION ...
_SLURM_KEYS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "account",
        re.compile(
            r"(?P<k>(?:--account[= ]|#SBATCH\s+-A\s+|(?<![\w-])(?:Account|account|AccountName|DefaultAccount|"
            r"AllowAccounts|DenyAccounts|SLURM_JOB_ACCOUNT|SLURM_ACCOUNT|SBATCH_ACCOUNT|ATOMDYN_ACCOUNT)=|"
            rf"\"account\"\s*:\s*\"|{_SLURM_COMMAND}-A[ \t]*))(?P<v>{_SLURM_NAMES})"
        ),
    ),
    (
        "partition",
        re.compile(
            r"(?P<k>(?:--partition[= ]|#SBATCH\s+-p\s+|(?<![\w-])(?:Partition|partition|PartitionName|Partitions|"
            r"SLURM_JOB_PARTITION|SBATCH_PARTITION|ATOMDYN_PARTITION)=|"
            rf"\"partition\"\s*:\s*\"|{_SLURM_COMMAND}-p[ \t]*))(?P<v>{_SLURM_NAMES})"
        ),
    ),
    (
        "qos",
        re.compile(
            r"(?P<k>(?:--qos[= ]|(?<![\w-])(?:QOS|QoS|qos|AllowQos|DenyQos|SLURM_JOB_QOS|SBATCH_QOS|ATOMDYN_QOS)=|"
            rf"\"qos\"\s*:\s*\"))(?P<v>{_SLURM_NAMES})"
        ),
    ),
    ("group", re.compile(rf"(?P<k>(?<![\w-])(?:GroupId|AllowGroups|DenyGroups)=)(?P<v>{_SLURM_NAMES})")),
    (
        "cluster",
        re.compile(
            r"(?P<k>(?:ClusterName=|SLURM_CLUSTER_NAME=|\"cluster_name\"\s*:\s*\"))(?P<v>[A-Za-z_][\w.-]*)"
        ),
    ),
)
# Rows of squeue, sacct and sinfo in their default formats: no key names the partition, account, user or nodes.
_SLURM_TIME = r"(?:\d+-)?\d+:\d\d(?::\d\d)?"
_SQUEUE_STATES = (
    "PD|R|CG|CD|CF|CA|F|TO|NF|PR|S|ST|RQ|RS|RV|SO|SE|SI|BF|OOM|DL|RD|RF|RH|PENDING|RUNNING|COMPLETING|COMPLETED|"
    "CONFIGURING|CANCELLED|FAILED|TIMEOUT|SUSPENDED|STOPPED|PREEMPTED|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|"
    "REQUEUED|RESIZING|REVOKED|SPECIAL_EXIT|SIGNALING|STAGE_OUT"
)
_SACCT_STATES = (
    "COMPLETED|RUNNING|FAILED|CANCELLED|PENDING|TIMEOUT|OUT_OF_ME(?:MORY)?|NODE_FAIL|PREEMPTED|REQUEUED|SUSPENDED|"
    "BOOT_FAIL|DEADLINE|RESIZING|REVOKED"
)
_SINFO_HINT = re.compile(r"[ \t](?:up|down|drain|inact)[ \t]")
_SLURM_ROWS: tuple[
    re.Pattern[str], ...
] = (  # squeue's and sacct's first (a row starts with a job id), sinfo's
    # JOBID PARTITION NAME USER ST TIME [TIME_LIMIT] NODES NODELIST(REASON)
    re.compile(
        r"[ \t]*\d+(?:_(?:\d+|\[[\d,%-]+\]))?(?:\+\d+)?[ \t]+(?P<partition>\S+)[ \t]+\S+[ \t]+(?P<user>\S+)[ \t]+"
        rf"(?:{_SQUEUE_STATES})[ \t]+(?:{_SLURM_TIME}|INVALID)(?:[ \t]+(?:{_SLURM_TIME}|UNLIMITED|INVALID|NOT_SET))?"
        r"[ \t]+\d+[ \t]+(?P<nodes>[^\s(]\S*)?"
    ),
    # JobID JobName Partition Account AllocCPUS State ExitCode (a step has no partition; "+" ends a cut name)
    re.compile(
        r"[ \t]*\d+(?:_\d+)?(?:\.(?:batch|extern|interactive|\d+))?[ \t]+\S+[ \t]+(?:(?P<partition>\S+?)\+?[ \t]+)?"
        rf"(?P<account>\S+?)\+?[ \t]+\d+[ \t]+(?:{_SACCT_STATES})\+?(?: by \d+)?[ \t]+\d+:\d+(?![\w:])"
    ),
    # PARTITION AVAIL TIMELIMIT NODES STATE NODELIST ("*" marks the default partition)
    re.compile(
        rf"[ \t]*(?P<partition>[A-Za-z0-9_][\w.-]*?)\*?[ \t]+(?:up|down|drain|inact)[ \t]+(?:infinite|n/a|{_SLURM_TIME})"
        r"[ \t]+\d+[ \t]+[a-z]+[*~#!%$@^+-]*[ \t]+(?P<nodes>[^\s(]\S*)"
    ),
)

# --- cloud ids ---
_GCP_PROJECT = r"[a-z][a-z0-9-]{4,28}[a-z0-9]"
_GCP_COLLECTIONS = (
    "zones|regions|global|locations|instances|serviceAccounts|secrets|topics|subscriptions|datasets|buckets|"
    "aggregated|images|snapshots|disks|networks|subnetworks|machineImages|instanceTemplates|instanceGroups"
)
# (kind, literals of which one must be in the line (lower case), pattern): group "v" becomes a placeholder of the
# kind (a host's for "host", the name a machine is reached by), the rest of the match is kept.
_CLOUD_IDS: tuple[tuple[str, tuple[str, ...], re.Pattern[str]], ...] = (
    ("instance", ("i-",), re.compile(r"i-(?<![\w-]i-)(?P<v>[0-9a-f]{17}|[0-9a-f]{8})(?![\w-])")),  # EC2
    ("aws-account", ("arn:aws",), re.compile(r"\barn:aws[\w-]*:[\w-]*:[\w-]*:(?P<v>\d{12})(?=:)")),
    (
        "aws-account",
        ("account",),
        re.compile(
            r"(?<![\w-])[\"']?(?i:(?:aws_)?account(?:_?id)?)[\"']?[ \t]*[:=][ \t]*[\"']?(?P<v>\d{12})(?!\d)"
        ),
    ),
    (
        "project",
        ("projects/",),
        re.compile(rf"(?<![\w-])projects/(?P<v>{_GCP_PROJECT})(?=/(?:{_GCP_COLLECTIONS})\b)"),
    ),
    ("project", ("--project",), re.compile(rf"(?<![\w-])--project[= ][\"']?(?P<v>{_GCP_PROJECT})(?![\w.-])")),
    (
        "project",
        ("project",),
        re.compile(
            rf"(?<![\w-])[\"']?(?i:(?:[a-z]+_)*project(?:_?id)?)[\"']?[ \t]*[:=][ \t]*[\"']?(?P<v>{_GCP_PROJECT})(?![\w.-])"
        ),
    ),
    (
        "host",
        ("instances/",),
        re.compile(r"\bzones/[a-z0-9-]+/instances/(?P<v>[a-z][a-z0-9-]{0,62})(?![\w.-])"),
    ),
    (
        "host",
        ("gcloud",),
        re.compile(
            r"\bgcloud(?: alpha| beta)? compute (?:ssh|instances [a-z-]+) (?:[\w.-]+@)?(?P<v>[a-z][a-z0-9-]{0,62})(?![\w.@:-])"
        ),
    ),
    ("subscription", ("subscriptions/",), re.compile(rf"(?i:subscriptions)/(?P<v>{_UUID})")),
    (
        "subscription",
        ("--subscription",),
        re.compile(rf"(?<![\w-])--subscription[= ][\"']?(?P<v>{_UUID}|[A-Za-z][\w.-]*)"),
    ),
    (
        "subscription",
        ("subscription",),
        re.compile(
            rf"(?<![\w-])[\"']?(?i:[a-z_]*subscription_?id)[\"']?[ \t]*[:=][ \t]*[\"']?(?P<v>{_UUID})"
        ),
    ),
    (
        "tenant",
        ("tenant",),
        re.compile(rf"(?<![\w-])[\"']?(?i:[a-z_]*tenant_?id)[\"']?[ \t]*[:=][ \t]*[\"']?(?P<v>{_UUID})"),
    ),
    ("resource-group", ("resourcegroups/",), re.compile(r"(?i:resourceGroups)/(?P<v>[\w.-]+)")),
    ("host", ("virtualmachines/",), re.compile(r"(?i:virtualMachines)/(?P<v>[A-Za-z0-9][\w.-]*)")),
    (
        "ocid",
        ("ocid1.",),
        re.compile(r"\bocid1\.[a-z0-9_]+\.[a-z0-9-]+\.(?:[a-z0-9-]*\.){1,2}(?P<v>[a-z0-9]{20,})(?![\w.-])"),
    ),
)

# The literals of the tables of command-line credentials, cloud ids and hardware ids, looked for once a line
# (every pass of a line is given the same lower case; substring tests are faster than one alternation here),
# none holding another ("project" stands for "projects/" and "--project").
_ALL_GUARDS = {
    g for table in (_COMMAND_CREDENTIALS, _CLOUD_IDS, _HARDWARE_IDS) for _, guards, _ in table for g in guards
}
_RULES_GUARDS = tuple(sorted(g for g in _ALL_GUARDS if not any(o != g and o in g for o in _ALL_GUARDS)))


def strip_colours(text: str) -> str:
    """Remove terminal colour codes until none is left (removing one can join the halves of another; any
    order of removal ends in the same text, as no two codes overlap).

    The tests look for the escape character alone: finding it is many times faster than finding the
    two characters of a code's start (a text without colours pays almost nothing)."""
    while "\x1b" in text:
        text, removed = _ANSI.subn("", text)
        if not removed:
            break
    return text


def _redact(kind: str) -> str:
    return f"<redacted:{kind}>"


def _not_a_secret(value: str) -> bool:
    """Numbers and JSON literals (counts such as ``completion_tokens``, flags such as ``use_token: true``)."""
    if value.lower() in {"none", "null", "true", "false"}:
        return True
    try:
        float(value)
    except ValueError:
        return False
    return True


def _names_a_credential(key: str) -> bool:
    """Whether a key that _SECRET_KEY matched names a secret: its last word means one (_secret_word), and it is
    no token of a text (_MEASURED_TOKEN)."""
    snake = _CAMEL_HUMP.sub("_", key).lower()
    return _secret_word(snake) is not None and not _MEASURED_TOKEN.search(snake)


def _secret_word(snake: str) -> str | None:
    """The word of a key (snake case, lower) that makes it a secret's: "strong" for one that ends in password,
    token, secret, ... (PGPASSWORD, authToken), else its last word where that is a short one (DB_PASS, PWD,
    REDIS_AUTH, SESSION_COOKIE, ENCRYPTION_SEED, SIGNING_KEY, munge.key); None for another (key_count,
    sort_key, compass)."""
    words: list[str] = _KEY_WORDS.findall(snake)
    if not words:
        return None
    if words[-2:] == ["key", "data"] or words[-3:] == ["private", "key", "id"]:  # kubeconfig, a GCP key file
        return "strong"
    last = words[-1]
    if _STRONG_SECRET_WORD.search(last) or (
        last == "key" and len(words) > 1 and words[-2] in _KEY_QUALIFIERS
    ):
        return "strong"
    if last not in _SHORT_SECRET_WORDS:
        return None
    if last == "key" and (len(words) == 1 or words[-2] in _NOT_SECRET_KEYS):
        return None  # a key alone names anything (etcd's, a cache's, the answers'): the value's shape decides
    return last


_KEY_QUALIFIERS = frozenset(
    {"api", "access", "secret", "private", "signing", "master", "encryption", "client"}
)


def _kept_for_its_name(name: str, value: str) -> bool:
    """Whether a value a short secret word names is none: a path or etcd key, a plain word, a short signal."""
    word = _secret_word(_CAMEL_HUMP.sub("_", name).lower())
    if word in (None, "strong", "pass", "cookie"):
        return False
    if _PATH_VALUE.match(value):
        return True
    if word != "pwd" and _PLAIN_VALUE.match(value):
        return True
    return word == "sig" and len(value) < 10  # sig=SIGTERM


def _container_end(text: str, start: int, quote: str) -> int | None:
    """Where the JSON (or Python) object or array opening at ``text[start]`` ends, just past its closing bracket;
    ``None`` when it does not close on this line or its brackets do not pair. ``quote`` delimits its strings."""
    closing = {"{": "}", "[": "]"}
    expected: list[str] = []
    at = start
    while at < len(text):
        char = text[at]
        if char == quote:
            at += 1
            while at < len(text) and text[at] != quote:
                at += 2 if text[at] == "\\" else 1
        elif char in closing:
            expected.append(closing[char])
        elif char in "}]":
            if expected.pop() != char:
                return None
            if not expected:
                return at + 1
        elif char == "\n":
            return None
        at += 1
    return None


def _assignment(m: re.Match[str], text: str) -> tuple[str, int]:
    """A secret key's assignment as it is to be written, and where in ``text`` the part it replaces ends.

    In data written with quoted keys (JSON, a Python repr) the result is still data: an object or array that a
    secret key holds becomes one quoted marker, the brackets that close around a value stay, and the opening
    bracket of an object or array that goes on past the line stays, its members judged on their own lines."""
    key, raw, quote = m["k"], m["v"], m["q"]
    kept = m[0], m.end()
    if not _names_a_credential(m["name"]):
        return kept
    rest = ""
    if raw.startswith('\\"') and raw.endswith('\\"') and len(raw) >= 4:  # JSON inside a JSON string
        value, quote = raw[2:-2], '\\"'
    elif len(quote) > 1:  # an escaped key before no escaped string: a scalar (it ends where its object does)
        quote = ""
        cut = min((raw.index(c) for c in "}]" if c in raw), default=len(raw))
        value, rest = raw[:cut], raw[cut:]
    elif raw[0] in "\"'":  # a quoted value: its own quotes stay
        value, quote = raw[1:-1], raw[0]
    elif raw[0] in "{[":
        end = _container_end(text, m.start("v"), quote or '"')
        if end is not None:
            if not text[m.start("v") + 1 : end - 1].strip():
                return kept  # {} or []: nothing to hide
            return f"{key}{quote}{_redact('secret')}{quote}", end
        if quote or raw in ("{", "["):
            return kept  # an opening bracket is no value
        value = raw  # PASSWORD=[abc
    elif quote:  # a JSON or Python scalar ends where its object or array closes: {"token": 5}
        cut = min((raw.index(c) for c in "}]" if c in raw), default=len(raw))
        value, rest = raw[:cut], raw[cut:]
    else:
        value = raw
    if (
        not value
        or value.startswith("<redacted:")
        or _not_a_secret(value)
        or _kept_for_its_name(m["name"], value)
    ):
        return kept
    return f"{key}{quote}{_redact('secret')}{quote}{rest}", m.end()


def _secret_assignments(text: str) -> str:
    """``text`` with the value of every secret key's assignment (_SECRET_ASSIGNMENT) redacted."""
    out: list[str] = []
    at = 0
    for m in _SECRET_ASSIGNMENT.finditer(text):
        if m.start() < at:
            continue  # inside an object or array already redacted whole
        replacement, end = _assignment(m, text)
        out += (text[at : m.start()], replacement)
        at = end
    return "".join(out) + text[at:] if out else text


def _after_key(replacement: str) -> Callable[[re.Match[str]], str]:
    """Keep the key part (group "k") of a match and replace its value."""

    def replace(m: re.Match[str]) -> str:
        return m["k"] + replacement

    return replace


# Hosts and bare words with their placeholders, the known paths and the safe values (Sanitizer.names_state).
NamesState = tuple[dict[str, str], dict[str, str], tuple[str, ...], frozenset[str]]
# Values numbered per kind, and the known paths with their placeholders (Sanitizer.numbering_state).
NumberingState = tuple[dict[str, dict[str, str]], dict[str, str]]


class Sanitizer:
    """Maps identifying values to placeholders, consistently across every text it is given.

    ``hosts``, ``users``, ``paths`` and ``accounts`` are values known to identify the cluster (node names from the
    run, the submitting user, the shared directory, the Slurm account); they are replaced wherever they appear,
    even where no pattern would recognise them (accounts named by a plain word only in Slurm contexts). ``safe``:
    values known to be no secret (the run id, digests the project recorded), which the high-entropy rule keeps.
    """

    def __init__(
        self,
        hosts: Iterable[str] = (),
        users: Iterable[str] = (),
        paths: Iterable[str | Path] = (),
        accounts: Iterable[str] = (),
        safe: Iterable[str] = (),
    ) -> None:
        self._safe = frozenset(
            safe
        )  # values the high-entropy rule keeps (the run's id, its recorded digests)
        self._maps: dict[str, dict[str, str]] = {}
        self._bare: dict[str, str] = {}  # words replaced wherever they stand alone (users, accounts)
        # Host names (lower case) replaced wherever they stand alone, in any case, with any domain after them.
        self._hosts: dict[str, str] = {}
        self._paths: dict[str, str] = {}
        self._bare_re: re.Pattern[str] | None = None
        self._bare_dirty = True
        self._names: tuple[tuple[int, int], list[str]] | None = None  # known_names() for a known_count()
        self._all: tuple[tuple[int, int], set[str]] | None = None  # _all_names() for a known_count()
        self._path_res: list[tuple[str, re.Pattern[str]]] | None = None  # _path_patterns() (paths only grow)
        self._hint_for, self._hinted = "", False  # _rules_hinted(): the last lower case searched, the answer
        # The passes of a line, in order: each takes the line as the passes before left it and the lower case
        # of the line as it came; the known names are replaced after them (_bare_words).
        self._passes: tuple[Callable[[str, str], str], ...] = (
            self._secrets,
            self._users,
            self._hosts_and_paths,
            self._hardware_addresses,
            self._ipv4,
        )
        self.add_known(hosts=hosts, users=users, paths=paths, accounts=accounts)

    def add_known(
        self,
        hosts: Iterable[str] = (),
        users: Iterable[str] = (),
        paths: Iterable[str | Path] = (),
        accounts: Iterable[str] = (),
    ) -> None:
        """Register more identifying values (numbered after those already known).

        A host may be a Slurm node list (``gpu-[01-03,07],login-02``): each node it names is known. A known FQDN
        makes its first label known too (``login-02`` for ``login-02.cluster.example``) when that label is no
        plain word."""
        for entry in hosts:
            for host in node_names(entry, strict=True):
                if host.lower() not in _KEEP_HOSTS and not _PLACEHOLDER.match(host):
                    self._learn_host(host, self._host_placeholder(host))
        for user in users:
            if user and user not in _SYSTEM_USERS and not _PLACEHOLDER.match(user):
                self._bare[user] = self._placeholder("user", user)
        for path in paths:
            text = str(path).rstrip("/")
            if text and text != "/":
                self._paths[text] = self._placeholder("path", text)
        for account in accounts:
            if account and not _PLACEHOLDER.match(account):
                placeholder = self._placeholder("account", account)
                # Replaced alone only when it looks like an identifier: an account (or partition) named
                # with a plain word such as "rehearsal" or "gpu" would otherwise garble ordinary text.
                if re.search(r"[\d_-]", account):
                    self._bare[account] = placeholder
        self._bare_dirty = True

    # -- numbering ---------------------------------------------------------------------------------------

    def _placeholder(self, kind: str, value: str) -> str:
        table = self._maps.setdefault(kind, {})
        found = table.get(value)
        if found is None:
            n = len(table) + 1
            if kind == "ipv4":
                pool, index = divmod(n - 1, 254)
                found = f"{_V4_POOLS[pool]}{index + 1}" if pool < len(_V4_POOLS) else f"ipv4-{n}"
            elif kind == "ipv6":
                found = f"2001:db8::{n:x}"
            elif kind == "mac":
                found = f"02:00:00:00:{n // 256 % 256:02x}:{n % 256:02x}"
            elif kind == "guid":
                found = f"{_GUID_PLACEHOLDER_PREFIX}{n:08x}"
            elif kind == "path":
                found = f"/cluster/path-{n}"
            else:
                found = f"{kind}-{n}"
            table[value] = found
        return found

    def _known(self, kind: str, value: str) -> str | None:
        """The placeholder ``value`` already has, None where it has none yet (numbers nothing)."""
        table = self._maps.get(kind)
        return None if table is None else table.get(value)

    def _host(self, value: str, learn: bool) -> str:
        if value.lower() in _KEEP_HOSTS or _PLACEHOLDER.match(value) or _INTERFACE.match(value):
            return value
        lowered = value.lower()
        if any(lowered == h or lowered.endswith("." + h) for h in _PUBLIC_HOSTS):
            return value
        placeholder = self._host_placeholder(value)
        if learn and len(value) >= 3:
            self._learn_host(value, placeholder)
        elif "." in value:
            self._learn_label(value, placeholder)  # the FQDN's host, named alone elsewhere
        return placeholder

    def _host_placeholder(self, value: str) -> str:
        """The same placeholder for a host whatever its case and whether named alone or with its domain."""
        lowered = value.lower()
        found = self._hosts.get(lowered) or self._hosts.get(lowered.split(".", 1)[0])
        return found or self._placeholder("host", value)

    def _learn_host(self, value: str, placeholder: str) -> None:
        lowered = value.lower()
        if lowered not in self._hosts:
            self._hosts[lowered] = placeholder
            self._bare_dirty = True
        self._learn_label(lowered, placeholder)

    def _learn_label(self, fqdn: str, placeholder: str) -> None:
        label = fqdn.split(".", 1)[0].lower()
        if (
            label == fqdn.lower()
            or label in self._hosts
            or len(label) < 3
            or not _DISTINCT_LABEL.search(label)
        ):
            return
        if label in _KEEP_HOSTS or _PLACEHOLDER.match(label) or _INTERFACE.match(label):
            return
        self._hosts[label] = placeholder
        self._bare_dirty = True

    def _node_list(self, item: str) -> str:
        """One placeholder for ``gpu-[01-03]``; each node it names is learned, to be replaced where named alone."""
        placeholder = self._host(item, learn=True)
        if "[" in item:
            for name in node_names(item, strict=False):
                self._host(name, learn=True)
        return placeholder

    def _user(self, value: str) -> str:
        if value in _SYSTEM_USERS or _PLACEHOLDER.match(value):
            return value
        placeholder = self._placeholder("user", value)
        if len(value) >= 3 and value not in self._bare:
            self._bare[value] = placeholder
            self._bare_dirty = True
        return placeholder

    def _slurm_replacer(self, kind: str) -> Callable[[re.Match[str]], str]:
        def replace(m: re.Match[str]) -> str:
            return m["k"] + ",".join(self._slurm_value(kind, value) for value in m["v"].split(","))

        return replace

    def _slurm_value(self, kind: str, value: str) -> str:
        """A partition, account, QOS, group or cluster's placeholder; itself where it is one or names nothing
        (ALL, system groups)."""
        if _PLACEHOLDER.match(value) or value in _SYSTEM_GROUPS:
            return value
        return self._placeholder(kind, value)

    # -- the passes ----------------------------------------------------------------------------------------

    def sanitize(self, text: str) -> str:
        """Return ``text`` with every secret redacted and every identifying value replaced.

        Terminal colour codes are removed first: they would hide values from the patterns. Private key
        blocks are matched across lines; everything else line by line, each pattern only on lines that hold
        its keyword (a log line rarely holds any), which keeps large files fast."""
        if "\x1b" in text:
            text = strip_colours(text)
        if "PRIVATE KEY" in text:
            text = _PRIVATE_KEY.sub(_redact("private-key"), text)
        return self._lines(text)

    def names_state(self) -> NamesState:
        """The names replaced wherever they stand alone, with their placeholders, and the known paths, as they
        stand now: what a worker process needs to replace the known names as this sanitizer would (:meth:`naming`)."""
        return dict(self._hosts), dict(self._bare), tuple(self._paths), self._safe

    @classmethod
    def naming(cls, state: NamesState) -> Sanitizer:
        """A sanitizer that replaces the known names of ``state`` (:meth:`names_state`) as the one that gave it
        did; the paths stay the caller's to look for."""
        namer = cls()
        namer._hosts, namer._bare = dict(state[0]), dict(state[1])
        namer._safe = state[3]
        namer._bare_dirty = True
        return namer

    def numbering_state(self) -> NumberingState:
        """Every value numbered so far, per kind, and the known paths with their placeholders: with
        :meth:`names_state`, all a copy needs to go on as this sanitizer would (see ``speculate.py``)."""
        return {kind: dict(table) for kind, table in self._maps.items()}, dict(self._paths)

    def known_count(self) -> tuple[int, int]:
        """How many names are replaced wherever they stand alone (grows as names are learned)."""
        return len(self._hosts), len(self._bare)

    def known_names(self) -> list[str]:
        """The names replaced wherever they stand alone, lower case, none holding another (that one is enough to
        look for): where none is found in a lower-cased text, :meth:`_bare_words` changes nothing there."""
        count = self.known_count()
        if self._names is None or self._names[0] != count:
            kept: list[str] = []
            for name in sorted({*self._hosts, *(w.lower() for w in self._bare)}, key=len):
                if not any(shorter in name for shorter in kept):
                    kept.append(name)
            self._names = (count, kept)
        return self._names[1]

    def _lines(self, text: str) -> str:
        return "".join(self._line(line) for line in text.splitlines(keepends=True))

    def sanitize_lines(self, lines: Iterable[str]) -> Iterator[str]:
        """Sanitize line by line (for large files); values learned on a line apply from that line on."""
        for line in lines:
            yield self.sanitize(line)

    def _line(self, line: str, stage: int = 0) -> str:
        """One line through the passes, from ``stage`` on (see :meth:`first_change`)."""
        low = line.lower()
        for one in self._passes[stage:]:
            line = one(line, low)
        return self._bare_words(line)

    def first_change(self, line: str) -> int:
        """The first of the passes that changes ``line`` (one line), their number where none does.

        Where a pass changes nothing here it changes nothing in any sanitizer with the same known paths:
        whether a pattern keeps a value depends on the value alone (a placeholder always differs from the
        value it replaces, and only a replacement learns), so another sanitizer may start that line at the
        pass returned (:meth:`_line`'s ``stage``). The known names, replaced last, are not judged here."""
        low = line.lower()
        for number, one in enumerate(self._passes):
            if one(line, low) != line:
                return number
        return len(self._passes)

    def _secrets(self, text: str, low: str) -> str:
        if "://" in text and "@" in text:
            text = _URL_CREDENTIALS.sub(
                lambda m: f"{m['scheme']}{self._user(m['user']) if m['user'] else ''}:{_redact('password')}@",
                text,
            )
        for kind, guards, pattern in _TOKENS if _TOKEN_HINT.search(low) else ():
            if not any(g in (low if g.islower() else text) for g in guards):
                continue
            if "v" in pattern.groupindex:
                text = pattern.sub(_after_key(_redact(kind)), text)
            else:
                text = pattern.sub(_redact(kind), text)
        if "://" in text and "@" in text:  # after the tokens: a token before the host is redacted as one
            text = _URL_USER.sub(lambda m: f"{m['scheme']}{self._user(m['user'])}@", text)
        if ("-u" in text or "ETCDCTL_USER=" in text) and ":" in text:
            text = _USER_PASSWORD.sub(self._user_and_password, text)
        for what, guards, pattern in _COMMAND_CREDENTIALS if self._rules_hinted(low) else ():
            if any(g in low for g in guards):
                text = pattern.sub(self._credential(what), text)
        if _SECRET_WORD.search(low):
            text = _SECRET_FLAG.sub(self._secret_flag, _secret_assignments(text))
            if "--" in text:
                text = _SECRET_FLAG_LISTED.sub(self._secret_flag, text)
            if "pass" in low:
                text = _SECRET_IN_PROSE.sub(_after_key(_redact("password")), text)
        if text.count(":") >= 4:
            text = _PGPASS.sub(_after_key(_redact("password")), text)
        if _ENTROPY_RUN.search(text):  # last: what a key or a format names is redacted as that
            text = self._high_entropy(_NKEY_SEED.sub(_redact("nkey-seed"), text))
        return text

    @staticmethod
    def _secret_flag(m: re.Match[str]) -> str:
        value = m["v"]
        if value.startswith("<redacted:") or not _names_a_credential(m["name"]):
            return m[0]
        short = _secret_word(_CAMEL_HUMP.sub("_", m["name"]).lower()) != "strong"
        if short and _not_a_secret(value):
            return m[0]  # --seed 42
        if _kept_for_its_name(m["name"], value.strip("\"'")):
            return m[0]
        return m["k"] + _redact("secret")

    def _high_entropy(self, text: str) -> str:
        """``text`` with each token (a word of letters, digits and ``_+/%-``, "=" padding after it) that holds a
        run reading as random (_random_run) redacted; of a path, only the pieces that hold one. A value the
        sanitizer was told is safe, or that a field of the project's own records holds (a digest, the run id),
        is kept."""
        out: list[str] = []
        at = judged = 0  # where the text not yet written starts; where the last token judged ends
        for run in _ENTROPY_RUN.finditer(text):
            if run.start() < judged or not _PAST_F.search(run[0]) or not _random_run(run[0]):
                continue
            start, end = run.start(), run.end()
            while start > judged and text[start - 1] in _TOKEN_CHARS:
                start -= 1
            while end < len(text) and text[end] in _TOKEN_CHARS:
                end += 1
            padding = end
            while end < len(text) and text[end] == "=" and end - padding < 2:
                end += 1
            judged = end
            token = text[start:end]
            if token in self._safe or _SAFE_FIELD.search(text, max(0, start - 40), start):
                continue
            pieces = token.split("/")
            kept = [
                p if not any(map(_random_run, _ENTROPY_RUN.findall(p))) else _redact("token") for p in pieces
            ]
            out += (text[at:start], "/".join(kept))
            at = end
        return "".join(out) + text[at:] if out else text

    def _rules_hinted(self, low: str) -> bool:
        """Whether the lower case of a line holds a literal of _COMMAND_CREDENTIALS, _CLOUD_IDS or _HARDWARE_IDS:
        searched once a line (the passes of a line are given the same string; its value decides alone)."""
        if low is not self._hint_for:
            self._hint_for, self._hinted = low, any(map(low.__contains__, _RULES_GUARDS))
        return self._hinted

    def _user_and_password(self, m: re.Match[str]) -> str:
        user, password = m["u"], m["v"]
        if user.isdigit() and password.isdigit():
            return m[0]  # docker's uid:gid
        if password in _SYSTEM_GROUPS or password.startswith("<redacted:"):
            return m["k"] + self._user(user) + ":" + password  # docker's user:group
        return f"{m['k']}{self._user(user)}:{_redact('password')}"

    def _credential(self, what: str) -> Callable[[re.Match[str]], str]:
        def replace(m: re.Match[str]) -> str:
            value = m["v"]
            if what == "user":
                return m["k"] + self._user(value)
            if value.startswith("<redacted:") or value.strip("\"'").startswith("<redacted:"):
                return m[0]
            quote = value[0] if value[0] in "\"'" else ""
            return f"{m['k']}{quote}{_redact(what)}{quote}"

        return replace

    def _users(self, text: str, low: str) -> str:
        """Known paths, users (and the hosts after them), Slurm accounts, partitions, QOS, clusters."""
        for original, pattern in self._path_patterns():
            if original in text:
                text = pattern.sub(self._paths[original], text)
        if _HOME_HINT.search(low):
            text = _HOME.sub(lambda m: m["k"] + self._user(m["v"]), text)
        if "user" in low or "logname" in low or "owner" in low or "uid" in low:
            text = _USER_KEY.sub(lambda m: m["k"] + self._user(m["v"]), text)

        def user_at_host(m: re.Match[str]) -> str:
            if _IPV4_ALONE.match(m["h"]):
                return f"{self._user(m['u'])}@{m['h']}"  # the address is the IPv4 pass's
            if _NOT_HOST_AFTER_AT.match(m["h"]):
                return m[0]
            return f"{self._user(m['u'])}@{self._host(m['h'], learn=True)}"

        if "@" in text:
            text = _USER_AT_HOST.sub(user_at_host, text)
        if "uid=" in low or "gid=" in low or "groups=" in low:
            text = _ID_OUTPUT.sub(self._id_output, text)
        for kind, guards, pattern in _CLOUD_IDS if self._rules_hinted(low) else ():
            if any(g in low for g in guards):
                text = pattern.sub(self._identifier(kind), text)
        for kind, pattern in _SLURM_KEYS if _ANY_SLURM_WORD.search(low) else ():
            if _SLURM_WORD[kind].search(low):
                text = pattern.sub(self._slurm_replacer(kind), text)
        first = text.lstrip(" \t")[:1]
        rows = _SLURM_ROWS[:2] if first.isdigit() else _SLURM_ROWS[2:] if _SINFO_HINT.search(low) else ()
        for row in rows:
            if (m := row.match(text)) is not None:
                return self._slurm_row(m)
        return text

    def _id_output(self, m: re.Match[str]) -> str:
        """id(1)'s uid=N(user), gid=N(group), groups=N(group),...: the names go, the numbers stay."""

        def entry(e: re.Match[str]) -> str:
            name = e["name"]
            if m["key"].endswith("uid"):
                return f"{e['n']}({self._user(name)})"
            return f"{e['n']}({self._slurm_value('group', name)})"

        return m["k"] + _ID_ENTRY.sub(entry, m["v"])

    def _slurm_row(self, m: re.Match[str]) -> str:
        """A squeue, sacct or sinfo row with its partition, account, user and nodes replaced."""
        spans: list[tuple[int, int, str]] = []
        for group, value in m.groupdict().items():
            if value is None:
                continue
            if group == "user":
                replaced = self._user(value)
            elif group == "nodes":
                replaced = ",".join(self._node_list(item) for item in _NODE_LIST_ITEM.findall(value))
            else:
                replaced = self._slurm_value(group, value)
            spans.append((m.start(group), m.end(group), replaced))
        text, pos = m.string, 0
        out: list[str] = []
        for start, end, replaced in sorted(spans):
            out += (text[pos:start], replaced)
            pos = end
        out.append(text[pos:])
        return "".join(out)

    def _identifier(self, kind: str) -> Callable[[re.Match[str]], str]:
        """Group "v" of a match replaced by a placeholder of ``kind`` (a host's for "host"), the rest kept."""

        def replace(m: re.Match[str]) -> str:
            value = m["v"]
            if _PLACEHOLDER.match(value):
                return m[0]
            if kind == "host":
                replaced = self._host(value, learn=True)
            elif kind == "guid":
                replaced = self._guid(value)
            else:
                replaced = self._placeholder(kind, value)
            start, end = m.start("v") - m.start(), m.end("v") - m.start()
            out = m[0][:start] + replaced + m[0][end:]
            if "w" in m.re.groupindex and m["w"] is not None:  # ibnetdiscover: the GUID again, without 0x
                w_start, w_end = m.start("w") - m.start(), m.end("w") - m.start()
                shift = len(replaced) - (end - start)
                again = f"{int(self._guid(value).removeprefix('0x').replace(':', ''), 16):x}"
                out = out[: w_start + shift] + again + out[w_end + shift :]
            return out

        return replace

    def _guid(self, value: str) -> str:
        """The placeholder of a 64-bit GUID, written as ``value`` is (0x..., four groups of four, 16 digits,
        eight bytes with colons); itself where it is one."""
        digits = value.lower().removeprefix("0x").replace(":", "")
        if digits.startswith(_GUID_PLACEHOLDER_PREFIX):
            return value
        found = self._placeholder("guid", digits)
        if value.lower().startswith("0x"):
            return "0x" + found
        if value.count(":") == 3:
            return ":".join(found[i : i + 4] for i in range(0, 16, 4))
        if value.count(":") == 7:
            return ":".join(found[i : i + 2] for i in range(0, 16, 2))
        return found

    def _hosts_and_paths(self, text: str, low: str) -> str:
        """Hosts (in URLs, after keys and flags, Slurm's messages, FQDNs) and cluster paths."""

        def host_list(m: re.Match[str]) -> str:
            if (
                _PLAIN_WORD.fullmatch(m["v"])
                and _SPACED_KEY_END.search(m["k"])
                and _PROSE_AFTER_SPACED_KEY.match(m.string, m.end())
            ):
                return m[0]  # "NODE = Connection traversing PCIe ..." is a sentence, not a host
            if m["k"].rstrip("= \t") in ("-w", "-x") and _PLAIN_WORD.fullmatch(m["v"]):
                return m[0]  # etcdctl -w table, curl -x proxy: a node's name holds a digit or a hyphen
            # "INFO args.ensure_side_channel_host: Using existing ...": a record's target, then its message
            if (
                _PLAIN_WORD.fullmatch(m["v"])
                and _RECORD_TARGET_END.search(m["k"])
                and _RECORD_TARGET_BEFORE.search(m.string, max(0, m.start() - 160), m.start())
            ):
                return m[0]
            return m["k"] + ",".join(self._node_list(item) for item in _NODE_LIST_ITEM.findall(m["v"]))

        if "://" in text:
            text = _URL_HOST.sub(lambda m: m["k"] + self._host(m["v"], learn=True), text)
        if _HOST_WORD.search(low):
            text = _HOST_KEY.sub(host_list, text)
        if "***" in text or "slurmstepd-" in text:
            text = _SLURM_ON_HOST.sub(host_list, text)
        if "srun: error: " in text:
            text = _SRUN_ERROR_ON.sub(lambda m: m["k"] + self._host(m["v"], learn=True), text)
        if _BARE_NODE_RANGE_HINT.search(text):
            text = _BARE_NODE_RANGE.sub(self._bare_node_range, text)
        if _TLD_HINT.search(text):
            text = _FQDN.sub(lambda m: self._host(m[0], learn=False), text)
        if _PATH_HINT.search(text):
            text = _CLUSTER_PATH.sub(lambda m: self._placeholder("path", m[0]), text)
        return text

    def _bare_node_range(self, m: re.Match[str]) -> str:
        """A node list no key names, where it looks like one: the name before the brackets ends in - or _,
        holds a digit or a hyphen, or is a node word, or the numbers are zero-padded (nid[001234-001240]);
        CPU[0-63] and kv_caches[0-31] are no nodes, nor interfaces (mlx5_[0-3])."""
        head, first = m["head"], m["first"]
        if not (
            head[-1] in "-_"
            or _DISTINCT_LABEL.search(head)
            or head.lower() in _NODE_WORDS
            or (len(first) > 1 and first.startswith("0"))
        ):
            return m[0]
        names = node_names(m[0], strict=False)
        if names and _INTERFACE.match(names[0]):
            return m[0]
        return self._node_list(m[0])

    def _ipv4(self, text: str, _low: str) -> str:
        def v4(m: re.Match[str]) -> str:
            if _VERSION_BEFORE.search(m.string, max(0, m.start() - 24), m.start()):
                return m[0]
            if _VERSION_AFTER.match(m.string, m.end()):
                return m[0]
            known = self._known("ipv4", m[0])
            if known is not None:
                return known
            if self._four_part_version(m):
                return m[0]
            return self._ipv4_placeholder(m[0])

        def dashed(m: re.Match[str]) -> str:
            return m["k"] + self._ipv4_placeholder(m["v"].replace("-", ".")).replace(".", "-")

        if _IPV4_HINT.search(text):
            text = _IPV4.sub(v4, text)
        if ("ip-" in _low or "ip_" in _low) and _IPV4_DASHED_HINT.search(text):
            text = _IPV4_DASHED.sub(dashed, text)
        return text

    @staticmethod
    def _four_part_version(m: re.Match[str]) -> bool:
        """Whether a dotted quad is a four-part version (_VERSION_NAME_BEFORE), not an address."""
        text = m.string
        if m[0].startswith("0.") and m[0] != "0.0.0.0":
            return True  # 0.0.0.0/8 addresses no host: 0.12.1.6 is a version
        before = _VERSION_NAME_BEFORE.search(text, max(0, m.start() - 40), m.start())
        if (
            before is None
            or before["w"].lower().rstrip(":") in _ADDRESS_WORDS
            or _ADDRESS_AFTER.match(text, m.end())
        ):
            return False
        try:
            address = ipaddress.IPv4Address(m[0])
        except ValueError:
            return True  # no address at all (6.3.42131.1): nothing to hide
        return not any(address in net for net in _NOT_PUBLIC_V4)

    def _ipv4_placeholder(self, value: str) -> str:
        """The placeholder of an IPv4 address; itself where it is none or identifies nothing."""
        known = self._known("ipv4", value)
        if known is not None:
            return known  # seen before: no need to parse it again
        try:
            address = ipaddress.IPv4Address(value)
        except ValueError:
            return value
        if any(address in net for net in _KEEP_V4):
            return value
        return self._placeholder("ipv4", value)

    def _ib_link(self, m: re.Match[str]) -> str:
        guid = m["v"]
        if not guid.lower().replace("00", "").replace("ff", "").strip(":"):
            return m[0]  # the broadcast address's
        return m["k"] + self._guid(guid)

    def _hardware_addresses(self, text: str, low: str) -> str:
        """MAC and IPv6 addresses (IPv6 before IPv4: an IPv4-mapped address is one IPv6 address)."""

        def v6(m: re.Match[str]) -> str:
            raw = m[0]
            found = self._ipv6(raw)
            if found is not None:
                return found
            head, _, port = raw.rpartition(":")  # a full address followed by its port, without brackets
            if port.isdigit() and len(port) <= 5 and (found := self._ipv6(head)) is not None:
                return f"{found}:{port}"
            return raw

        colons = text.count(":")
        if colons >= 19 and _MAC_HINT.search(text):
            text = _IB_LINK.sub(self._ib_link, text)
        if colons >= 5 and _MAC_HINT.search(text):
            text = _MAC.sub(self._colon_mac, text)
        # Before IPv4: an IPv4-mapped address is one IPv6 address. An address is compressed (::) or has all
        # its groups (at least six colons, the last two groups may be an IPv4 address).
        if "::" in text or (colons >= 6 and _IPV6_FULL_HINT.search(text)):
            text = _IPV6.sub(v6, text)
        if _MAC_DASHES_HINT.search(text):
            text = _MAC_DASHES.sub(lambda m: self._mac(m[0], "-"), text)
        if _MAC_DOTS_HINT.search(text):
            text = _MAC_DOTS.sub(lambda m: self._mac(m[0], "."), text)
        if colons >= 3 and _GUID_QUADS_HINT.search(text):
            text = _GUID_QUADS.sub(lambda m: self._guid(m[0]), text)
        if "GPU-" in text or "MIG-" in text:
            text = _GPU_UUID.sub(self._identifier("uuid"), text)
        for kind, guards, pattern in _HARDWARE_IDS if self._rules_hinted(low) else ():
            if any(g in low for g in guards):
                text = pattern.sub(self._identifier(kind), text)
        return text

    def _colon_mac(self, m: re.Match[str]) -> str:
        """A MAC's placeholder; itself where it is one, or all decimal with no MAC word before (a duration)."""
        value = m[0]
        if value.startswith("02:00:00:00:"):
            return value
        if value.replace(":", "").isdigit() and not _MAC_CONTEXT.search(
            m.string, max(0, m.start() - 24), m.start()
        ):
            return value
        return self._placeholder("mac", value.lower())

    def _mac(self, value: str, separator: str) -> str:
        """The placeholder of a MAC written with dashes or dots, written so; itself where it is one."""
        digits = value.lower().replace(separator, "")
        colons = ":".join(digits[i : i + 2] for i in range(0, 12, 2))
        if colons.startswith("02:00:00:00:"):
            return value
        found = self._placeholder("mac", colons)
        if separator == "-":
            return found.replace(":", "-")
        plain = found.replace(":", "")
        return ".".join(plain[i : i + 4] for i in range(0, 12, 4))

    def _ipv6(self, text: str) -> str | None:
        """The placeholder for an IPv6 address (itself where it identifies nothing), None if it is no address.

        Hex words without a digit (dead::beef), short groups only (Python's a[1::2], 1:2:3:4:5:6:7:8) and a lone
        prefix (fd00::) are not taken for addresses."""
        bare = text.split("%", 1)[0]
        groups = [g for g in bare.split(":") if g]
        if len(groups) < 2 or max(map(len, groups)) < 3 or not any(c.isdigit() for c in bare):
            return None
        try:
            address = ipaddress.IPv6Address(bare)
        except ValueError:
            return None
        if address.is_loopback or address.is_unspecified or address in _DOC_V6:
            return text
        return self._placeholder("ipv6", str(address))

    def _bare_words(self, text: str) -> str:
        pattern = self._bare_pattern()
        if pattern is None:
            return text
        low = text.lower()
        if not any(name in low for name in self.known_names()):
            return (
                text  # the cheap test first: the pattern starts with a look-behind, tried at every position
            )
        if not text.isascii():
            return pattern.sub(self._bare_replacement, text)
        # Where a match can start, a name starts (in any case): try the pattern only there, left to right,
        # as sub does. (Only in ASCII: a few other characters match letters when case is ignored.)
        out: list[str] = []
        pos = 0
        for at in sorted({at for name in self._all_names() for at in _occurrences(low, name)}):
            if at >= pos and (m := pattern.match(text, at)) is not None:
                out += (text[pos:at], self._bare_replacement(m))
                pos = m.end()
        out.append(text[pos:])
        return "".join(out)

    def _all_names(self) -> set[str]:
        count = self.known_count()
        if self._all is None or self._all[0] != count:
            self._all = (count, {*self._hosts, *(w.lower() for w in self._bare)})
        return self._all[1]

    def _path_patterns(self) -> list[tuple[str, re.Pattern[str]]]:
        """The known paths, longest first, each with the pattern that replaces it where it ends a name."""
        if self._path_res is None or len(self._path_res) != len(self._paths):
            self._path_res = [
                (p, re.compile(re.escape(p) + r"(?![\w.-])"))
                for p in sorted(self._paths, key=len, reverse=True)
            ]
        return self._path_res

    def _bare_replacement(self, m: re.Match[str]) -> str:
        groups = m.re.groupindex
        host = (m["h"] if "h" in groups else None) or (m["p"] if "p" in groups else None)
        return self._hosts[host.lower()] if host is not None else self._bare[m[0]]

    def _bare_pattern(self) -> re.Pattern[str] | None:
        """Known names as whole words: hosts in any case and with any domain after them (not a file extension)."""
        if self._bare_dirty:
            branches = []
            domain = rf"(?:\.(?!(?i:{_FILE_EXTENSIONS})(?![\w-]))[A-Za-z][A-Za-z0-9-]*)*"
            # A host whose name holds a digit or a hyphen is replaced inside a longer name too, between "-", "_"
            # or "." (a log file's name: decode-gpu-a17.log, rank0_gpu-a17_stderr.txt), never inside a word or
            # number (gpu-a1 in gpu-a17); a plain word only alone.
            distinct = sorted((h for h in self._hosts if _DISTINCT_LABEL.search(h)), key=len, reverse=True)
            plain = sorted((h for h in self._hosts if not _DISTINCT_LABEL.search(h)), key=len, reverse=True)
            if distinct:
                names = "|".join(map(re.escape, distinct))
                branches.append(rf"(?<![A-Za-z0-9])(?P<h>(?i:{names})){domain}(?![A-Za-z0-9])")
            if plain:
                names = "|".join(map(re.escape, plain))
                branches.append(rf"(?<![\w-])(?P<p>(?i:{names})){domain}(?![\w-])")
            if self._bare:
                words = "|".join(re.escape(w) for w in sorted(self._bare, key=len, reverse=True))
                branches.append(rf"(?<![\w-])(?:{words})(?![\w-])")
            self._bare_re = re.compile("|".join(branches)) if branches else None
            self._bare_dirty = False
        return self._bare_re

    def learn(self, text: str) -> None:
        """Discover identifying values in ``text`` without producing output (first pass over a large file)."""
        self.sanitize(text)


def _occurrences(text: str, word: str) -> Iterator[int]:
    at = text.find(word)
    while at >= 0:
        yield at
        at = text.find(word, at + 1)


def node_names(entry: str, strict: bool) -> list[str]:
    """The nodes a Slurm node list names: ``gpu-[01-03,07],login-02`` is gpu-01, gpu-02, gpu-03, gpu-07, login-02.

    A list naming more than a bounded number of nodes raises ValueError where ``strict`` (a configured list),
    else stays unexpanded (a list read from a log)."""
    names: list[str] = []
    for item in _NODE_LIST_ITEM.findall(entry):
        try:
            names += _expand_node_range(item)
        except ValueError:
            if strict:
                raise
            names.append(item)
    return names


def _expand_node_range(item: str) -> list[str]:
    m = _NODE_RANGE.search(item)
    if m is None:
        return [item]
    head, tail = item[: m.start()], item[m.end() :]
    names: list[str] = []
    for part in m[1].split(","):
        low, _, high = part.partition("-")
        if not low.isdigit() or not (high or low).isdigit():
            return [item]  # brackets that are no range: a literal name
        for n in range(int(low), int(high or low) + 1):
            names += _expand_node_range(f"{head}{n:0{len(low)}d}{tail}")
            if len(names) > _MAX_NODE_NAMES:
                raise ValueError(f"node list {item!r} names more than {_MAX_NODE_NAMES} nodes")
    return names


def sanitize(text: str) -> str:
    """Sanitize one text with a fresh :class:`Sanitizer`: deterministic, depends on nothing but ``text``.

    Values are discovered over the whole text first, so a user named once in a home path is also replaced
    where it appears alone earlier in the text.
    """
    sanitizer = Sanitizer()
    sanitizer.learn(text)
    return sanitizer.sanitize(text)
