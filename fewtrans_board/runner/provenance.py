"""A run's identity, numeric environment and provenance: functions of its plan.

The plan and the few facts only a loaded model knows
(:class:`~fewtrans_board.runner.worker.remote.ModelFacts`) decide them. ``run.json`` holds
the identity and the numeric environment; every shard carries the provenance record.
"""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path
from typing import Any

from fewtrans_board.api.backbone import Preprocessing
from fewtrans_board.core.version import __version__
from fewtrans_board.hpe.protocols import hpe_roles
from fewtrans_board.registry.files import files_record
from fewtrans_board.results.documents import RunProvenance
from fewtrans_board.results.row_schema import SCHEMA_VERSION, run_id_of
from fewtrans_board.runner.plan import RunPlan, lockstep_settings
from fewtrans_board.runner.spec import cpu_flags_digest, cpu_model, resolved_threads
from fewtrans_board.runner.worker.remote import ModelFacts


def run_identity(plan: RunPlan, weights_id: str, universe: str | None) -> dict[str, Any]:
    """The fields that define a run's results (paths and executor choices excluded).

    Stored in ``run.json`` and checked on resume. A published recipe (name and version)
    is recorded only where one is run, so the identities, and run ids, of HPE runs are
    those they always were.

    Args:
        plan: the run.
        weights_id: the loaded model's weights identity.
        universe: its ``feature_universe`` (:func:`~fewtrans_board.runner.image_scope.feature_universe`).
    """
    spec = plan.spec
    identity: dict[str, Any] = {
        "model": spec.model,
        "weights_id": weights_id,
        "adapter": spec.adapter,
        "hpe": spec.hpe,
        "grid": [c.to_dict() for c in plan.grid],
        "manifest_sha256": plan.manifest.sha256,
        "limit": spec.limit,
        "shards": plan.shard_count,
        "device": spec.device,
        "feature_cache": spec.feature_cache,
        "threads": resolved_threads(spec),
        # Lockstep training equals the loop only up to rounding: shards never mix modes.
        "batching": spec.batching,
    }
    recipe = plan.centre.recipe
    if recipe is not None:
        identity["recipe"] = {"name": recipe.name, "version": recipe.version}
    if universe is not None:  # verification must chunk the features the same way
        identity["feature_universe"] = universe
    return identity


def run_id(plan: RunPlan, weights_id: str, universe: str | None) -> str:
    """Short hash of the run's identity."""
    return str(run_id_of(run_identity(plan, weights_id, universe)))


def run_environment(plan: RunPlan, device: str) -> dict[str, Any]:
    """Libraries, processor and plugin versions that change the run's numbers on ``device``."""
    code = {"fewtrans-board": __version__}
    for entry in (plan.adapter_entry, plan.model):
        provenance = entry.provenance()
        code[str(provenance["distribution"])] = str(provenance["version"])
    return numeric_environment(device, code)


def numeric_environment(device: str, code: dict[str, str]) -> dict[str, Any]:
    """What, besides the identity, changes the numbers a run computes.

    Library versions and the processor (the CPU model for CPU runs; GPU, CUDA and cuDNN
    for GPU runs) select different kernels. A resume must match the ``run.json`` copy.

    Args:
        device: the run's torch device.
        code: versions of the distributions whose code computes the results.
    """
    import numpy
    import torch

    env: dict[str, Any] = {
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "machine": platform.machine(),
        "code": dict(sorted(code.items())),
    }
    if device.startswith("cuda"):
        env["cuda"] = torch.version.cuda
        env["cudnn"] = torch.backends.cudnn.version()  # type: ignore[no-untyped-call]
        env["gpu"] = torch.cuda.get_device_name(device)
    else:
        env["cpu"] = cpu_model()
        env["cpu_flags"] = cpu_flags_digest()
    return env


