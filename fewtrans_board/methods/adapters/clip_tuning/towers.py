"""Base class of the adapters that train inside the CLIP towers (CLIP-LoRA, fine-tuning).

Each training step encodes the support batch with the (copied) image tower if it trains,
else takes cached frozen image features, and encodes the class prompts of the config's
``template`` ("a photo of a {}." by default) with the copied text tower if it trains, else
uses the frozen handcrafted text features of that template; the loss is cross-entropy on
``logit_scale * cos``. The predictor encodes query images and any class names the same
way, so novel class names go through the adapted text tower.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from fewtrans_board.blocks.training import upcast
from fewtrans_board.methods.adapters.clip_tuning.common import (
    ClipTuningAdapter,
    ClipTuningPredictor,
    TuningState,
    scaled_cosine,
)

if TYPE_CHECKING:
    import torch
    from torch import nn

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import ImageSet, SupportSet


class TowerTuningAdapter(ClipTuningAdapter):
    """Trains parameters inside the image and/or text tower of a copied CLIP model.

    Subclasses that train one tower only override ``towers``; the other class attributes
    are derived from it when the subclass is created.

    Class attributes:
        towers: the towers whose output depends on trained parameters, among
            ``"visual"`` and ``"text"``.
        image_trains: ``"visual" in towers`` (else cached frozen image features are used
            and ``frozen_backbone`` is set).
        text_trains: ``"text" in towers`` (else the frozen handcrafted text features are
            used).
    """

    towers: ClassVar[tuple[str, ...]] = ("visual", "text")
    image_trains: ClassVar[bool]
    text_trains: ClassVar[bool]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Derive ``image_trains``, ``text_trains`` and ``frozen_backbone`` from ``towers``."""
        super().__init_subclass__(**kwargs)
        cls.image_trains = "visual" in cls.towers
        cls.text_trains = "text" in cls.towers
        cls.frozen_backbone = not cls.image_trains

    def check_image_tower(self, backbone: Backbone) -> None:
        """Refuse image towers the method cannot adapt; every tower passes by default.

        Args:
            backbone: the caller's backbone (its text tower is already checked).

        Raises:
            FewtransError: in subclasses, an image tower the method cannot adapt.
        """

    @abstractmethod
    def prepare_model(
        self, source: nn.Module, config: Any
    ) -> tuple[nn.Module, list[torch.Tensor], list[nn.Module]]:
        """Copy ``source`` (never modify it) and choose what trains.

        Args:
            source: the caller's open_clip ``CLIP`` model.
            config: an instance of ``Config``.

        Returns:
            The copied model (in eval mode), its trainable tensors, and the modules to
            switch to train mode while training.
        """

    def build(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
    ) -> TuningState:
        """Copy the model, mark what trains, and define the loss and the predictor."""
        import torch
        import torch.nn.functional as F

        from fewtrans_board.blocks.clip_common import (
            batched_images,
            cached_for,
            class_prompts,
            clip_model,
            handcrafted_text_features,
        )
        from fewtrans_board.blocks.training import autocast

        source = clip_model(backbone, self.name)
        text_encoder = backbone.text
        assert text_encoder is not None  # clip_model checked it
        self.check_image_tower(backbone)
        model: Any
        model, trainable, train_modules = self.prepare_model(source, config)
        device = backbone.device
        scale = text_encoder.logit_scale
        labels = support.labels.to(device)
        template = config.template
        tokens = text_encoder.tokenize(class_prompts(class_names, template)).to(device)
        if self.image_trains:
            pixels = support.images.pixels.to(device)
        else:
            cached = upcast(support.images.features(backbone)).to(device)
        frozen_text = (
            None
            if self.text_trains
            else handcrafted_text_features(backbone, class_names, template).to(device)
        )

        def loss_of(batch: Any) -> torch.Tensor:
            index = torch.as_tensor(batch, device=device)
            with autocast(device):
                image = model.visual(pixels[index]) if self.image_trains else cached[index]
                text = model.encode_text(tokens) if frozen_text is None else frozen_text
            return F.cross_entropy(scaled_cosine(image, text, scale), labels[index])

        def image_features(query: ImageSet) -> torch.Tensor:
            if self.image_trains:
                return batched_images(model.visual, query.pixels, device)
            return query.features(backbone)

        def text_features(names: Sequence[str]) -> torch.Tensor:
            if not self.text_trains:
                return handcrafted_text_features(backbone, names, template)
            with torch.no_grad(), autocast(device):
                prompts = text_encoder.tokenize(class_prompts(names, template)).to(device)
                encoded = model.encode_text(prompts)
            return upcast(encoded)

        def predictor() -> ClipTuningPredictor:
            model.eval()
            return ClipTuningPredictor(
                image_features,
                cached_for(class_names, text_features, frozen_text),
                class_names,
                scale,
                {"model": model},
            )

        return TuningState(trainable, [model], loss_of, predictor, train_modules)
