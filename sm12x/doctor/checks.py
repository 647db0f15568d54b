"""Every preflight check, in display order: Doctor(host, options).run().

The checks are in the modules named for what they look at: sm12x.doctor.gpu
(GPUs, driver, recipe, GPU memory), pcie (P2P, links, IOMMU/ACS, power on multi-GPU rigs), spark
(CMA/KHO, driver options, memory beside sglang's pool on unified memory), container (Docker, Compose, buildx, the
NVIDIA runtime, the image, the same image on the peer), storage (the model
folder, disk, shared memory, .env in git, swap) and pair (RDMA, the GID, the
socket interfaces, the peer). A later check reads what an earlier one found
(the recipe needs the GPUs, the disk check Docker's data root, same-image the
local image id), so the order is fixed here.
"""

from __future__ import annotations

from collections.abc import Callable

from sm12x.doctor import container, gpu, pair, pcie, spark, storage
from sm12x.doctor.core import Check, Context, Options

__all__ = ["Check", "Doctor", "Options"]

Step = tuple[str, Callable[[Context], None]]

# (progress label, check) on every machine.
STEPS: tuple[Step, ...] = (
    ("GPUs", gpu.check_gpus),
    ("driver", gpu.check_driver),
    ("recipe", gpu.check_recipe),
    ("GPU memory", gpu.check_gpu_memory),
    ("Docker", container.check_docker),
    ("model", storage.check_model),
    ("disk", storage.check_disk),
    ("shared memory", storage.check_shm),
    (".env", storage.check_env_file),
)
# Then, on a node of two or more discrete GPUs (pcie.applies).
PCIE_STEPS: tuple[Step, ...] = (
    ("P2P", pcie.check_p2p),
    ("PCIe links", pcie.check_links),
    ("IOMMU and ACS", pcie.check_iommu_acs),
    ("power limits", pcie.check_power),
)
# On a DGX Spark (spark.applies).
SPARK_STEPS: tuple[Step, ...] = (
    ("CMA", spark.check_cma),
    ("driver options", spark.check_driver_options),
    ("memory beside the pool", spark.check_autotune_memory),
)
# Then, where a DGX Spark pair applies (pair.applies).
PAIR_STEPS: tuple[Step, ...] = (
    ("RDMA", pair.check_rdma),
    ("RoCE interface", pair.check_interfaces),
    ("peer", pair.check_peer),
    ("peer interfaces", spark.check_peer_interfaces),
    ("same image", container.check_same_image),
    ("swap", storage.check_swap),
)


class Doctor(Context):
    """One run of every check that applies to this machine."""

    def run(self) -> list[Check]:
        self.run_steps(STEPS)
        if pcie.applies(self):
            self.run_steps(PCIE_STEPS)
        if spark.applies(self):
            self.run_steps(SPARK_STEPS)
        if pair.applies(self):
            self.run_steps(PAIR_STEPS)
        return self.checks

    def run_steps(self, steps: tuple[Step, ...]) -> None:
        for label, step in steps:
            self.progress(label)
            step(self)
