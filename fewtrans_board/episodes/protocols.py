"""Named, versioned sampling protocols: a sampler plus class pool, seed and draw block.

Bump a protocol's ``version`` whenever anything that changes its episodes changes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.episodes.samplers import (
    CoopKShotSampler,
    FixedWayShotSampler,
    VariedWayShotSampler,
)

Sampler = VariedWayShotSampler | FixedWayShotSampler | CoopKShotSampler


@dataclass(frozen=True, kw_only=True)
class SamplingProtocol:
    """How a manifest's episodes are drawn.

    Attributes:
        name: protocol name.
        version: bumped whenever the episodes it produces would change (from 1).
        description: one paragraph.
        sampler: the episode sampler.
        class_pool: ``"base"`` (the spec's evaluation classes, in split order) or
            ``"all"`` (every class, in class-list order).
        seed: seed of the sampler's ``RandomState``.
        block: which block of ``episodes`` consecutive draws to keep (0 = the first).
        episodes: episodes per block.
        preprocessing: evaluation transform the protocol prescribes.
        support_partition: dataset partition support items come from.
        query_partition: dataset partition query items come from.
    """

    name: str
    version: int = 1
    description: str
    sampler: Sampler
    class_pool: Literal["base", "all"] = "base"
    seed: int = 0
    block: int = 0
    episodes: int = 600
    preprocessing: str = "fewtrans"
    support_partition: str = "all"
    query_partition: str = "all"

    def with_overrides(
        self,
        *,
        ways: int | None = None,
        shots: int | None = None,
        queries: int | None = None,
        episodes: int | None = None,
        seed: int | None = None,
        block: int | None = None,
    ) -> SamplingProtocol:
        """Return a copy with user overrides applied (recorded in the manifest)."""
        sampler: Sampler = self.sampler
        sampler_changes = _given(ways=ways, shots=shots, queries=queries)
        if sampler_changes:
            if not isinstance(sampler, FixedWayShotSampler):
                raise FewtransError(
                    f"protocol {self.name!r} draws variable ways/shots; --ways, --shots and "
                    "--queries apply only to fixed protocols "
                    "(fewtrans-fixed, bscd, fewtrans-search)"
                )
            sampler = dataclasses.replace(sampler, **sampler_changes)
        changes = _given(episodes=episodes, seed=seed, block=block)
        for key, value in changes.items():
            if value < (1 if key == "episodes" else 0):
                raise FewtransError(
                    f"--{key} must be {'positive' if key == 'episodes' else '>= 0'}"
                )
        return dataclasses.replace(self, sampler=sampler, **changes)

    def describe(self) -> dict[str, Any]:
        """JSON-friendly identity stored in manifests."""
        return {
            "name": self.name,
            "version": self.version,
            "sampler": self.sampler.params(),
            "class_pool": self.class_pool,
            "preprocessing": self.preprocessing,
            "support_partition": self.support_partition,
            "query_partition": self.query_partition,
        }


def _given(**values: int | None) -> dict[str, Any]:
    """The values that are not ``None``."""
    return {k: v for k, v in values.items() if v is not None}


PROTOCOLS: dict[str, SamplingProtocol] = {
    p.name: p
    for p in (
        SamplingProtocol(
            name="fewtrans-varied",
            description=(
                "FewTrans test tasks: 2-15 ways, <=10 shots per class, <=150 support, "
                "balanced queries min(10, ...), class-size weighted imbalance, WordNet-node "
                "sampling for ImageNet-Sketch; seed 0, the second block of 600 draws "
                "(stream episodes 601-1200), as the reference test script evaluates them."
            ),
            sampler=VariedWayShotSampler(),
            block=1,
        ),
        SamplingProtocol(
            name="fewtrans-base2novel",
            description=(
                "FewTrans base-to-novel (CLIP methods), as the reference CLIP script samples "
                "with BASE2NOVEL on: each episode draws its base part with the fewtrans-varied "
                "rules, then, in the same random stream, 2-15 novel classes of the held-back "
                "split with up to 15 query images each, scored through class names only. The "
                "interleaved novel draws shift the stream, so the base episodes are not the "
                "fewtrans-varied ones (seed 0, second block of 600 draws). Novel classes are "
                "drawn uniformly (also for ImageNet-Sketch, whose novel WordNet graph is not "
                "shipped)."
            ),
            sampler=VariedWayShotSampler(novel_queries=15),
            block=1,
        ),
        SamplingProtocol(
            name="fewtrans-search",
            description=(
                "FewTrans hyperparameter-centre search tasks: 5-way 1-shot, 15 queries, "
                "seed 0, the first 50 draws, on a held-out dataset (CUB)."
            ),
            sampler=FixedWayShotSampler(ways=5, shots=1, queries=15),
            episodes=50,
        ),
        SamplingProtocol(
            name="fewtrans-fixed",
            description=(
                "FewTrans fixed mode: N-way K-shot, 15 queries per class (default 5-way "
                "1-shot; --ways/--shots), seed 0, second block of 600 draws."
            ),
            sampler=FixedWayShotSampler(ways=5, shots=1, queries=15),
            block=1,
        ),
        SamplingProtocol(
            name="bscd",
            description=(
                "BSCD-FSL: 5-way K-shot (K in 5/20/50 via --shots, default 5), 15 queries, "
                "600 episodes over all classes; seeded and frozen here (the original "
                "benchmark's episodes were unseeded); resize 257 + centre crop 224."
            ),
            sampler=FixedWayShotSampler(ways=5, shots=5, queries=15),
            class_pool="all",
            preprocessing="bscd",
        ),
        SamplingProtocol(
            name="clip-kshot",
            version=2,
            description=(
                "CoOp-style few-shot CLIP evaluation: all classes, K in 1/2/4/8/16 training "
                "images per class (seeds 1-3, replaying CoOp's random.sample with Dassl's "
                "class order: first appearance in the train split list), the full test "
                "split as queries."
            ),
            sampler=CoopKShotSampler(),
            class_pool="all",
            episodes=15,
            support_partition="train",
            query_partition="test",
        ),
        SamplingProtocol(
            name="meta-dataset",
            description=(
                "Meta-Dataset variable-way variable-shot: 5-50 ways, <=10 queries, support "
                "<=500 with per-class contribution <=100 and no per-class shot cap, 600 "
                "episodes over the spec's evaluation classes."
            ),
            sampler=VariedWayShotSampler(
                min_ways=5,
                max_ways_upper_bound=50,
                max_num_query=10,
                max_support_set_size=500,
                max_support_size_contrib_per_class=100,
                cap_shots_per_class=False,
                min_examples_in_class=0,
            ),
        ),
    )
}


def get_protocol(name: str) -> SamplingProtocol:
    """Look up a sampling protocol by name, with a helpful error."""
    import difflib

    if name not in PROTOCOLS:
        close = difflib.get_close_matches(name, PROTOCOLS, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise FewtransError(
            f"unknown sampling protocol {name!r}.{hint} Known: {', '.join(PROTOCOLS)}"
        )
    return PROTOCOLS[name]