def environment_differences(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``key: stored -> current`` for every entry that differs."""
    return [
        f"{key}: {stored.get(key)!r} -> {current.get(key)!r}"
        for key in sorted(set(stored) | set(current))
        if stored.get(key) != current.get(key)
    ]


def preprocessing(plan: RunPlan, facts: ModelFacts) -> Preprocessing:
    """The manifest protocol's transform at the backbone's input size."""
    return Preprocessing.named(plan.manifest.preprocessing, facts.image_size)


def run_provenance(
    plan: RunPlan, facts: ModelFacts, device: str, universe: str | None
) -> dict[str, Any]:
    """Everything a reader needs to trust a number (stored in every shard).

    Args:
        plan: the run.
        facts: the loaded model's facts, wherever it runs.
        device: the device this process computes on (its batching settings).
        universe: its ``feature_universe``, as for :func:`run_identity`.

    Returns:
        Identity, code and model versions, protocol, manifest, preprocessing, the numeric
        environment (with the isolation the plugins ran under) and batching settings.
    """
    identity = run_identity(plan, facts.weights_id, universe)
    return {
        "run_id": run_id_of(identity),
        "identity": identity,
        "package": {"name": "fewtrans-board", "version": __version__},
        "model": _model(plan, facts),
        "adapter": _adapter(plan),
        "hpe": {
            **plan.hpe.describe(),
            "hash": plan.hpe.digest(plan.adapter_cls, plan.centre.config),
            "grid_size": len(plan.grid),
            "roles": hpe_roles(plan.adapter_cls),
        },
        "centre_search": plan.centre.record,
        "manifest": {
            "file": Path(plan.spec.manifest).name,
            "sha256": plan.manifest.sha256,
            "dataset": plan.manifest.dataset,
            "protocol": plan.manifest.meta["protocol"],
            "episodes": len(plan.episodes),
        },
        "preprocessing": preprocessing(plan, facts).to_dict(),
        "environment": _environment(plan),
        "batching": _batching(plan, device),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def shard_provenance(
    provenance: dict[str, Any], shard: dict[str, Any], adapter_records: dict[str, Any]
) -> RunProvenance:
    """The typed record a shard carries: the run's provenance, the shard, adapter choices.

    A shard never carries provenance that a reader cannot parse.

    Args:
        provenance: :func:`run_provenance` of the run.
        shard: which shard, what it covers and what it cost.
        adapter_records: per-episode choices adapters reported (``{}``: none).
    """
    metadata = {**provenance, "shard": shard}
    if adapter_records:  # only adapters that report choices (IMS-f) add this key
        metadata["adapter_records"] = adapter_records
    return RunProvenance.of({**metadata, "schema_version": SCHEMA_VERSION})


def _model(plan: RunPlan, facts: ModelFacts) -> dict[str, Any]:
    return {
        "name": plan.model.name,
        **plan.model.provenance(),
        # the installed code behind the pin, checked again at verification
        **files_record(plan.model.distribution),
        "weights_id": facts.weights_id,
        "info": facts.info,
        "family": plan.model.obj.family,
    }


def _adapter(plan: RunPlan) -> dict[str, Any]:
    entry, recipe = plan.adapter_entry, plan.centre.recipe
    return {
        "name": entry.name,
        **entry.provenance(),
        **files_record(entry.distribution),
        "centre": plan.centre.config.to_dict(),
        "paper": plan.adapter_cls.paper,
        "schema": plan.adapter_cls.schema(),
        **({} if recipe is None else {"recipe": recipe.describe()}),
    }


def _environment(plan: RunPlan) -> dict[str, Any]:
    import numpy
    import torch

    device = plan.spec.device
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "numpy": numpy.__version__,
        "device": device,
        "device_name": (
            torch.cuda.get_device_name(device) if device.startswith("cuda") else cpu_model()
        ),
        "cpu_flags": cpu_flags_digest(),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "torch_threads": resolved_threads(plan.spec),
        "isolation": plan.isolation.value,
    }


def _batching(plan: RunPlan, device: str) -> dict[str, Any]:
    lockstep = lockstep_settings(plan.spec, device)
    return {
        "mode": plan.spec.batching,
        "max_memory_option": plan.spec.max_memory,
        "plans": lockstep.enabled,
        "heads": lockstep.heads,
        "max_memory": lockstep.memory.describe(),
    }
