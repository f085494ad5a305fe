"""Every trainable family under `DistributedDataParallel` with `Trainer`'s defaults: one `torchrun` run of two CPU
processes (gloo) trains each family for two steps, with and without gradient checkpointing, and both processes'
parameters and buffers must equal those of one process reading the same global batches (`utils/trainer_matrix.py
--ddp`, plain SGD so that a loss divided wrongly for the global batch shows)."""

import pytest
import torch

from utils.trainer_matrix import DDP_SETTINGS, FAMILIES, run_ddp

pytestmark = pytest.mark.skipif(
    not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
    reason="torch.distributed with the gloo backend is not available in this torch build",
)


def test_every_family_trains_under_ddp_as_on_one_process():
    table = run_ddp(list(FAMILIES), list(DDP_SETTINGS), timeout=600)
    assert set(table) == {(family, setting) for family in FAMILIES for setting in DDP_SETTINGS}
    failed = {f"{family} {setting}": f"{outcome}: {detail}" for (family, setting), (outcome, detail) in table.items()
              if outcome != "ok"}
    assert not failed, failed
