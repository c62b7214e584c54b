"""The weights gate: verification re-runs with the checkpoint the runs used, or not at all.

A run records ``weights_id`` (``sha256:<hex of the checkpoint file>`` for a local file) and
``submission.toml`` may record ``weights_sha256`` and ``weights_source``. A ``--weights``
file whose sha256 differs from them is refused here, before any worker starts, instead of
re-running for minutes and then blaming the inputs and kernels for the disagreement.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fewtrans_board.core.errors import SubmissionError
from fewtrans_board.leaderboard.meta import SubmissionMeta
from fewtrans_board.models.weights import file_sha256
from fewtrans_board.results.load import RunResults

SHA256_PREFIX = "sha256:"


def expected_weights(meta: SubmissionMeta, runs: Sequence[RunResults]) -> tuple[str, str] | None:
    """The checkpoint digest a verification must load, and where that requirement comes from.

    Args:
        meta: the submission's metadata (``weights_sha256`` wins where given).
        runs: the submission's runs (their recorded ``weights_id``).

    Returns:
        ``("sha256:<hex>", origin)``, or ``None`` where neither records a checkpoint file.

    Raises:
        SubmissionError: ``weights-mismatch`` where the runs disagree with each other or
            with ``submission.toml`` about the checkpoint.
    """
    recorded = {
        run.dataset: str(run.provenance.model.weights_id)
        for run in runs
        if str(run.provenance.model.weights_id or "").startswith(SHA256_PREFIX)
    }
    if len(set(recorded.values())) > 1:
        shown = ", ".join(f"{d}: {w[:23]}…" for d, w in sorted(recorded.items()))
        raise SubmissionError(
            "weights-mismatch",
            f"the runs record different checkpoints ({shown}); a submission evaluates one "
            "set of weights: re-run the datasets with the same --weights",
        )
    if meta.weights_sha256:
        for dataset, weights_id in recorded.items():
            if weights_id != meta.weights_sha256:
                raise SubmissionError(
                    "weights-mismatch",
                    f"submission.toml records weights_sha256 {meta.weights_sha256}, but the "
                    f"{dataset} run used {weights_id}; record the digest of the checkpoint the "
                    "runs loaded",
                )
        return meta.weights_sha256, "submission.toml weights_sha256"
    if recorded:
        dataset, weights_id = sorted(recorded.items())[0]
        return weights_id, f"the {dataset} run's weights_id"
    return None


def check_weights(
    meta: SubmissionMeta, runs: Sequence[RunResults], weights: str | Path | None
) -> None:
    """Refuse a ``--weights`` file whose sha256 is not the recorded one, in one line.

    Args:
        meta: the submission's metadata.
        runs: the validated runs.
        weights: the checkpoint given to verification (``None``: the model's default).

    Raises:
        SubmissionError: ``weights-mismatch`` for a file whose digest differs, or a
            declared ``weights_sha256`` with no ``--weights`` to check against it.
    """
    expected = expected_weights(meta, runs)
    if expected is None:
        return
    digest, origin = expected
    source = f" (source: {meta.weights_source})" if meta.weights_source else ""
    if weights is None:
        if meta.weights_sha256:
            raise SubmissionError(
                "weights-mismatch",
                f"{origin} is {digest} but no --weights was given; pass the checkpoint"
                f"{source} with --weights PATH",
            )
        return
    found = SHA256_PREFIX + file_sha256(Path(weights))
    if found != digest:
        raise SubmissionError(
            "weights-mismatch",
            f"the checkpoint {weights} has {found}, {origin} is {digest}; pass the checkpoint "
            f"the runs used{source} with --weights, or put it in the --weights-dir registry as "
            f"{digest.removeprefix(SHA256_PREFIX)}.safetensors (check with sha256sum)",
        )
