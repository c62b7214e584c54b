"""What the plugin worker's zygote imports before it forks episode processes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CONFIGURE = """
import json, sys
from fewtrans_board.runner.worker.serve import _configure
_configure(json.loads(sys.argv[1]))
print(json.dumps(sorted(m for m in ("torch._dynamo", "torch.optim") if m in sys.modules)))
"""


def preloaded_by(settings: dict[str, object]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-I", "-c", CONFIGURE, json.dumps(settings)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow  # a Python process per case
@pytest.mark.parametrize("training_free", [True, False])
def test_only_a_zygote_for_an_adapter_that_trains_preloads_the_optimiser_compiler(
    training_free: bool,
) -> None:
    # torch.optim imports torch._dynamo at an optimiser's first step (seconds per forked
    # episode unless the zygote has it); a training-free adapter's step is trapped first, so
    # its zygote must not spend those seconds at every start.
    settings = {"adapter": "prototypes", "model": "demo-cnn", "training_free": training_free}
    loaded = preloaded_by(settings)
    assert "torch.optim" in loaded
    assert ("torch._dynamo" in loaded) is not training_free
