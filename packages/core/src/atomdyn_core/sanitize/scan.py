"""The whole-file fast path: find the few lines that can hold something to hide, sanitize only those.

:meth:`Sanitizer.sanitize <atomdyn_core.sanitize.sanitizer.Sanitizer.sanitize>` runs every pattern on every
line; a raw log of gigabytes holds something to hide on a few lines in a hundred. :func:`sanitize_block` gives
the same result, character for character, and leaves the sanitizer in the same state: it searches the whole
block (not line by line) with a few anchored *scanners*, each of which matches wherever one of the sanitizer's
patterns could match, and more (a superset, never less); lines that no scanner hits cannot be changed by any
pattern, so only the known names (hosts, users, accounts) are replaced there.

Each scanner starts with one literal character (the regex engine skips to it quickly) and checks the rest
with look-behinds, and runs on the lower-cased block (the patterns that ignore case see the same letters).
A line holding a character outside ASCII goes to the line-by-line path whole: lower-casing and case-blind
matching of a few such characters (the Kelvin sign, the dotless i) would make a scanner miss.
"""

from __future__ import annotations

import re

from atomdyn_core.sanitize import sanitizer as _s

__all__ = ["sanitize_block"]

_HEX = "[0-9a-f]"
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
    *("signature", "sig"),  # cloud-key (AccountKey=, SharedAccessKey= end in key)
)


def _ending_at_separator(between: str) -> str:
    """Look-behinds true where a key of ``_KEY_SUFFIXES`` ends ``between`` before the separator just read."""
    by_width: dict[int, list[str]] = {}
    for key in _KEY_SUFFIXES:
        by_width.setdefault(len(key), []).append(re.escape(key))
    return "|".join(rf"(?<=(?:{'|'.join(keys)}){between}[=:])" for _, keys in sorted(by_width.items()))


_BARE_KEY = _ending_at_separator("")
_SPACED_KEY = _ending_at_separator(" ") + "|" + _ending_at_separator("[\"'] ")
_QUOTED_KEY = _ending_at_separator("[\"']")


def _last_letters(n: int) -> str:
    return "".join(sorted({key[-n] for key in _KEY_SUFFIXES}))


# A cheap first test: each of the last three letters is one that some key has there (most separators follow
# other words, numbers or colons); every key is at least three letters long.
_KEY_BEFORE = (
    rf"(?<=[{_last_letters(3)}][{_last_letters(2)}][{_last_letters(1)}][=:])(?:{_BARE_KEY})"
    rf"|(?<=[\"'\s][=:])"  # a quote or a space before the separator
    rf"(?:(?<=[\"'][=:])(?:{_QUOTED_KEY})"
    rf"|(?<=[a-z\"'] [=:])(?:{_SPACED_KEY})"  # host = x
    rf"|(?<={_NOT_NEWLINE_SPACE}{{2}}[=:])|(?<=[^ \S][=:]))"  # more or other spaces: the separator alone
)

