"""``manifest build|show|verify`` and ``datasets scan`` commands."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from fewtrans_board.cli.app import App, pass_app
from fewtrans_board.cli.groups import SEED, OutputPath, echo_json, root_option, show_progress

if TYPE_CHECKING:
    from fewtrans_board.api.dataset_spec import DatasetSpec

ROOT_HELP = "Folder of your local copy of the dataset (omit for embedded datasets)."
ROOT = root_option(ROOT_HELP)


@click.command("scan")
@click.argument("name")
@ROOT
@click.option("--no-verify-images", is_flag=True, help="Skip decoding every image (faster).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@pass_app
def datasets_scan(
    app: App, name: str, root: Path | None, no_verify_images: bool, as_json: bool
) -> None:
    """Check a local copy of dataset NAME: classes, counts, unreadable images.

    Exits 1 when anything is missing, extra, too small or unreadable.
    """
    from fewtrans_board.datasets.check import check_local_copy

    spec = app.registry.datasets.get(name).obj
    report = check_local_copy(
        spec, root, verify_images=not no_verify_images, progress=show_progress(not as_json)
    )
    if as_json:
        echo_json({**report.to_dict(), "layout": spec.layout})
    else:
        click.echo(
            f"{spec.name}: {report.total} items in {len(report.counts)} classes"
            + (f" (a complete copy has {report.expected_total})" if report.expected_total else "")
        )
        for label, values in (
            ("missing or empty classes", report.empty_classes),
            (f"classes with fewer than {spec.min_items_per_class} items", report.small_classes),
            ("extra folders not in the class list", report.extra_classes),
            ("unreadable images", report.unreadable),
            ("files missing from the official numbering", report.missing_files),
            (
                "classes whose count differs from the official one",
                [f"{c} ({n} of {m})" for c, (n, m) in report.miscounted_classes.items()],
            ),
        ):
            if values:
                click.echo(
                    f"  {len(values)} {label}: "
                    + ", ".join(values[:10])
                    + (" ..." if len(values) > 10 else "")
                )
        if report.expected_total is not None and report.total != report.expected_total:
            expected = report.expected_total
            click.echo(f"  item count {report.total} differs from a complete copy's {expected}")
        click.echo("OK" if report.ok else "FAILED")
        if not report.ok:
            click.echo(f"expected layout of {spec.name} under --root:\n{spec.layout}")
    if not report.ok:
        sys.exit(1)


def _scan_warning(spec: DatasetSpec, root: Path | None) -> str | None:
    """The warning to give where ``datasets scan`` would fail on the copy a manifest is built from.

    The listing is checked without decoding (the manifest's items are decoded by
    ``manifest verify``): a missing class, a short class or files missing from the official
    numbering build a manifest with a new sha256 that no published one matches.
    """
    from fewtrans_board.datasets.check import check_local_copy

    report = check_local_copy(spec, root, verify_images=False)
    if report.ok:
        return None
    problems = [
        f"{len(values)} {label} (first: {values[0]})"
        for label, values in (
            ("missing or empty classes", report.empty_classes),
            ("classes below the minimum size", report.small_classes),
            ("extra class folders", report.extra_classes),
            ("files missing from the official copy", report.missing_files),
            ("miscounted classes", list(report.miscounted_classes)),
        )
        if values
    ]
    if report.expected_total is not None and report.total != report.expected_total:
        problems.append(f"{report.total} items where a complete copy has {report.expected_total}")
    return (
        f"'fewtrans-board datasets scan {spec.name}' fails on this copy: "
        f"{'; '.join(problems)}; the manifest's sha256 will match no manifest built from "
        "a complete official copy"
    )


@click.group("manifest")
def manifest_group() -> None:
    """Build, inspect and verify frozen episode manifests."""


@manifest_group.command("build")
@click.option(
    "--protocol", "protocol_name", required=True, help="Sampling protocol, e.g. fewtrans-varied."
)
@click.option("--dataset", "dataset_name", required=True, help="Registered dataset name.")
@ROOT
@click.option("--out", type=OutputPath(dir_okay=False), required=True, help="Output Parquet file.")
@click.option(
    "--ways", type=click.IntRange(min=2), default=None, help="Fixed protocols: classes per episode."
)
@click.option(
    "--shots",
    type=click.IntRange(min=1),
    default=None,
    help="Fixed protocols: support items per class.",
)
@click.option(
    "--queries",
    type=click.IntRange(min=1),
    default=None,
    help="Fixed protocols: query items per class.",
)
@click.option(
    "--episodes", type=click.IntRange(min=1), default=None, help="Episodes per draw block."
)
@click.option("--seed", type=SEED, default=None, help="Sampler seed (protocol default otherwise).")
@click.option(
    "--block", type=click.IntRange(min=0), default=None, help="Draw block to keep (0 = first)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@pass_app
def manifest_build(
    app: App,
    protocol_name: str,
    dataset_name: str,
    root: Path | None,
    out: Path,
    ways: int | None,
    shots: int | None,
    queries: int | None,
    episodes: int | None,
    seed: int | None,
    block: int | None,
    as_json: bool,
) -> None:
    """Draw a protocol's episodes from a local dataset copy and write a manifest."""
    from fewtrans_board.episodes.build import build_manifest, manifest_recipe
    from fewtrans_board.episodes.protocols import get_protocol

    spec = app.registry.datasets.get(dataset_name).obj
    # Key order is the order the flags appear in the recorded command.
    overrides = {
        "ways": ways,
        "shots": shots,
        "queries": queries,
        "episodes": episodes,
        "seed": seed,
        "block": block,
    }
    protocol = get_protocol(protocol_name).with_overrides(**overrides)
    recipe = manifest_recipe(
        protocol_name, dataset_name, with_root=root is not None, overrides=overrides
    )
    warning = _scan_warning(spec, root)
    if warning and not as_json:
        click.echo(f"warning: {warning}", err=True)
    manifest = build_manifest(spec, root, protocol, command=recipe)
    file_hash = manifest.write(out)
    if as_json:
        extra = {"scan_warning": warning} if warning else {}
        echo_json({"path": str(out), "file_sha256": file_hash, **manifest.summary(), **extra})
    else:
        click.echo(
            f"wrote {out}: {len(manifest.episodes())} episodes, "
            f"{len(manifest.rows['item'])} rows\nmanifest sha256 {manifest.sha256}"
        )


