"""Release 0.1's import paths keep working for one release, warning, as the very same objects."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

from fewtrans_board.core.moved import MOVED_MODULES, MOVED_PACKAGES, new_name


def test_every_moved_path_names_a_module_that_exists() -> None:
    missing = []
    for target in [*MOVED_MODULES.values(), *MOVED_PACKAGES.values()]:
        try:
            importlib.import_module(f"fewtrans_board.{target}")
        except ImportError as exc:
            missing.append(f"{target}: {exc}")
    assert not missing


def test_new_name_maps_modules_packages_and_modules_inside_moved_packages() -> None:
    assert new_name("fewtrans_board.adapters.base") == "fewtrans_board.api.adapter"
    assert new_name("fewtrans_board.meta.heads") == "fewtrans_board.methods.meta.heads"
    assert new_name("fewtrans_board.meta.train") == "fewtrans_board.metatrain.train"
    assert new_name("fewtrans_board.adapters.builtin.clip_prompts.coop") == (
        "fewtrans_board.methods.adapters.clip_prompts.coop"
    )
    assert new_name("fewtrans_board.runner.run") is None
    assert new_name("fewtrans_boardx.meta") is None


OLD_IMPORTS = """
import warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    from fewtrans_board.adapters.base import Adapter as OldAdapter
    from fewtrans_board.adapters.builtin import heads
    from fewtrans_board.adapters.builtin.vision_peft import bottleneck
    import fewtrans_board.meta.train as old_train
    from fewtrans_board import hookspecs
from fewtrans_board.api.adapter import Adapter
from fewtrans_board.methods.adapters import heads as new_heads
from fewtrans_board.blocks import bottleneck as new_bottleneck
from fewtrans_board.metatrain import train as new_train
from fewtrans_board.api import hookspecs as new_hookspecs
assert OldAdapter is Adapter
assert heads is new_heads and bottleneck is new_bottleneck and old_train is new_train
assert hookspecs is new_hookspecs
messages = [str(w.message) for w in caught if w.category is DeprecationWarning]
assert any("fewtrans_board.adapters.base moved to fewtrans_board.api.adapter" in m
           for m in messages), messages
assert any("fewtrans_board.meta.train moved to fewtrans_board.metatrain.train" in m
           for m in messages), messages
print("ok")
"""


@pytest.mark.slow
def test_old_imports_give_the_same_objects_and_warn() -> None:
    # A fresh interpreter: this process has imported most modules under their new names.
    done = subprocess.run(
        [sys.executable, "-c", OLD_IMPORTS], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_a_name_that_never_existed_still_fails_without_a_move_warning() -> None:
    with warnings.catch_warnings(record=True) as caught, pytest.raises(ImportError):
        warnings.simplefilter("always")
        importlib.import_module("fewtrans_board.adapters.builtin.no_such_method")
    assert not [w for w in caught if "no_such_method" in str(w.message)]


@pytest.mark.slow
def test_release_0_1_plugin_loading_names_resolve_from_the_package() -> None:
    code = (
        "import warnings\nwarnings.simplefilter('error')\n"
        "try:\n    from fewtrans_board.plugins import get_plugin_manager\n"
        "except DeprecationWarning as w:\n    print('warned', w)\n"
        "warnings.simplefilter('ignore')\n"
        "from fewtrans_board.plugins import get_plugin_manager\n"
        "from fewtrans_board.plugins.loading import get_plugin_manager as new\n"
        "print(get_plugin_manager is new)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "warned fewtrans_board.plugins.get_plugin_manager moved to" in done.stdout
    assert done.stdout.strip().endswith("True")
