"""What one bench run measures: the cache shape, the sweep, the devices, the UCX settings to try."""

from __future__ import annotations

from dataclasses import dataclass, field

from nixl_compat.bench.layout import KVShape

MiB = 1 << 20


@dataclass(frozen=True)
class UcxConfig:
    """UCX environment for both agents of one pair of processes (UCX reads it when the agent starts)."""

    name: str
    env: tuple[tuple[str, str], ...] = ()
    progress_thread: bool = True  # NIXL's own progress thread; it spins, which costs a core
    threads: int = 0  # NIXL UCX backend worker threads (0: one worker, NIXL's default)
    # With threads, a transfer of at least this many descriptors is split across the threads
    # (NIXL's `split_batch_size`, default 1024: a KV block of 72 descriptors is never split).
    split: int = 0

    @classmethod
    def parse(cls, text: str) -> UcxConfig:
        """`NAME` or `NAME:VAR=VALUE,...`: UCX_*/NIXL_* variables, `progress_thread=on|off`,
        `threads=N` and `split=N`."""
        name, _, rest = text.partition(":")
        if not name:
            raise ValueError(f"UCX config {text!r}: empty name (expected NAME or NAME:VAR=VALUE,...)")
        pairs, progress, counts = [], True, {"threads": 0, "split": 0}
        for item in filter(None, rest.split(",")):
            var, eq, value = item.partition("=")
            if eq and var == "progress_thread" and value in ("on", "off"):
                progress = value == "on"
            elif eq and var in counts and value.isdigit():
                counts[var] = int(value)
            elif eq and var.startswith(("UCX_", "NIXL_")):
                pairs.append((var, value))
            else:
                raise ValueError(
                    f"UCX config {text!r}: {item!r} is not UCX_VAR=VALUE, NIXL_VAR=VALUE, "
                    "progress_thread=on|off, threads=N or split=N"
                )
        if counts["split"] and not counts["threads"]:
            raise ValueError(f"UCX config {text!r}: split=N needs threads=N (it splits across threads)")
        return cls(name, tuple(pairs), progress, counts["threads"], counts["split"])

    def backend_params(self) -> dict[str, str]:
        """The UCX backend's init parameters (NIXL reads them when the backend is created)."""
        params = {"num_threads": str(self.threads)} if self.threads else {}
        if self.split:
            params["split_batch_size"] = str(self.split)
        return params


# The settings that moved the figures (docs/nixl-path.md), as the bench's `tuned` configuration:
# - NIXL's progress thread off: it spins on the initiator's core and halved H200 throughput;
# - CPU: UCX's cma copies a put in 512 KiB segments, one per progress call; 4 MiB moves a KV block in one;
# - CUDA: NIXL's SGL WRITE posts a transfer's descriptors as one cuMemcpyBatchAsync instead of one
#   copy and one event per descriptor (NIXL 1.5.1 applies it to WRITE only).
TUNED_SETTINGS = {
    "cpu": "progress_thread=off,UCX_CMA_SEG_SIZE=4m",
    "cuda": "progress_thread=off,NIXL_UCX_SGL_ENABLE=1",
}


def tuned(device: str) -> UcxConfig:
    if device not in TUNED_SETTINGS:
        raise ValueError(f"no tuned UCX settings for device {device!r} (known: {sorted(TUNED_SETTINGS)})")
    return UcxConfig.parse(f"tuned:{TUNED_SETTINGS[device]}")


def expand_presets(configs: tuple[UcxConfig, ...], device: str) -> tuple[UcxConfig, ...]:
    """A bare `tuned` (no settings of its own) becomes the device's tuned settings."""
    return tuple(tuned(device) if c == UcxConfig("tuned") else c for c in configs)


def default_configs(device: str) -> tuple[UcxConfig, ...]:
    """NIXL as vLLM configures it, against the tuned settings: both in one run."""
    return (UcxConfig("default"), tuned(device))


@dataclass(frozen=True)
class BenchSpec:
    device: str = "cpu"  # cpu: DRAM numpy buffers; cuda: VRAM torch tensors
    src_gpu: int = 0
    dst_gpu: int = 0
    shape: KVShape = field(default_factory=KVShape)
    num_blocks: int = 64
    block_counts: tuple[int, ...] = (1, 4, 16, 64)
    sizes: tuple[int, ...] = (1 * MiB, 16 * MiB, 256 * MiB)
    lanes: tuple[int, ...] = (1, 4)
    iters: int = 200
    warmup: int = 3
    timeout_s: float = 300.0
    ucx: tuple[UcxConfig, ...] = (UcxConfig("default"),)

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, got {self.device!r}")
        if self.iters < 2:
            raise ValueError(f"iters must be at least 2 (one cold, one warm), got {self.iters}")
        too_many = [n for n in self.block_counts if n <= 0 or n > self.num_blocks]
        if too_many:
            raise ValueError(f"block counts {too_many} must be in 1..num_blocks ({self.num_blocks})")
        if any(s <= 0 for s in self.sizes) or any(lane <= 0 for lane in self.lanes):
            raise ValueError("sizes and lanes must be positive")
        names = [u.name for u in self.ucx]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"UCX config names must be non-empty and unique, got {names}")

    def iters_for(self, nbytes: int) -> int:
        """Fewer repetitions for big transfers so a sweep stays within minutes."""
        if nbytes >= 64 * MiB:
            return max(10, self.iters // 10)
        return self.iters


def quick_spec(device: str = "cpu") -> BenchSpec:
    """Correctness run for CI: the real block shape, few repetitions, small sweep."""
    return BenchSpec(
        device=device,
        num_blocks=4,
        block_counts=(1, 2),
        sizes=(1 * MiB,),
        lanes=(1, 2),
        iters=5,
        warmup=1,
        timeout_s=120.0,
        ucx=default_configs(device),
    )
