"""The whole-file fast path: find the few lines that can hold something to hide, sanitize only those.

:meth:`Sanitizer.sanitize <atomdyn_core.sanitize.sanitizer.Sanitizer.sanitize>` runs every pattern on every
line; a raw log of gigabytes holds something to hide on a few lines in a hundred. :func:`sanitize_block` gives
the same result, character for character, and leaves the sanitizer in the same state.

*Scanners* find the lines: each matches wherever one of the sanitizer's patterns could match, and more (a
superset, never less), so a line that no scanner hits cannot be changed by any pattern and only the known
names (hosts, users, accounts) are replaced there. Each starts with a literal character (the regex engine
skips to it quickly), tests the rest with look-arounds, never reads past a line's end, and runs on the
lower-cased text (the patterns that ignore case see the same letters).

Most lines of a log repeat a few shapes that differ only in numbers, hex ids and timestamps. A line's *shape*
is its lower-cased text with every hex digit (0-9, a-f) written 0; each scanner has a twin for shapes
(every character class widened to what it becomes in a shape, every look-around that a shape cannot decide
dropped), so a twin that does not hit a shape hits no line of that shape. Twins run once per new shape; only
lines of a shape some twin hits are searched with the scanners themselves, on their own text. A block that
holds a character outside ASCII is searched whole with the scanners; its lines with such characters go to the
line-by-line path (lower-casing and case-blind matching of a few of them, the Kelvin sign or the dotless i,
would make a scanner miss).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import accumulate

from atomdyn_core.sanitize import sanitizer as _s
from atomdyn_core.sanitize.speculate import Speculated, finish_ahead, sanitize_ahead

__all__ = ["Prepared", "finish_block", "finish_prepared", "prepare_block", "sanitize_block"]

_HEX_DIGITS = "0123456789abcdef"
_SHAPE_BYTES = bytes.maketrans(_HEX_DIGITS.encode(), b"0" * 16)
_SHAPE_STR = str.maketrans(_HEX_DIGITS, "0" * 16)
_MAX_SHAPES = 1 << 16  # verdicts kept; forgotten all at once beyond (memory stays bounded)
_NOT_NEWLINE_SPACE = r"[^\S\n]"

# Keys whose value a pattern replaces (host, user, secret and Slurm keys, cloud signatures), as the key ends
# right before its separator: a pattern's key may carry a prefix (submit_host, SLURM_JOB_USER, aws_secret_...).
_KEY_SUFFIXES = (
    *("host", "hostname", "nodename", "nodelist", "node_list", "master_addr", "node_ran", "node_requested"),
    *("node", "nodes"),  # _HOST_KEY
    *("user", "username", "user_name", "logname", "userid", "owner"),  # _USER_KEY
    # _SECRET_ASSIGNMENT (api_key, access_key, private_key end in key)
    *("password", "passwd", "secret", "token", "key", "credential", "credentials"),
    *("account", "partition", "qos", "clustername", "cluster_name"),  # _SLURM_KEYS
    *("accountname", "accounts", "partitionname", "partitions", "groupid", "groups"),  # and their lists
    *("uid", "gid"),  # _ID_OUTPUT (groups= above)
    # _SECRET_ASSIGNMENT's SSHPASS, MYSQL_PWD, REDISCLI_AUTH, private_key_id
    *("sshpass", "pwd", "auth", "key_id"),
    *("account_id", "accountid"),  # the AWS account of _CLOUD_IDS
    *("signature", "sig"),  # cloud-key (AccountKey=, SharedAccessKey= end in key)
    # the secret words of issue 36 (DB_PASS, GPG_PASSPHRASE, SESSION_COOKIE, ENCRYPTION_SEED, client-key-data),
    # ODBC's User ID
    *("pass", "passphrase", "cookie", "seed", "key-data", "key_data", "keydata", "user id"),
)
_CLUSTER_DIRS = (
    *("lustre", "gpfs", "scratch", "nfs", "fsx", "mnt", "shared", "projects", "project", "proj", "data"),
    *("datasets", "beegfs", "cephfs", "work", "vast", "weka"),
)
# Words of the patterns that need no key before a separator: command-line credentials, headers, the AWS
# secret after whitespace, Slurm commands and srun's errors, cloud ids, hardware ids.
_WORDS = (
    *("sshpass", "mysql", "mariadb", "redis-cli", "ipmitool", "pass:"),  # _COMMAND_CREDENTIALS
    *("docker login", "podman login", "nerdctl login", "buildah login", "skopeo login", "oras login"),
    "registry login",
    *("authorization", "aws_secret_access_key", "aws_session_token", "aws_security_token"),  # _TOKENS
    # _SLURM_KEYS (srun -A, -p, #SBATCH -A and -p), _SRUN_ERROR_ON (not srun's other messages, "srun: Job ...")
    *("srun ", "srun\t", "sbatch ", "sbatch\t", "salloc ", "salloc\t", "#sbatch", "srun: error: "),
    *("arn:aws", "project", "gcloud", "zones/", "subscription", "tenant", "resourcegroups/"),  # _CLOUD_IDS
    *("virtualmachines/", "ocid1."),
    *("guid", "unique id", "unique_id", "uniqueid", "uuid", "serial"),  # _HARDWARE_IDS
    *("machine-id", "machine_id", "machine id", "machineid", "boot-id", "boot_id", "boot id", "bootid"),
    # _TOKENS of issue 36: cookie headers, webhooks, vendor formats; .netrc (_NETRC: machine, password)
    *("cookie", "/services/", "webhooks/", "pypi-", "hvs.", "hvb.", "hvr.", "glpat-", "npm_", "whsec_"),
    *("k_live_", "k_test_", "gsk_", "dapi", "machine", "password"),
    *("passwd", "passphrase"),  # and "password": _SECRET_IN_PROSE (with password 'VALUE')
)


def shape(text: str) -> str:
    """``text`` (lower case) with every hex digit written 0."""
    return text.translate(_SHAPE_STR)


class _Builder:
    """Writes a scanner's regex for plain lower-cased text, or its twin for shapes."""

    def __init__(self, shapes: bool) -> None:
        self.shapes = shapes

    def lit(self, text: str) -> str:
        return re.escape(shape(text) if self.shapes else text)

    def words(self, words: list[str] | tuple[str, ...] | str) -> str:
        items = words.split("|") if isinstance(words, str) else words
        return "|".join(sorted({self.lit(w) for w in items}, key=len, reverse=True))

    def cls(self, chars: str) -> str:
        """A class of the given characters (each taken literally)."""
        chars = shape(chars) if self.shapes else chars
        return "[" + "".join(sorted({re.escape(c) for c in chars})) + "]"

    @property
    def hex(self) -> str:
        return "0" if self.shapes else "[0-9a-f]"

    @property
    def digit(self) -> str:
        return "0" if self.shapes else r"\d"

    @property
    def letter(self) -> str:
        return "[0g-z]" if self.shapes else "[a-z]"

    def unless(self, lookaround: str) -> str:
        """A negative look-around that a shape cannot decide (it reads digits' values): kept on plain text."""
        return "" if self.shapes else lookaround

    def key_before(self) -> str:
        """A key of ``_KEY_SUFFIXES`` ends right before the separator (``=`` or ``:``) just read."""

        def ending(between: str) -> str:
            by_width: dict[int, list[str]] = {}
            for key in _KEY_SUFFIXES:
                by_width.setdefault(len(key), []).append(key)
            return "|".join(
                rf"(?<=(?:{self.words(keys)}){between}[=:])" for _, keys in sorted(by_width.items())
            )

        def last(n: int) -> str:
            return self.cls("".join(key[-n] for key in _KEY_SUFFIXES))

        quote = "[\"']"
        # A cheap first test: each of the last three letters is one that some key has there (most separators
        # follow other words, numbers or colons); every key is at least three letters long.
        return (
            rf"(?<={last(3)}{last(2)}{last(1)}[=:])(?:{ending('')})"
            rf"|(?<=[\"'\s][=:])"  # a quote or a space before the separator
            rf"(?:(?<={quote}[=:])(?:{ending(quote)})"
            rf"|(?<=[{self.letter[1:-1]}\"'] [=:])(?:{ending(' ')}|{ending(quote + ' ')})"  # host = x
            rf"|(?<={_NOT_NEWLINE_SPACE}{{2}}[=:])|(?<=[^ \S][=:]))"  # more or other spaces: the separator
        )

    def scanners(self) -> tuple[str, ...]:
        """One regex per anchor character; each comment names the patterns whose matches it covers."""
        h, d, nl = self.hex, self.digit, _NOT_NEWLINE_SPACE
        not_hex_word = "[g-z_]"
        not_127 = self.unless(r"(?<!127\.)")
        nor_dot_digit = self.unless(r"|\.\d")
        alnum = "[0g-z]" if self.shapes else "[a-z0-9]"
        return (
            # _IPV4 (from its first dot; 127.x is left alone by the pattern), _FQDN (its top-level-domain word),
            # _MAC_DOTS (from its first dot)
            rf"\.(?:{not_127}{d}{{1,3}}\.{d}{{1,3}}\.{d}{{1,3}}(?!{alnum}{nor_dot_digit})"
            rf"|(?={self.letter}{{2,11}}(?![\w-]))(?:{self.words(_s._TLDS)})(?![\w-])"
            rf"|(?<={h}{{4}}\.){h}{{4}}\.{h}{{4}})",
            # _IPV6 with :: (neither side a letter beyond f, no longer word before it)
            rf"::(?!{not_hex_word})(?<![g-z_.]::)(?<!{not_hex_word}{h}::)(?<!{not_hex_word}{h}{{2}}::)"
            rf"(?<!{not_hex_word}{h}{{3}}::)(?<!{not_hex_word}{h}{{4}}::)(?<!{h}{{5}}::)",
            # _URL_CREDENTIALS and _URL_HOST (://); _IPV6 in full, _MAC and _IB_LINK (five colons from the
            # first); _GUID_QUADS (from its first colon); keys before a colon (_HOST_KEY, _USER_KEY,
            # _SECRET_ASSIGNMENT, JSON keys of _SLURM_KEYS)
            rf":(?://|(?<={h}:){h}{{1,4}}:{h}{{1,4}}:{h}{{1,4}}:{h}{{1,4}}:|(?<={h}{{4}}:){h}{{4}}:{h}{{4}}:{h}{{4}}"
            rf"|{self.key_before()})",
            # keys before an equals sign: _HOST_KEY, _USER_KEY, _SECRET_ASSIGNMENT, _SLURM_KEYS, cloud-key
            rf"=(?:{self.key_before()})",
            "@",  # _USER_AT_HOST
            rf"/(?:{self.words(['home/', 'homes/', 'users/', 'people/', *(f'{w}/' for w in _CLUSTER_DIRS)])})",  # _HOME, _CLUSTER_PATH
            # _SECRET_FLAG, host flags of _HOST_KEY, Slurm flags of _SLURM_KEYS, _SLURM_ON_HOST's slurmstepd-,
            # tokens ending in a hyphen (sk-, nvapi-, xox?-); _USER_PASSWORD (-u, --user), --project and
            # --subscription of _CLOUD_IDS; EC2's i-, _GPU_UUID's GPU- and MIG-, ibnetdiscover's "H-,
            # _IPV4_DASHED's ip-, _MAC_DASHES (from its first dash)
            rf"-(?:[wx][= ]|(?<![\w-]-)u"
            rf"|-(?:{self.words(['nodelist', 'exclude', 'account', 'partition', 'qos', 'user', 'username', 'project'])})[= ]"
            rf"|-{self.lit('subscription')}[= ]"
            rf"|(?<={self.lit('i-')}){h}{{8}}|(?:(?<={self.lit('gpu-')})|(?<={self.lit('mig-')})){h}{{8}}"
            rf"|(?<=[\"']{self.cls('hsr')}-){h}{{16}}|(?<={self.lit('ip-')}){d}|(?<={h}{{2}}-){h}{{2}}-{h}{{2}}-{h}{{2}}-{h}{{2}}"
            rf"|-[{self.letter[1:-1]}0-9_.-]*?(?:"
            + self.words(["password", "passwd", "secret", "token", "apikey", "credential", "credentials"])
            + "|"
            + self.words(["pass", "passphrase", "pwd", "auth", "cookie", "seed", "sig", "signature", "key"])
            + "|"
            + "|".join(f"{self.lit(a)}[_-]?{self.lit('key')}" for a in ("api", "access", "private"))
            + rf")(?:{nl}|[\"'],)"  # and _SECRET_FLAG_LISTED: ['--db-password', 'VALUE']
            rf"|(?<={self.lit('slurmstepd-')})|(?<={self.lit('sk-')})|(?<={self.lit('nvapi-')})"
            rf"|(?<={self.lit('xox')}{self.cls('abprs')}-))",
            r"\*\*\* ",  # _SLURM_ON_HOST
            # tokens: hf_, gh?_ and github_pat_, AKIA/ASIA/AIza, eyJ, bearer and basic (the hex-digit free
            # letter of each is the anchor: a shape writes hex digits, frequent, as 0)
            rf"_(?<={self.lit('hf_')})|_(?<={self.lit('ip_')}){d}",  # and _IPV4_DASHED's ip_
            rf"_(?<={self.lit('gh')}{self.cls('pousr')}_)|_(?<={self.lit('github_pat_')})",
            rf"r{nl}(?<={self.lit('bearer')}{nl})",
            rf"s(?:(?<={self.lit('bas')})i{self.lit('c')}{nl}|i{self.lit('a')}(?<={self.lit('asia')}))",
            rf"k(?:i{self.lit('a')}(?<={self.lit('akia')}))",
            rf"z{self.lit('a')}(?<={self.lit('aiza')})",
            rf"j(?<={self.lit('eyj')})",
            # _TOKENS' password hashes ($6$..., $2b$..., $argon2id$...)
            rf"\$(?:{alnum}){{1,8}}\$",
            # _BARE_NODE_RANGE (a name, then a range of numbers in brackets)
            rf"\[(?<=[{self.letter[1:-1]}0-9_.-]\[){d}+[,-]",
            # ibv_devices' GUIDs (_HARDWARE_IDS), after a tab
            rf"\t{h}{{16}}(?!{alnum})",
            # words of the patterns that need no key (_WORDS); .netrc's "default login"
            self.words(_WORDS),
            rf"{self.lit('default')}[ \t]+{self.lit('login')}",
            # NATS nkey seeds (_NKEY_SEED): S, the type, 56 base32 characters
            rf"{self.lit('s')}{self.cls('uaoncxp')}{'[0g-z]' if self.shapes else '[a-z2-7]'}{{56}}",
            # high-entropy tokens (_ENTROPY_RUN, _random_run): a run of 16 letters, digits and "+" or more with a
            # letter past f (and, on plain text, a digit)
            (
                r"(?<![0g-z+])(?=[0g-z+]{16})(?=[0+]*[g-z])"
                if self.shapes
                else r"(?<![a-z0-9+])(?=[a-z0-9+]{16})(?=[a-z+]*\d)(?=[0-9a-f+]*[g-z])"
            ),
            # _SLURM_ROWS: squeue's and sacct's rows begin with a job id and hold four more words at least,
            # sinfo's name a partition and its availability
            rf"(?m)^[ \t]*(?:{d}+(?:[_.+]\S*)?(?:[ \t]+\S+){{4}}"
            rf"|[^:\s]+:(?:{d}{{1,5}}|\*):[^:\s]+:[^:\s]+:"  # and _PGPASS: host:port:database:user:password
            rf"|[{self.letter[1:-1]}0-9_][{self.letter[1:-1]}0-9_.-]*\*?[ \t]+(?:{self.words(['up', 'down', 'drain', 'inact'])})[ \t])",
        )


