"""The provenance record every shard of a run carries: what a reader needs to trust a number."""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fewtrans_board.core.version import __version__
from fewtrans_board.hpe.protocols import hpe_roles
from fewtrans_board.registry.files import files_record
from fewtrans_board.runner.spec import cpu_flags_digest, cpu_model, resolved_threads

if TYPE_CHECKING:
    from fewtrans_board.runner.context import RunContext


def run_provenance(ctx: RunContext) -> dict[str, Any]:
    """Everything a reader needs to trust a number (stored in every shard).

    Args:
        ctx: the run.

    Returns:
        Identity, code and model versions, protocol, manifest, preprocessing, the numeric
        environment (with the isolation the plugins ran under) and batching settings.
    """
    import numpy
    import torch

    return {
        "run_id": ctx.run_id(),
        "identity": ctx.identity(),
        "package": {"name": "fewtrans-board", "version": __version__},
        "model": {
            "name": ctx.model.name,
            **ctx.model.provenance(),
            # the installed code behind the pin, checked again at verification
            **files_record(ctx.model.distribution),
            "weights_id": ctx.model_facts.weights_id,
            "info": ctx.model_facts.info,
            "family": ctx.model.obj.family,
        },
        "adapter": {
            "name": ctx.adapter_entry.name,
            **ctx.adapter_entry.provenance(),
            **files_record(ctx.adapter_entry.distribution),
            "centre": ctx.centre.to_dict(),
            "paper": ctx.adapter_cls.paper,
            "schema": ctx.adapter_cls.schema(),
            **({} if ctx.recipe is None else {"recipe": ctx.recipe.describe()}),
        },
        "hpe": {
            **ctx.hpe.describe(),
            "hash": ctx.hpe.digest(ctx.adapter_cls, ctx.centre),
            "grid_size": len(ctx.grid),
            "roles": hpe_roles(ctx.adapter_cls),
        },
        "centre_search": ctx.centre_record,
        "manifest": {
            "file": Path(ctx.spec.manifest).name,
            "sha256": ctx.manifest.sha256,
            "dataset": ctx.manifest.dataset,
            "protocol": ctx.manifest.meta["protocol"],
            "episodes": len(ctx.episodes),
        },
        "preprocessing": ctx.preprocessing.to_dict(),
        "environment": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "numpy": numpy.__version__,
            "device": ctx.spec.device,
            "device_name": (
                torch.cuda.get_device_name(ctx.spec.device)
                if ctx.spec.device.startswith("cuda")
                else cpu_model()
            ),
            "cpu_flags": cpu_flags_digest(),
            "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
            "torch_threads": resolved_threads(ctx.spec),
            "isolation": ctx.isolation.value,
        },
        "batching": {
            "mode": ctx.spec.batching,
            "max_memory_option": ctx.spec.max_memory,
            "plans": ctx.lockstep.enabled,
            "heads": ctx.lockstep.heads,
            "max_memory": ctx.lockstep.memory.describe(),
        },
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
