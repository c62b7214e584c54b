"""A ``published`` run evaluates the benchmark's recipe as the recorded schema declares it."""

from __future__ import annotations

from typing import Any

from fewtrans_board.api.adapter import typed_values
from fewtrans_board.core.canonical import canonical_json
from fewtrans_board.core.errors import SubmissionError, shown
from fewtrans_board.leaderboard.sub_benchmarks import SubBenchmark
from fewtrans_board.results.load import RunResults


def check_recipe(run: RunResults, schema: dict[str, Any], benchmark: SubBenchmark) -> None:
    """A ``published`` run evaluates the benchmark's recipe, as the recorded schema declares it.

    The configuration must be the schema's defaults with the recipe's values (and its
    values for this dataset) over them; verification then checks that the installed
    plugin declares the same schema, recipes included.

    Raises:
        SubmissionError: ``recipe-mismatch`` naming what differs.
    """
    recorded = run.provenance.adapter.extra.get("recipe")
    name = recorded.get("name") if isinstance(recorded, dict) else None
    if name != benchmark.recipe:
        raise SubmissionError(
            "recipe-mismatch",
            f"{run.dataset}: benchmark {benchmark.name!r} runs the published recipe "
            f"{benchmark.recipe!r}; the results ran {shown(name)}",
        )
    declared = [
        r for r in schema.get("recipes") or [] if isinstance(r, dict) and r.get("name") == name
    ]
    if len(declared) != 1 or canonical_json(declared[0]) != canonical_json(recorded):
        raise SubmissionError(
            "recipe-mismatch",
            f"{run.dataset}: the recorded recipe {name!r} is not the one the adapter schema "
            "declares",
        )
    identity = run.provenance.identity.extra.get("recipe")
    if identity != {"name": name, "version": declared[0].get("version")}:
        raise SubmissionError(
            "recipe-mismatch",
            f"{run.dataset}: the run identity names recipe {shown(identity)}, not {name!r}",
        )
    values = {f["name"]: f["default"] for f in schema["fields"]}
    values.update(declared[0].get("values") or {})
    values.update((declared[0].get("per_dataset") or {}).get(run.dataset) or {})
    expected = typed_values(values, schema["fields"])
    centre = typed_values(run.provenance.adapter.centre, schema["fields"])
    differing = sorted(
        k for k in expected if canonical_json(centre.get(k)) != canonical_json(expected[k])
    )
    if differing:
        raise SubmissionError(
            "recipe-mismatch",
            f"{run.dataset}: the configuration differs from recipe {name!r} in "
            f"{', '.join(differing)}: {[centre.get(k) for k in differing]} vs "
            f"{[expected[k] for k in differing]}",
        )