_SCANNERS = tuple(re.compile(p) for p in _Builder(shapes=False).scanners())
_SHAPE_SCANNERS = tuple(re.compile(p) for p in _Builder(shapes=True).scanners())
_SHAPE_VERDICTS: dict[bytes, tuple[int, ...]] = {}  # a shape: the scanners whose twins hit it
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_DOTTED_I = "\u0130"  # the one character whose lower case is two characters
_KNOWN_NAME, _KNOWN_PATH = 1, 2
# Verdicts on shapes for known names and paths, per set of them (a few sanitizers may take turns).
_KNOWN_VERDICTS: dict[tuple[str, ...], dict[bytes, int]] = {}
_KNOWN_VERDICT_SETS = 4


def _line_bounds(text: str, at: int) -> tuple[int, int]:
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    return start, (len(text) if end < 0 else end + 1)


def _hits_in_block(text: str, low: str, paths: tuple[str, ...]) -> set[int]:
    """Start offsets of the lines that some pattern may change, every scanner run over the whole block."""
    starts: set[int] = set()
    for scanner in _SCANNERS:
        pos = 0
        while (m := scanner.search(low, pos)) is not None:
            start, pos = _line_bounds(low, m.start())
            starts.add(start)
    for path in paths:
        pos = 0
        while (at := text.find(path, pos)) >= 0:
            start, pos = _line_bounds(text, at)
            starts.add(start)
    if not text.isascii():
        pos = 0
        while (m := _NON_ASCII.search(text, pos)) is not None:
            start, pos = _line_bounds(text, m.start())
            starts.add(start)
    return starts


