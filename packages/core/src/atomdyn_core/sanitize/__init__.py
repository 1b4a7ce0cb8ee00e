"""The one sanitizer: everything that leaves a run (logs, excerpts, summaries, fingerprints) passes through it.

- :mod:`.sanitizer`: the patterns and :class:`Sanitizer`, which sanitizes a text line by line;
- :mod:`.scan`: the whole-file fast path, which finds the few lines that can hold something to hide and gives
  only those to the line-by-line sanitizer (the output is the same, character for character);
- :mod:`.files`: whole files, streamed in blocks of bounded size, written by temp file and rename;
- :mod:`.parallel`: whole files on worker processes, numbered in file order by the calling one (same output);
- :mod:`.loggen` and ``python -m atomdyn_core.sanitize bench``: realistic generated logs and the throughput figure.
"""

from atomdyn_core.sanitize.files import sanitize_file, sanitize_file_to
from atomdyn_core.sanitize.sanitizer import Sanitizer, node_names, sanitize

__all__ = ["Sanitizer", "node_names", "sanitize", "sanitize_file", "sanitize_file_to"]
