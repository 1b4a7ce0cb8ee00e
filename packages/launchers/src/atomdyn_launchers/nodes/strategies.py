"""How ``nodes.prepare`` makes the images present (:mod:`.prepare` says what each strategy does), with nothing
imported: ``invoke nodes.prepare``'s default and help come from here (`invoke --list` loads no node code)."""

from __future__ import annotations

STRATEGIES = ("load", "build")
DEFAULT_STRATEGY = "load"