def _lines_naming(low: str, names: Iterable[str], skip: set[int]) -> list[int]:
    """Start offsets of lines (not in ``skip``) that name one of ``names`` (lower case)."""
    starts: set[int] = set()
    for name in names:
        pos = 0
        while (at := low.find(name, pos)) >= 0:
            start, pos = _line_bounds(low, at)
            if start not in skip:
                starts.add(start)
    return sorted(starts)


def _suspect_shapes(shapes: set[bytes]) -> dict[bytes, tuple[int, ...]]:
    """The shapes that some twin hits, with the scanners to run on their lines; new shapes judged first."""
    _judge_new_shapes(shapes)
    verdicts = {one: _SHAPE_VERDICTS.get(one) for one in shapes}
    if any(v is None for v in verdicts.values()):  # forgotten meanwhile (another thread filled the cache)
        _SHAPE_VERDICTS.clear()
        _judge_new_shapes(shapes)
        verdicts = {one: _SHAPE_VERDICTS[one] for one in shapes}
    return {one: scanners for one, scanners in verdicts.items() if scanners}


def _judge_new_shapes(shapes: set[bytes]) -> None:
    new = list(shapes.difference(_SHAPE_VERDICTS))
    if not new:
        return
    if len(_SHAPE_VERDICTS) + len(new) > _MAX_SHAPES:
        _SHAPE_VERDICTS.clear()
    joined = "\n" + b"\n".join(new).decode("ascii") + "\n"  # each shape between newlines, as in its block
    starts = list(accumulate((len(s) + 1 for s in new), initial=1))
    hit: list[list[int]] = [[] for _ in new]
    for index, twin in enumerate(_SHAPE_SCANNERS):
        pos = 0
        while (m := twin.search(joined, pos)) is not None:
            k = bisect_right(starts, m.start()) - 1
            hit[k].append(index)
            pos = starts[k + 1]
    for one, scanners in zip(new, hit, strict=True):
        _SHAPE_VERDICTS[one] = tuple(scanners)


