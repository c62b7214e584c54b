"""What verification costs, and what its sample catches.

Prints, measured in this run on the embedded digits data:

1. the plugin worker's start-up (sandboxed and plain) and the cost of one request (a fresh
   episode process) over fitting the same episode in-process;
2. per built-in adapter family, the seconds one verified episode costs (the re-run, the
   inductive, fit and memorisation probes) and what a 600-episode dataset then costs under
   the sampling rule (every episode within the budget, else the 5%-forgery minimum);
3. the memorisation probe's accuracy drop for honest methods (clean minus queries
   perturbed by draws of the randomised probe), which the flag threshold is set above;
4. the sample sizes and catch probabilities of the rule (no timing);
5. with ``--real-resolution N``: the estimate printed before a verification against the
   measured verification, at 224 px: a random-init timm ResNet-18 evaluated on N episodes
   of a synthetic BSCD EuroSAT layout (256 px JPEGs), then verified in a plugin worker
   (every episode re-run, 8 probed), and the per-image constants of the estimate
   (:mod:`fewtrans_board.leaderboard.verification.cost`) measured on this CPU.

Usage: python benchmarks/verification_cost.py [--episodes 6] [--families ...]
       [--real-resolution 12 [--adapters mean-centroid linear-probe]]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from fewtrans_board.leaderboard.verification.perturb import perturbed_pixels
from fewtrans_board.leaderboard.verification.sampling import (
    CATCH_PROBABILITY,
    DEFAULT_BUDGET_S,
    FORGED_SHARE,
    plan_sample,
)
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.registry.manager import get_plugin_manager
from fewtrans_board.results.row_schema import accuracy_percent
from fewtrans_board.runner.inductive import verification_probes
from fewtrans_board.runner.plan import plan_run
from fewtrans_board.runner.session import RunSession
from fewtrans_board.runner.spec import RunSpec
from fewtrans_board.runner.worker.isolated import stop_idle_workers
from fewtrans_board.stats.bounds import detection_probability, forged_episodes, sample_size_for

MANIFEST = str(
    Path(__file__).resolve().parents[1] / "leaderboard/manifests/fewtrans-varied--digits.parquet"
)
FAMILIES = {
    "mean-centroid": "demo-cnn.digits",
    "linear-probe": "demo-cnn.digits",
    "finetune": "demo-cnn.digits",
    "zero-shot-clip": "demo-clip.digits",
    "coop": "demo-clip.digits",
    "clip-lora": "demo-clip.digits",
}


def session_of(adapter: str, model: str, episodes: int, isolation: str) -> RunSession:
    registry = Registry.from_plugin_manager(get_plugin_manager(entry_points=False))
    spec = RunSpec(
        model=model,
        adapter=adapter,
        manifest=MANIFEST,
        hpe="fewtrans-reference",
        limit=episodes,
        threads=1,
        isolation=isolation,
    )
    return RunSession(plan_run(spec, registry))


def started_seconds(adapter: str, isolation: str) -> float:
    """Seconds to start a worker for ``adapter`` on demo-cnn.digits, configure it, load it."""
    session = session_of(adapter, "demo-cnn.digits", 1, isolation)
    begun = time.perf_counter()
    _ = session.worker
    started = time.perf_counter() - begun
    session.close()
    stop_idle_workers()  # the next start is a new process, not the idle one
    return started


def startup(repeats: int) -> None:
    print("## 1. Worker start-up and per-request cost (mean-centroid, demo-cnn.digits)")
    rows = []
    for isolation in ("sandbox", "process"):
        session = session_of("mean-centroid", "demo-cnn.digits", 10, isolation)
        begun = time.perf_counter()
        _ = session.worker  # start, configure, load the plugins once
        started = time.perf_counter() - begun
        inputs = [session.inputs(e) for e in session.plan.episodes]
        begun = time.perf_counter()
        for item in inputs:
            session.outcomes(item, None)
        per_request = (time.perf_counter() - begun) / len(inputs)
        session.close()
        rows.append((isolation, started, per_request))
    inline = session_of("mean-centroid", "demo-cnn.digits", 10, "inline")
    adapter = inline.plan.adapter_cls()
    items = [inline.inputs(e) for e in inline.plan.episodes]
    begun = time.perf_counter()
    for item in items:
        inline.outcomes(item, adapter)
    in_process = (time.perf_counter() - begun) / len(items)
    for isolation, started, per_request in rows:
        print(
            f"{isolation:8s} worker start {started:6.2f} s; one request {per_request * 1000:7.1f} ms "
            f"= {per_request / in_process:5.1f}x the in-process fit ({in_process * 1000:.1f} ms)"
        )
    if repeats:
        compare_starts(repeats)
    print()


def compare_starts(repeats: int) -> None:
    """A training-free adapter's zygote skips the optimiser's compiler import (TRAINING_ONLY)."""
    free = [started_seconds("mean-centroid", "sandbox") for _ in range(repeats)]
    trains = [started_seconds("linear-probe", "sandbox") for _ in range(repeats)]
    free_s, trains_s = statistics.median(free), statistics.median(trains)
    print(
        f"sandbox start, median of {repeats}: training-free (mean-centroid) {free_s:.2f} s, "
        f"training (linear-probe) {trains_s:.2f} s, ratio {free_s / trains_s:.2f}"
    )


def per_family(families: list[str], episodes: int) -> None:
    print(f"## 2. One verified episode per family ({episodes} episodes, fewtrans-reference grid)")
    print(
        "family           rerun s  +probes s  600 episodes: rule   re-run   est. s   "
        "honest memorisation drop (points)"
    )
    for adapter in families:
        session = session_of(adapter, FAMILIES[adapter], episodes, "sandbox")
        grid = session.plan.grid
        rerun_s, probe_s, drops = [], [], []
        try:
            for episode in session.plan.episodes:
                inputs = session.inputs(episode)
                seeds = session.plan.seeds(episode, grid)
                begun = time.perf_counter()
                clean = session.outcomes(inputs, None)
                rerun_s.append(time.perf_counter() - begun)
                begun = time.perf_counter()
                session.ask(
                    inputs,
                    grid,
                    seeds,
                    query_subsets=verification_probes(len(episode.query), 0),
                )
                if session.worker.info is not None and session.worker.info.batches:
                    session.ask(inputs, grid, seeds, loop=True)
                items = [episode.query[int(i)][0] for i in inputs.query_order]
                rng = np.random.default_rng(episode.index)  # verification: the secret seed
                pixels = perturbed_pixels(session.images, items, rng).numpy()
                if session.features is not None:
                    (pixels,) = session.worker.embed([pixels], 256)
                altered = session.ask(inputs, grid, seeds, query_override=pixels)
                probe_s.append(time.perf_counter() - begun)
                labels = inputs.query_labels
                order = inputs.query_order
                for c, outcome in enumerate(clean):
                    restored = np.empty_like(altered.query[c][0])
                    restored[order] = altered.query[c][0]
                    drops.append(
                        accuracy_percent(outcome.logits.argmax(1), labels)
                        - accuracy_percent(restored.argmax(1), labels)
                    )
        finally:
            session.close()
        cost = float(np.mean(rerun_s))
        plan = plan_sample(600, cost, np.random.default_rng(0), extra_requests=0.5)
        everything = plan.keep_going([cost] * plan.minimum)  # the judge's measured projection
        rule = "every episode" if everything else f"{plan.minimum} (5% rule)"
        rerun = 600 if everything else plan.minimum
        estimate = rerun * cost + 8 * float(np.mean(probe_s))
        print(
            f"{adapter:16s} {cost:7.2f}  {np.mean(probe_s):9.2f}  {rule:18s} {rerun:6d}  "
            f"{estimate:7.0f}   {np.mean(drops):+.2f} (max over configs/episodes {np.max(drops):+.1f})"
        )
    print(f"(budget {DEFAULT_BUDGET_S:.0f} s per dataset; 8 probed episodes per dataset)")
    print()


def probabilities() -> None:
    print(
        f"## 3. The rule: forging {FORGED_SHARE:.0%} of a dataset's episodes is caught with "
        f"probability >= {CATCH_PROBABILITY}"
    )
    print("episodes  forged  minimum sample  P(catch)  P(catch one forged episode)")
    for n in (8, 50, 100, 600, 1000):
        forged = forged_episodes(n, FORGED_SHARE)
        sample = sample_size_for(n, FORGED_SHARE, CATCH_PROBABILITY)
        print(
            f"{n:8d}  {forged:6d}  {sample:14d}  {detection_probability(n, forged, sample):8.4f}  "
            f"{detection_probability(n, 1, sample):.3f}"
        )


REAL_META = """\
[submission]
id = "bench"
method = "benchmark"
model = "timm:resnet18.random"
adapter = "{adapter}"
benchmark = "demo"
hpe_protocol = "fewtrans-reference"
authors = ["benchmark"]
hardware = "this CPU"
plugins = ["fewtrans-board=={version}"]
"""


def _cli(args: list[str]) -> None:
    from click.testing import CliRunner

    from fewtrans_board.cli import make_cli

    result = CliRunner().invoke(make_cli(get_plugin_manager(entry_points=False)), args)
    if result.exit_code != 0:
        raise SystemExit(f"{' '.join(args[:2])} failed:\n{result.output}")


def per_image_constants(spec, root: Path, items: list[str]) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """Measured seconds to decode one image to 224 px, and to embed one at 224 px."""
    import torch

    from fewtrans_board.api.backbone import Preprocessing
    from fewtrans_board.datasets.images import ImageStore
    from fewtrans_board.models.timm_family import load_timm_backbone

    preprocessing = Preprocessing.named("bscd", 224)
    ImageStore(spec, root, preprocessing).pixels(items[:2])  # imports torchvision: not timed
    store = ImageStore(spec, root, preprocessing)
    begun = time.perf_counter()
    pixels = store.pixels(items)
    decode = (time.perf_counter() - begun) / len(items)
    backbone = load_timm_backbone("resnet18", None, "cpu", random_init=True)
    torch.set_num_threads(1)
    with torch.no_grad():
        backbone.embed(pixels[:4], 64)
        begun = time.perf_counter()
        backbone.embed(pixels, 64)
    return decode, (time.perf_counter() - begun) / len(items)


def real_resolution(episodes: int, adapters: list[str]) -> None:
    """The printed estimate against the measured verification at 224 px (section 5)."""
    import tempfile
    from importlib.metadata import version

    from fewtrans_board.core.errors import FewtransError
    from fewtrans_board.datasets.synthetic import write_synthetic_copy
    from fewtrans_board.episodes.manifest import Manifest
    from fewtrans_board.leaderboard.bundle import BundleContents
    from fewtrans_board.leaderboard.meta import parse_meta
    from fewtrans_board.leaderboard.store import LeaderboardStore
    from fewtrans_board.leaderboard.verification import VerificationOptions, cost, verify_contents
    from fewtrans_board.results.load import load_run
    from fewtrans_board.runner.worker.remote import resolve_isolation

    print(f"## 5. Estimate vs measured verification at 224 px ({episodes} episodes)")
    try:
        resolve_isolation("sandbox", for_verification=True)
        unsandboxed = False
    except FewtransError:
        unsandboxed = True
    registry = Registry.from_plugin_manager(get_plugin_manager(entry_points=False))
    spec = registry.datasets.get("bscd-eurosat").obj
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        root, store = work / "eurosat", work / "store"
        write_synthetic_copy(spec, root, 25, image_size=256)
        (store / "manifests").mkdir(parents=True)
        manifest = store / "manifests" / "bench.parquet"
        _cli(["manifest", "build", "--protocol", "bscd", "--dataset", spec.name, "--root",
              str(root), "--shots", "5", "--episodes", str(episodes), "--out", str(manifest)])  # fmt: skip
        items = sorted(set(Manifest.load(manifest).rows["item"]))
        decode, embed = per_image_constants(spec, root, items[:64])
        print(
            f"per image at 224 px, measured: decode {decode * 1000:.1f} ms (constant "
            f"{cost.DECODE_S * 1000:.1f}), ResNet-18 embed {embed * 1000:.1f} ms on one thread "
            f"(constant {cost.EMBED_S * 1000:.1f})"
        )
        print("adapter          estimate s  measured s  estimate/measured  (isolation)")
        for adapter in adapters:
            out = work / adapter
            _cli(["evaluate", "--model", "timm:resnet18.random", "--adapter", adapter,
                  "--manifest", str(manifest), "--root", str(root), "--out", str(out),
                  "--hpe", "fewtrans-reference", "--threads", "1", "--device", "cpu",
                  "--leaderboard", str(store), "--quiet"])  # fmt: skip
            meta = parse_meta(REAL_META.format(adapter=adapter, version=version("fewtrans-board")))
            options = VerificationOptions(
                roots={spec.name: root}, unsandboxed=unsandboxed, threads=1, progress=print
            )
            begun = time.perf_counter()
            report = verify_contents(
                BundleContents(meta, None, [out]), LeaderboardStore(store), options,
                runs=[load_run(out)],
            )  # fmt: skip
            measured = time.perf_counter() - begun
            (dataset,) = report["datasets"]
            estimate = dataset["estimate"]["total_s"]
            print(
                f"{adapter:16s} {estimate:10.1f}  {measured:10.1f}  {estimate / measured:17.2f}  "
                f"({'process' if unsandboxed else 'sandbox'}; {dataset['rerun_episodes']} of "
                f"{dataset['episodes']} episodes re-run)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=6)
    parser.add_argument("--families", nargs="*", default=list(FAMILIES))
    parser.add_argument("--real-resolution", type=int, default=0, metavar="EPISODES")
    parser.add_argument("--adapters", nargs="*", default=["mean-centroid", "linear-probe"])
    parser.add_argument(
        "--start-repeats", type=int, default=3, help="worker starts per adapter compared (0: none)"
    )
    args = parser.parse_args()
    if args.real_resolution:
        real_resolution(args.real_resolution, args.adapters)
        return
    startup(args.start_repeats)
    per_family(args.families, args.episodes)
    probabilities()


if __name__ == "__main__":
    main()
