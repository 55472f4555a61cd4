"""The H100 reference GEMM's plans the GPU tests exercise, as the launcher launches them on a 132-SM H100 (the
format of scripts/gemm_plans.py): the GPU tests read them off the captured launches, tests/test_gemm_plans.py off
the launcher compiled on the CPU, so that a change to the cost model that moves a case off its plan fails on CI."""

from __future__ import annotations

from dataclasses import dataclass, replace

from pytest_ptxbench.task.catalogue import Family


@dataclass(frozen=True)
class Case:
    task: str
    m: int
    plan: str  # at M
    sanitized: str  # at the sanitizers' M (the family's, 200, unless sanitizer_m says)
    sanitizer_m: int | None = None

    def family(self, gemm: Family) -> Family:
        """The GEMM family with its sanitizers at this case's M, where the case sets one."""
        return gemm if self.sanitizer_m is None else replace(gemm, sanitizer_shape={"M": self.sanitizer_m})


# The large kernel's three split-K reductions.
SPLITS = {
    # 168 tiles: 132 whole, 36 split 3 ways in the same launch (slabs; the memset zeroes their counters)
    "last-wave-split": Case(
        "gemm-n5376-k4096", 972, "memset; large grid 132 cluster 1", "narrow<2, 5> grid 84 cluster 1"
    ),
    # 48 tiles, each split 2 ways across a cluster (distributed shared memory); no task's M 200 takes it
    "cluster-split": Case("gemm-n4096-k14336", 289, "large grid 96 cluster 2", "large grid 96 cluster 2", 289),
    # 42 tiles split 3 ways, where 42 clusters of 3 do not fit: a chain of slices (its counters zeroed)
    "chained-split": Case(
        "gemm-n5376-k21504", 232, "memset; large grid 126 cluster 1", "memset; large grid 126 cluster 1"
    ),
}

# The BN = 128 kernel's multicast pairs.
PAIRS = {
    # 120 tiles of 128x128 in 60 clusters of two, each pair sharing its A rows
    "tall-pairs": Case("gemm-n5120-k2048", 289, "narrow<2, 5> grid 120 cluster 2", "narrow<2, 5> grid 80 cluster 1"),
    # 96 tiles of 64x128 in 48 pairs; at M 200, 96 tiles of 128x128 in pairs
    "short-pairs": Case("gemm-n6144-k4096", 70, "narrow<1, 8> grid 96 cluster 2", "narrow<2, 5> grid 96 cluster 2"),
}

# The 256x160 kernel, its sanitizers at the same M.
WIDE = {
    # 128 tiles in one wave, where 128x256 tiles take 160; the last m-tile's rows past M read as zeros
    "one-wave": Case("gemm-n5120-k2048", 901, "wide grid 128 cluster 1", "wide grid 128 cluster 1", 901),
    # 130 tiles ragged in both M and N (2048 = 12.8 x 160 columns), where 128x256 tiles take 152
    "ragged": Case("gemm-n2048-k4096", 2379, "wide grid 130 cluster 1", "wide grid 130 cluster 1", 2379),
}