def _known_verdicts(names: tuple[str, ...], paths: tuple[str, ...], shapes: set[bytes]) -> dict[bytes, int]:
    """For each shape: whether a line of it may name one of ``names`` or hold one of ``paths``."""
    key = (*names, "", *paths)
    verdicts = _KNOWN_VERDICTS.pop(key, None)
    if verdicts is None or len(verdicts) > _MAX_SHAPES:
        verdicts = {}
    _KNOWN_VERDICTS[key] = verdicts  # the most recently used last
    while len(_KNOWN_VERDICTS) > _KNOWN_VERDICT_SETS:
        del _KNOWN_VERDICTS[next(iter(_KNOWN_VERDICTS))]
    shaped_names = [shape(n).encode() for n in names]
    shaped_paths = [shape(p.lower()).encode() for p in paths]
    for one in shapes.difference(verdicts):
        verdicts[one] = (_KNOWN_PATH if any(p in one for p in shaped_paths) else 0) | (
            _KNOWN_NAME if any(n in one for n in shaped_names) else 0
        )
    return verdicts


def _replace_names(
    sanitizer: _s.Sanitizer, text: str, low: str, starts: list[int], spans: dict[int, tuple[int, str]]
) -> None:
    """Known names replaced on the lines at ``starts``: ``spans[start] = (end, replacement)``.

    In ASCII, as :meth:`Sanitizer._bare_words` does it line by line: the pattern tried only where a name
    starts, left to right; the line itself is not copied."""
    pattern = sanitizer._bare_pattern()
    if pattern is None:
        return
    if not text.isascii():
        for start in starts:
            _, end = _line_bounds(text, start)
            spans[start] = (end, sanitizer._bare_words(text[start:end]))
        return
    names = sanitizer._all_names()
    size = len(low)
    for start in starts:
        end = low.find("\n", start) + 1 or size
        found: list[int] = []  # where a name starts (most such lines name one, once)
        for name in names:
            at = low.find(name, start, end)
            while at >= 0:
                found.append(at)
                at = low.find(name, at + 1, end)
        if len(found) > 1:
            found = sorted(set(found))
        pos = start
        for at in found:
            if at >= pos and (m := pattern.match(text, at)) is not None:
                spans[at] = (m.end(), sanitizer._bare_replacement(m))
                pos = m.end()


