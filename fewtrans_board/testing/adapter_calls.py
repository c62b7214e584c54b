"""The contract checks' calls into an adapter: fit and predict, their output checked.

Each call runs under :func:`~fewtrans_board.core.plugin_calls.plugin_code`, so an error
raised by the plugin names the plugin, the call and its line; what it returns is checked
before the checks read it (:func:`predicted`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import Adapter, AdapterConfig, Predictor
from fewtrans_board.api.backbone import Backbone
from fewtrans_board.core.errors import ContractError
from fewtrans_board.core.plugin_calls import plugin_code

if TYPE_CHECKING:
    import torch

    from fewtrans_board.testing.tiny import ToyEpisode


def require(condition: bool, subject: str, message: str) -> None:
    """Raise :class:`ContractError` naming ``subject`` unless ``condition`` holds."""
    if not condition:
        raise ContractError(f"{subject}: {message}")


def fit_and_predict(
    adapter: Adapter, backbone: Backbone, episode: ToyEpisode, config: AdapterConfig, seed: int
) -> torch.Tensor:
    """Fit ``config`` on the toy episode after ``torch.manual_seed(seed)``; its query logits."""
    import torch

    torch.manual_seed(seed)
    subject = f"adapter {adapter.name!r}"
    with plugin_code(subject, "fit", "a toy episode of the contract check", type(adapter)):
        predictor = adapter.fit(backbone, episode.support, episode.class_names, config)
    return predicted(adapter, predictor, episode)


def predicted(adapter: Adapter, predictor: Any, episode: ToyEpisode) -> torch.Tensor:
    """Checked query logits of a fitted predictor, as a float CPU tensor."""
    import torch

    subject = f"adapter {adapter.name!r}"
    if not isinstance(predictor, Predictor):
        raise ContractError(
            f"{subject}: fit returned {type(predictor).__name__}, "
            "which has no predict(query) method"
        )
    with (
        torch.no_grad(),
        plugin_code(subject, "predict", "a toy episode of the contract check", type(predictor)),
    ):
        logits = predictor.predict(episode.query)
    if not isinstance(logits, torch.Tensor):
        raise ContractError(
            f"{subject}: predict returned {type(logits).__name__}; return a torch.Tensor of "
            "logits [queries, ways] (e.g. torch.from_numpy(...) for a numpy array)"
        )
    return logits.detach().float().cpu()