@manifest_group.command("show")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def manifest_show(path: Path, as_json: bool) -> None:
    """Summarise a manifest: episodes and way/shot/query histograms."""
    from fewtrans_board.episodes.manifest import Manifest

    summary = Manifest.load(path).summary()
    if as_json:
        echo_json(summary)
        return
    protocol = summary["protocol"]
    click.echo(f"{path}\n  dataset   {summary['dataset']}")
    click.echo(f"  protocol  {protocol['name']} v{protocol['version']}")
    click.echo(f"  episodes  {summary['episodes']} ({summary['rows']} rows)")
    click.echo(f"  sha256    {summary['sha256']}")
    for key in ("way_histogram", "shot_histogram", "query_histogram"):
        hist = summary[key]
        click.echo(f"  {key.split('_')[0]:<9} " + ", ".join(f"{k}:{v}" for k, v in hist.items()))


@manifest_group.command("verify")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@ROOT
@click.option(
    "--no-decode",
    is_flag=True,
    help="Check presence and classes only; skip decoding every item (faster, misses "
    "truncated or non-image files).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@pass_app
def manifest_verify(
    app: App, path: Path, root: Path | None, no_decode: bool, as_json: bool
) -> None:
    """Check that a local dataset copy holds every item of a manifest, each decodable.

    Exits 1 when an item is missing, filed under another class or does not decode.
    """
    from fewtrans_board.episodes.manifest import Manifest
    from fewtrans_board.episodes.verify import verify_manifest

    manifest = Manifest.load(path)
    spec = app.registry.datasets.get(manifest.dataset).obj
    check = verify_manifest(
        manifest, spec, root, decode=not no_decode, progress=show_progress(not as_json)
    )
    if as_json:
        echo_json(check.to_dict())
    else:
        click.echo(f"manifest {path} ({manifest.dataset}, sha256 {manifest.sha256[:16]}...)")
        click.echo(
            "  listing fingerprint "
            + (
                "matches"
                if check.fingerprint_matches
                else "differs (other files added or removed; the episodes can still be verified)"
            )
        )
        for label, values in (
            ("missing items", check.missing),
            ("items under another class", check.wrong_class),
        ):
            if values:
                shown = ", ".join(f"{c}/{i}" if not i.startswith(c) else i for c, i in values[:10])
                click.echo(f"  {len(values)} {label}: {shown}")
        for item, problem in check.unreadable[:10]:
            click.echo(f"  does not decode: {item}: {problem}")
        if len(check.unreadable) > 10:
            click.echo(f"  ... {len(check.unreadable)} items do not decode in all")
        click.echo("OK" if check.ok else "FAILED")
    if not check.ok:
        sys.exit(1)