def _line_by_line(sanitizer: _s.Sanitizer, text: str) -> str:
    sanitizer.learn(text)
    return sanitizer.sanitize(text)


_WHOLE, _SCANNED, _SHAPED = 0, 1, 2  # how a block was prepared (see Prepared.mode)


@dataclass(slots=True)
class Prepared:
    """A block made ready for :func:`finish_block`: what does not depend on the values learned so far.

    ``mode``: ``_WHOLE``, the block goes through the line-by-line path (a private key block, or a lower case
    of another length); ``_SCANNED``, its ``hits`` were found by the scanners run over the whole block (a
    character outside ASCII) and the lines naming known names are found when finished; ``_SHAPED``, ``hits``
    and ``names`` (the lines that may name one of ``names_for``, not hit lines) were found through the line
    shapes. ``low``: the lower-cased text where kept (dropped before a block is sent to another process).
    ``stages``: where judged, for each hit line the first pass that changes it (those before change it in no
    sanitizer). ``spans``: where prepared with a sanitizer's names and their placeholders (``spans_for``, its
    :meth:`known_count <atomdyn_core.sanitize.sanitizer.Sanitizer.known_count>`), the names replaced on
    the ``names`` lines, used as they are where the finishing sanitizer knows those names and no other."""

    text: str
    mode: int
    hits: list[int]
    names: list[int]
    names_for: tuple[str, ...]
    low: str | None = None
    spans: dict[int, tuple[int, str]] | None = None
    spans_for: tuple[int, int] = (0, 0)
    stages: list[int] | None = None  # for each hit line, the pass it may start at (Sanitizer.first_change)
    spans_names: frozenset[str] = frozenset()  # every name known where spans were made (lower case)
    # Where sanitized ahead by a copy of a sanitizer (speculate.py): its hit lines, and the block as it
    # finished it (``text`` may then be dropped: read again where the block is finished the ordinary way).
    speculated: list[Speculated] | None = None
    output: str | None = None


