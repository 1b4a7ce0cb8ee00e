"""The real engine's climb, run once per session and shared (a plain module, like clusterinfra).

The climb on the real model's P/D recipe (recipes/rehearsal-smollm2-1p1d.yaml) runs every rung for real: the
NIXL probe, real vLLM workers aggregated on one and two nodes (the one-node run also asks the recipe's capitals
items, its answers the reference), P/D with every KV gate (asking the same items), and the accuracy rung, which
judges the two runs' answers: each score at least the recipe's floor, and P/D's answers item by item the
aggregated run's. The tests that used to start runs of their own (the P/D test, vLLM against the transformers
reference, the KV corruption test that needs the climb's references) assert on its run directories instead: one
model start per rung, not one per test. The climb asks the recipe's accuracy check unchanged (``CLIMB_ITEMS``
is its item count), so the floor it gates is the one measured for those items (docs/real-engine-rehearsal.md).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from atomdyn_core.lock import find_lock_path
from atomdyn_launchers.certify.ladder import Certification, climb
from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.config.recipes import load_recipe
from atomdyn_launchers.engines.base import ProbeOptions
from atomdyn_launchers.profiles import smollm2
from atomdyn_launchers.profiles.models import get_model
from atomdyn_launchers.run.options import Flags, LaunchOptions, resolve
from atomdyn_launchers.run.plan import model_path

RECIPE = find_lock_path().resolve().parent / "recipes" / "rehearsal-smollm2-1p1d.yaml"
ACCURACY = load_recipe(RECIPE).accuracy
CLIMB_ITEMS = ACCURACY.items if ACCURACY is not None else 0  # the recipe's: its floor was measured on these


def climb_options(runs_root: Path) -> LaunchOptions:
    """The recipe's options, its accuracy check as it is: an absolute floor on a task the model can do."""
    recipe = load_recipe(RECIPE)
    check = recipe.accuracy
    assert check is not None and check.task == "capitals" and check.threshold > 0, (RECIPE, check)
    return replace(resolve("disagg", None, Flags(), recipe), runs_root=runs_root)


@dataclass(frozen=True)
class RealClimb:
    cert: Certification
    options: LaunchOptions  # the climb's: the recipe (with its accuracy section), the runs' root
    config: ClusterConfig

    def row(self, name: str) -> dict[str, Any]:
        rows = {r["name"]: r for r in self.cert.rungs}
        assert name in rows, f"the climb stopped before rung {name}: {json.dumps(self.cert.to_json())[:3000]}"
        return rows[name]

    def run_dirs(self, name: str) -> list[Path]:
        """The run directories a rung names as its evidence (the accuracy rung: aggregated, then P/D)."""
        row = self.row(name)
        assert row["verdict"] == "pass", (name, row["detail"])
        return [Path(part) for part in str(row["evidence"]).split(", ") if part]

    def serving_run_dirs(self) -> list[Path]:
        """Every run directory rungs 5-8 name (rung 8 names rungs 5 and 7's runs again)."""
        return [d for name in ("agg-single", "agg-two", "disagg", "accuracy") for d in self.run_dirs(name)]


def place_model(built: Path, config: ClusterConfig) -> Path:
    """The session's build of the real model (test_smollm2's) linked into the cluster's SHARED_DIR/models, where
    the runs' preflight finds it built and checks its digest instead of converting the wheel a second time."""
    profile = get_model("smollm2-135m-instruct")
    target = model_path(config, profile)
    if not smollm2.is_built(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        os.chmod(staging, 0o755)
        for file in built.iterdir():
            try:
                os.link(file, staging / file.name)
            except OSError:  # another filesystem
                shutil.copy2(file, staging / file.name)
        shutil.rmtree(target, ignore_errors=True)
        os.replace(staging, target)
    assert smollm2.build(target, profile.build_digest) == profile.build_digest
    return target


def climb_once(config: ClusterConfig, base: Path, built: Path) -> RealClimb:
    place_model(built, config)
    options = climb_options(base / "runs")
    cert = climb(config, options, ProbeOptions(), root=base / "runs" / "certify", recipe_path=str(RECIPE))
    return RealClimb(cert, options, config)
