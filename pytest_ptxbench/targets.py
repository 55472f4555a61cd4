"""GPU targets a kernel is written for: how to build for them and which devices can run them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    name: str  # the option value and test-id part: "h100"
    arch: str  # SASS architecture: "sm_90a"
    capability: tuple[int, int]  # compute capability a device must have
    label: str  # for humans: "H100-class"

    @property
    def gencode(self) -> str:
        virtual = self.arch.replace("sm_", "compute_")
        return f"-gencode=arch={virtual},code={self.arch}"

    @property
    def device_arch(self) -> str:
        """The plain architecture of a device that runs this target: "sm_90"."""
        return "sm_{}{}".format(*self.capability)


TARGETS: dict[str, Target] = {
    "h100": Target("h100", "sm_90a", (9, 0), "H100-class"),
    "b200": Target("b200", "sm_100a", (10, 0), "B200-class"),
}


def select_targets(option: str) -> list[Target]:
    """`--ptx-gpu` value → targets; `all` means every target."""
    if option == "all":
        return list(TARGETS.values())
    return [TARGETS[option]]