def prepare_block(
    text: str,
    names: tuple[str, ...],
    paths: tuple[str, ...],
    namer: _s.Sanitizer | None = None,
    stages: bool = False,
    ahead: tuple[_s.NamesState, _s.NumberingState] | None = None,
) -> Prepared:
    """The work on a block that depends only on its text, the known ``names`` (:meth:`Sanitizer.known_names
    <atomdyn_core.sanitize.sanitizer.Sanitizer.known_names>`) and the known ``paths``: colour codes
    removed, the lines some pattern may change found; with ``namer`` (a sanitizer that knows those names),
    the names replaced on the lines that are no hits; with ``stages``, the hit lines judged (where each may
    start); with ``ahead`` (what a sanitizer knew and had numbered), the block sanitized ahead by a copy of
    it (speculate.py), the hit lines judged on the way. Runs anywhere (another process: see ``parallel.py``)."""
    if "PRIVATE KEY" in text:
        return Prepared(text, _WHOLE, [], [], names)  # a key block spans lines: that path matches it whole
    text = _s.strip_colours(text)
    if not text.isascii():
        low = _lower(text)
        if len(low) != len(text):
            return Prepared(text, _WHOLE, [], [], names)
        return Prepared(text, _SCANNED, sorted(_hits_in_block(text, low, paths)), [], names, low)
    low = text.lower()
    shapes = low.encode("ascii").translate(_SHAPE_BYTES).split(b"\n")
    distinct = set(shapes)
    suspect = _suspect_shapes(distinct)
    known = _known_verdicts(names, paths, distinct)
    named = {one: verdict for one in distinct if (verdict := known[one])}
    hits: list[int] = []
    found: list[int] = []
    if suspect or named:
        ends = list(accumulate(map(len, shapes)))  # each line's end, less its newline, minus its index
        for i in [i for i, one in enumerate(shapes) if one in suspect or one in named]:
            one = shapes[i]
            end = ends[i] + i + 1
            start = end - len(one) - 1
            if named.get(one, 0) & _KNOWN_PATH or (
                one in suspect and any(_SCANNERS[k].search(low, start, end) for k in suspect[one])
            ):
                hits.append(start)
            elif one in named:
                found.append(start)
    prepared = Prepared(text, _SHAPED, hits, found, names, low)
    if ahead is not None and namer is None:
        namer = _s.Sanitizer.naming(ahead[0])
    if namer is not None:
        prepared.spans, prepared.spans_for = {}, namer.known_count()
        prepared.spans_names = frozenset(namer._all_names())
        _replace_names(namer, text, low, found, prepared.spans)
    if ahead is not None:
        done = sanitize_ahead(text, hits, prepared.spans or {}, *ahead)
        if done is not None:
            prepared.speculated, prepared.output = done
            prepared.stages = [one.stage for one in prepared.speculated]
            return prepared
    if stages or ahead is not None:
        judge = _s.Sanitizer(paths=paths)  # what it learns is dropped with it
        prepared.stages = []
        for start in hits:
            _, end = _line_bounds(text, start)
            line = text[start:end]
            single = len(line.splitlines()) == 1  # a "\n" line may hold other line ends (\r, \x0b, ...)
            prepared.stages.append(judge.first_change(line) if single else 0)  # 0: all passes, line by line
    return prepared


