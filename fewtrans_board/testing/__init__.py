"""Plugin contract checks shared by the CLI's ``validate``, our tests and plugin authors.

Use these in a third-party plugin's test suite::

    from fewtrans_board.testing import check_adapter
    from fewtrans_example import SimpleShotAdapter

    def test_contract():
        check_adapter(SimpleShotAdapter)

Each check raises :class:`fewtrans_board.core.errors.ContractError` with a message naming the
object and the broken rule, and returns a small report on success.
"""

from fewtrans_board.testing.contract import (
    check_adapter,
    check_dataset,
    check_import_is_light,
    check_model,
)
from fewtrans_board.testing.tiny import tiny_clip_backbone, tiny_vit_backbone, toy_episode

__all__ = [
    "check_adapter",
    "check_dataset",
    "check_import_is_light",
    "check_model",
    "tiny_clip_backbone",
    "tiny_vit_backbone",
    "toy_episode",
]