# One scanner per anchor character; each comment names the patterns whose matches it covers.
_SCANNERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        # _IPV4 (from its first dot; 127.x is left alone by the pattern), _FQDN (its top-level-domain word)
        "dot",
        re.compile(
            rf"\.(?:(?<!127\.)\d{{1,3}}\.\d{{1,3}}\.\d{{1,3}}(?!\w|\.\d)"
            rf"|(?=[a-z]{{2,11}}(?![\w-]))(?:{_s._TLDS})(?![\w-]))"  # a word of 2 to 11 letters first
        ),
    ),
    (
        # _IPV6 with :: (neither side a letter beyond f, no longer word before it)
        "colons",
        re.compile(
            rf"::(?![g-z_])(?<![g-z_.]::)(?<![g-z_]{_HEX}::)(?<![g-z_]{_HEX}{{2}}::)"
            rf"(?<![g-z_]{_HEX}{{3}}::)(?<![g-z_]{_HEX}{{4}}::)(?<!{_HEX}{{5}}::)"
        ),
    ),
    (
        # _URL_CREDENTIALS and _URL_HOST (://); _IPV6 in full and _MAC (five colons from the first);
        # keys before a colon (_HOST_KEY, _USER_KEY, _SECRET_ASSIGNMENT, JSON keys of _SLURM_KEYS)
        "colon",
        re.compile(
            rf":(?://|(?<={_HEX}:){_HEX}{{1,4}}:{_HEX}{{1,4}}:{_HEX}{{1,4}}:{_HEX}{{1,4}}:|{_KEY_BEFORE})"
        ),
    ),
    # keys before an equals sign: _HOST_KEY, _USER_KEY, _SECRET_ASSIGNMENT, _SLURM_KEYS, cloud-key
    ("equals", re.compile(f"=(?:{_KEY_BEFORE})")),
    ("at", re.compile("@")),  # _USER_AT_HOST
    (
        # _HOME, _CLUSTER_PATH
        "slash",
        re.compile(
            r"/(?:home/|users/|(?:lustre|gpfs|scratch|nfs|fsx|mnt|shared|projects?|proj|data|datasets|beegfs|"
            r"cephfs|work|vast|weka)/)"
        ),
    ),
    (
        # _SECRET_FLAG, host flags of _HOST_KEY, Slurm flags of _SLURM_KEYS, _SLURM_ON_HOST's slurmstepd-,
        # tokens ending in a hyphen (sk-, nvapi-, xox?-)
        "hyphen",
        re.compile(
            r"-(?:[wx][= ]"
            r"|-(?:nodelist|exclude|account|partition|qos)[= ]"
            r"|-[a-z0-9_.-]*?(?:password|passwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|"
            rf"credentials?){_NOT_NEWLINE_SPACE}"
            r"|(?<=slurmstepd-)|(?<=sk-)|(?<=nvapi-)|(?<=xox[abprs]-))"
        ),
    ),
    ("stars", re.compile(r"\*\*\* ")),  # _SLURM_ON_HOST
    ("sbatch", re.compile(r"#sbatch")),  # _SLURM_KEYS (-A, -p)
    # tokens: hf_, gh?_ and github_pat_, AKIA/ASIA/AIza, eyJ, bearer and basic
    ("f", re.compile(r"f_(?<=hf_)")),
    ("h", re.compile(r"h[pousr]_(?<=gh[pousr]_)")),
    ("b", re.compile(rf"b(?:_pat_(?<=github_pat_)|earer{_NOT_NEWLINE_SPACE}|asic{_NOT_NEWLINE_SPACE})")),
    ("a", re.compile(r"a(?:kia|sia|iza)")),
    ("j", re.compile(r"j(?<=eyj)")),
)
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_DOTTED_I = "\u0130"  # the one character whose lower case is two characters


def _line_bounds(text: str, at: int) -> tuple[int, int]:
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    return start, (len(text) if end < 0 else end + 1)


def _hit_lines(text: str, low: str, sanitizer: _s.Sanitizer) -> set[int]:
    """Start offsets of the lines that some pattern may change."""
    starts: set[int] = set()
    for _, scanner in _SCANNERS:
        pos = 0
        while (m := scanner.search(low, pos)) is not None:
            start, pos = _line_bounds(low, m.start())
            starts.add(start)
    for path in sanitizer._paths:
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


def _known_name_lines(low: str, sanitizer: _s.Sanitizer, skip: set[int]) -> list[int]:
    """Start offsets of lines (not in ``skip``) that name a known host, user or account."""
    starts: set[int] = set()
    for name in sanitizer.known_names():
        pos = 0
        while (at := low.find(name, pos)) >= 0:
            start, pos = _line_bounds(low, at)
            if start not in skip:
                starts.add(start)
    return sorted(starts)


def _line_by_line(sanitizer: _s.Sanitizer, text: str) -> str:
    sanitizer.learn(text)
    return sanitizer.sanitize(text)


def sanitize_block(sanitizer: _s.Sanitizer, text: str) -> str:
    """``sanitizer.learn(text)`` then ``sanitizer.sanitize(text)``, found faster: the same output, the same
    values learned and numbered."""
    if "PRIVATE KEY" in text:
        return _line_by_line(sanitizer, text)  # a key block spans lines: that path matches it whole
    text = _s.strip_colours(text)
    low = text.replace(_DOTTED_I, "?").lower() if not text.isascii() else text.lower()
    if len(low) != len(text):
        return _line_by_line(sanitizer, text)
    hits = sorted(_hit_lines(text, low, sanitizer))
    known_before = sanitizer.known_count()
    lines = {}
    for start in hits:
        _, end = _line_bounds(text, start)
        lines[start] = (end, sanitizer._lines(text[start:end]))
    if sanitizer.known_count() != known_before:
        # A name learned on a later line is replaced on the earlier ones too (as the line-by-line path does
        # when it has learned the whole text first): sanitize the hit lines again, knowing every name.
        for start, (end, _) in lines.items():
            lines[start] = (end, sanitizer._lines(text[start:end]))
    for start in _known_name_lines(low, sanitizer, set(lines)):
        _, end = _line_bounds(text, start)
        lines[start] = (end, sanitizer._bare_words(text[start:end]))
    out: list[str] = []
    pos = 0
    for start in sorted(lines):
        end, replaced = lines[start]
        out.append(text[pos:start])
        out.append(replaced)
        pos = end
    out.append(text[pos:])
    return "".join(out)