def finish_prepared(sanitizer: _s.Sanitizer, prepared: Prepared, text: Callable[[], str]) -> str:
    """The sanitized block: the worker's, checked (speculate.py), where it was sanitized ahead, else or where
    that cannot stand finished here (:func:`finish_block`; ``text`` gives the block's text where it was
    dropped)."""
    known = sanitizer.known_count()
    if prepared.speculated is not None and prepared.output is not None:
        done = finish_ahead(sanitizer, prepared.speculated, prepared.output, prepared.spans_for)
        if done is not None:
            return done
        if not prepared.text:
            prepared.text = text()
    return finish_block(sanitizer, prepared, known)


def finish_block(
    sanitizer: _s.Sanitizer, prepared: Prepared, known_before: tuple[int, int] | None = None
) -> str:
    """The sanitized block: its hit lines through the patterns, in order (learning and numbering), known
    names replaced on the others. Where ``sanitizer`` knows names that the block was not prepared for
    (learned on earlier blocks meanwhile), the lines naming those are looked for here. ``known_before``: the
    known count before the block, where calls for it were made already (a name learned then asks for the
    hit lines to be run again)."""
    text = prepared.text
    if prepared.mode == _WHOLE:
        return _line_by_line(sanitizer, text)
    low = prepared.low
    if prepared.mode == _SCANNED:
        return _sanitize_hits(sanitizer, text, prepared.hits, low or _lower(text))
    names = prepared.names
    current = sanitizer.known_names()
    if tuple(current) != prepared.names_for:
        # Names only grow: a line naming a current name names one prepared for or one learned since.
        since = set(current).difference(prepared.names_for)
        if since:
            low = low or _lower(text)
            more = _lines_naming(low, since, set(prepared.hits))
            names = sorted(set(names).union(more))
    spans = (prepared.spans, prepared.spans_for, prepared.spans_names) if prepared.spans is not None else None
    return _sanitize_hits(sanitizer, text, prepared.hits, low, names, spans, prepared.stages, known_before)


