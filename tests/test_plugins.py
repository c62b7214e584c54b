"""Plugin manager: built-ins, entry points, allow-list, misspelled hooks, one test per hook."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable

import click
import pytest

from fewtrans_board import DatasetSpec, ModelSpec, hookimpl
from fewtrans_board.core.errors import PluginError
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.registry.manager import (
    DEFAULT_PLUGINS,
    LOAD_PLUGINS_ENV,
    get_plugin_manager,
    parse_allow_list,
)
from tests.conftest import CentroidAdapter, adapter_plugin


def fake_entry_points(monkeypatch: pytest.MonkeyPatch, **modules: str) -> None:
    """Make the manager see entry points ``name -> module`` (without distributions)."""
    eps = [
        importlib.metadata.EntryPoint(name, value, "fewtrans_board")
        for name, value in modules.items()
    ]
    monkeypatch.setattr("fewtrans_board.registry.manager._iter_entry_points", lambda: eps)


def test_builtins_are_registered_with_provenance() -> None:
    pm = get_plugin_manager(entry_points=False)
    for module in DEFAULT_PLUGINS:
        source = pm.source_of(module)
        assert source.builtin and source.distribution == "fewtrans-board"


def test_factory_returns_fresh_managers() -> None:
    first = get_plugin_manager(entry_points=False)
    first.register(object(), name="extra")
    second = get_plugin_manager(entry_points=False)
    assert second.get_plugin("extra") is None


def test_misspelled_hook_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(monkeypatch, typo="tests.plugins.misspelled_hook")
    with pytest.raises(PluginError) as info:
        get_plugin_manager()
    message = str(info.value)
    assert "'register_model'" in message and "Did you mean 'register_models'" in message
    assert "'typo'" in message


def test_plugin_import_failure_names_plugin_and_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(monkeypatch, broken="tests.plugins.broken_import")
    with pytest.raises(PluginError) as info:
        get_plugin_manager()
    assert "'broken'" in str(info.value) and LOAD_PLUGINS_ENV in str(info.value)
    assert "nonexistent_lib" in str(info.value)


def test_allow_list_env_excludes_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(
        monkeypatch, broken="tests.plugins.broken_import", hello="tests.plugins.hello_command"
    )
    pm = get_plugin_manager(environ={LOAD_PLUGINS_ENV: "hello"})
    assert pm.get_plugin("hello") is not None and pm.get_plugin("broken") is None
    assert get_plugin_manager(environ={LOAD_PLUGINS_ENV: ""}).get_plugin("hello") is None


def test_parse_allow_list() -> None:
    assert parse_allow_list(None) is None
    assert parse_allow_list("") == frozenset()
    assert parse_allow_list(" a, b ,,") == {"a", "b"}


def test_duplicate_plugin_names_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(monkeypatch, hello="tests.plugins.hello_command")
    with pytest.raises(PluginError, match="two plugins are named 'hello'"):
        get_plugin_manager(extra_plugins={"hello": object()})


def test_unknown_hook_argument_is_refused() -> None:
    class Bad:
        @hookimpl
        def register_models(self, register: object, colour: str) -> None:
            """Asks for an argument the spec does not have."""

    with pytest.raises(PluginError, match="colour"):
        get_plugin_manager(entry_points=False, extra_plugins={"bad": Bad()})


def test_trace_env_prints_hook_calls(capsys: pytest.CaptureFixture[str]) -> None:
    pm = get_plugin_manager(
        entry_points=False,
        environ={"FEWTRANS_BOARD_TRACE_PLUGINS": "1"},
        extra_plugins={"mine": adapter_plugin(CentroidAdapter)},
    )
    Registry.from_plugin_manager(pm)
    assert "register_adapters" in capsys.readouterr().err


# --- one test per hook (tests/test_hookspecs.py enforces that these exist) --------------


def test_hook_register_datasets(tiny_dataset_spec: DatasetSpec) -> None:
    class Plugin:
        @hookimpl
        def register_datasets(self, register: Callable[[DatasetSpec], None]) -> None:
            register(tiny_dataset_spec)

    pm = get_plugin_manager(entry_points=False, extra_plugins={"tiny": Plugin()})
    entry = Registry.from_plugin_manager(pm).datasets.get(tiny_dataset_spec.name)
    assert entry.obj is tiny_dataset_spec and entry.plugin == "tiny"


def test_hook_register_models() -> None:
    spec = ModelSpec(
        name="toy.random",
        loader=lambda w, d: None,
        family="toy",
        architecture="toy",  # type: ignore[arg-type,return-value]
        source="random-init",
    )

    class Plugin:
        @hookimpl
        def register_models(self, register: Callable[[ModelSpec], None]) -> None:
            register(spec)

    pm = get_plugin_manager(entry_points=False, extra_plugins={"toy": Plugin()})
    entry = Registry.from_plugin_manager(pm).models.get("toy.random")
    assert entry.obj is spec and entry.plugin == "toy" and entry.distribution is None


def test_hook_register_adapters() -> None:
    pm = get_plugin_manager(
        entry_points=False, extra_plugins={"mine": adapter_plugin(CentroidAdapter)}
    )
    entry = Registry.from_plugin_manager(pm).adapters.get("test-centroid")
    assert entry.obj is CentroidAdapter and entry.plugin == "mine"


def test_hook_register_commands(monkeypatch: pytest.MonkeyPatch, invoke) -> None:  # type: ignore[no-untyped-def]
    fake_entry_points(monkeypatch, hello="tests.plugins.hello_command")
    result = invoke(["hello", "--name", "board"])
    assert result.exit_code == 0 and result.output == "hello board\n"


def test_plugin_command_cannot_replace_builtin(invoke) -> None:  # type: ignore[no-untyped-def]
    class Hijack:
        @hookimpl
        def register_commands(self, cli: click.Group) -> None:
            @cli.command("plugins")
            def fake() -> None:
                """Pretend to be the plugins command."""

    from fewtrans_board.cli import make_cli
    from fewtrans_board.core.errors import DuplicateNameError

    pm = get_plugin_manager(entry_points=False, extra_plugins={"hijack": Hijack()})
    with pytest.raises(DuplicateNameError, match=r"'plugins'.*commands.*'hijack'"):
        make_cli(pm)


def test_selection_records_what_was_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(
        monkeypatch, broken="tests.plugins.broken_import", hello="tests.plugins.hello_command"
    )
    from tests.plugins import tiny_models

    pm = get_plugin_manager(allow=["hello"], extra_plugins={"mod": tiny_models})
    assert pm.selection is not None
    assert pm.selection.entry_points == (("hello", None),)
    assert [(e.name, e.module) for e in pm.selection.extras] == [
        ("mod", "tests.plugins.tiny_models")
    ]
    assert Registry.from_plugin_manager(pm).plugins == pm.selection
    empty = get_plugin_manager(entry_points=False).selection
    assert empty is not None and empty.entry_points == () and empty.extras == ()


def test_a_worker_manager_loads_exactly_the_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    import pickle

    from fewtrans_board.registry.manager import plugin_manager_for
    from tests.plugins import tiny_models

    fake_entry_points(
        monkeypatch, broken="tests.plugins.broken_import", hello="tests.plugins.hello_command"
    )
    selection = get_plugin_manager(
        environ={LOAD_PLUGINS_ENV: "hello"}, extra_plugins={"mod": tiny_models}
    ).selection
    assert selection is not None
    travelled = pickle.loads(pickle.dumps(selection))  # as a worker receives it
    # The worker's own environment allows everything (or nothing): the selection decides.
    for environ in ({}, {LOAD_PLUGINS_ENV: ""}, {LOAD_PLUGINS_ENV: "broken,hello"}):
        pm = plugin_manager_for(travelled, environ=environ)
        assert pm.get_plugin("hello") is not None and pm.get_plugin("broken") is None
        assert pm.get_plugin("mod") is tiny_models
        assert pm.selection == selection


def test_a_worker_without_a_selected_plugin_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    from fewtrans_board.registry.manager import plugin_manager_for

    fake_entry_points(monkeypatch, hello="tests.plugins.hello_command")
    selection = get_plugin_manager().selection
    assert selection is not None
    fake_entry_points(monkeypatch)  # the worker's machine lacks the plugin
    with pytest.raises(PluginError, match=r"'hello'.*not installed where this worker runs"):
        plugin_manager_for(selection)


def test_in_process_plugins_that_cannot_travel_are_named() -> None:
    import types

    made_here = types.ModuleType("made_here")
    for extras in ({"local": adapter_plugin(CentroidAdapter)}, {"made": made_here}):
        selection = get_plugin_manager(entry_points=False, extra_plugins=extras).selection
        assert selection is not None
        with pytest.raises(PluginError, match="cannot") as info:
            selection.check_portable()
        assert repr(next(iter(extras))) in str(info.value)
        assert "inline executor" in str(info.value)
    from tests.plugins import tiny_models

    portable = get_plugin_manager(entry_points=False, extra_plugins={"mod": tiny_models})
    assert portable.selection is not None
    portable.selection.check_portable()