def sanitize_block(sanitizer: _s.Sanitizer, text: str) -> str:
    """``sanitizer.learn(text)`` then ``sanitizer.sanitize(text)``, found faster: the same output, the same
    values learned and numbered."""
    prepared = prepare_block(text, tuple(sanitizer.known_names()), tuple(sanitizer._paths))
    return finish_block(sanitizer, prepared)


def _lower(text: str) -> str:
    """The lower case that the scanners read (outside ASCII, İ would become two characters: kept apart)."""
    return text.lower() if text.isascii() else text.replace(_DOTTED_I, "?").lower()


def _sanitize_hits(
    sanitizer: _s.Sanitizer,
    text: str,
    hits: list[int],
    low: str | None,
    names: list[int] | None = None,
    spans: tuple[dict[int, tuple[int, str]], tuple[int, int], frozenset[str]] | None = None,
    stages: list[int] | None = None,
    known_before: tuple[int, int] | None = None,
) -> str:
    """The block with its hit lines sanitized line by line and known names replaced on the others.

    ``names``: the lines that may name a known name (when not given, found in ``low``, the lower case, after
    the hit lines, which may teach names). ``spans``: the names on those lines already replaced by a sanitizer
    whose known count and names were the second and third items (names only grow: the same count, the same
    names). ``stages``: for each hit line, the pass it starts at (one line each; see
    ``Sanitizer.first_change``). ``known_before``: the known count before the block (default: now)."""
    if known_before is None:
        known_before = sanitizer.known_count()

    def through_passes(index: int, line: str) -> str:
        stage = stages[index] if stages is not None else 0
        return sanitizer._line(line, stage) if stage else sanitizer._lines(line)

    lines: dict[int, tuple[int, str]] = {}
    for index, start in enumerate(hits):
        _, end = _line_bounds(text, start)
        lines[start] = (end, through_passes(index, text[start:end]))
    if sanitizer.known_count() != known_before:
        # A name learned on a later line is replaced on the earlier ones too (as the line-by-line path does
        # when it has learned the whole text first): sanitize the hit lines again, knowing every name.
        for index, (start, (end, _)) in enumerate(lines.items()):
            lines[start] = (end, through_passes(index, text[start:end]))
        names = None  # the names learned may stand on other lines
    if names is not None and spans is not None:
        ready, ready_for, ready_names = spans
        if sanitizer.known_count() == ready_for:
            lines.update(ready)
        else:
            # Where a line names none of the names learned since, the pattern of all names matches there as
            # that of the names known then did (it is tried only where a name stands): keep those spans.
            low = low or _lower(text)
            again = set(_lines_naming(low, sanitizer._all_names().difference(ready_names), set(lines)))
            lines.update((at, span) for at, span in ready.items() if text.rfind("\n", 0, at) + 1 not in again)
            _replace_names(sanitizer, text, low, sorted(again), lines)
    else:
        low = low or _lower(text)
        if names is None:
            names = _lines_naming(low, sanitizer.known_names(), set(lines))
        _replace_names(sanitizer, text, low, names, lines)
    out: list[str] = []
    pos = 0
    for start in sorted(lines):
        end, replaced = lines[start]
        out.append(text[pos:start])
        out.append(replaced)
        pos = end
    out.append(text[pos:])
    return "".join(out)
