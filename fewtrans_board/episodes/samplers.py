"""Episode samplers that replay the reference RNG streams exactly.

A sampler turns a :class:`ClassPool` (the evaluation classes with their items, in protocol
order) into an endless stream of :class:`EpisodeDraw`. The numpy calls and their order
mirror the FewTrans / Meta-Dataset reference sampler, so with the same pool and seed the
same episodes come out; any change here changes frozen manifests and must bump the
protocol version.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fewtrans_board.core.errors import FewtransError

MAX_SPANNING_LEAVES_ELIGIBLE = 392
"""Meta-Dataset's upper bound on the leaves an eligible hierarchy node may span."""


@dataclass(frozen=True)
class ClassPool:
    """Classes an episode may draw from, in protocol order.

    Attributes:
        classes: global class indices (into the dataset's ``class_ids``), pool order.
        items: per pool class, the item ids in canonical order.
        nodes: optional hierarchy nodes (for DAG sampling): each a tuple of pool
            positions spanned by an internal node, nodes sorted by id, leaves sorted by id.
        novel_classes: held-back classes for base-to-novel episodes, split order.
        novel_items: their items, canonical order.
    """

    classes: tuple[int, ...]
    items: tuple[tuple[str, ...], ...]
    nodes: tuple[tuple[int, ...], ...] | None = None
    novel_classes: tuple[int, ...] = ()
    novel_items: tuple[tuple[str, ...], ...] = ()

    def sizes(self) -> np.ndarray:
        """Number of items per pool class."""
        return np.array([len(items) for items in self.items], dtype=np.int64)


@dataclass(frozen=True)
class EpisodeDraw:
    """One sampled episode.

    Attributes:
        stream_index: position of the episode in the sampler's stream (0-based).
        classes: global class indices in episode-label order.
        support: per episode class, its support items.
        query: per episode class, its query items.
        novel_classes: base-to-novel only: novel classes in novel-label order.
        novel_query: per novel class, its query items (no support: they are unseen).
    """

    stream_index: int
    classes: tuple[int, ...]
    support: tuple[tuple[str, ...], ...]
    query: tuple[tuple[str, ...], ...]
    novel_classes: tuple[int, ...] = ()
    novel_query: tuple[tuple[str, ...], ...] = ()


def _draw_novel(
    rng: np.random.RandomState, pool: ClassPool, min_ways: int, max_ways: int, per_class: int
) -> tuple[tuple[int, ...], tuple[tuple[str, ...], ...]]:
    """Novel classes, uniform over the unfiltered novel split, and up to ``per_class`` queries each.

    As the FewTrans base2novel reference draws them, after the base draws.
    """
    n = len(pool.novel_classes)
    if n < min_ways:
        raise FewtransError(
            f"base-to-novel episodes need {min_ways} novel classes, the split has {n}"
        )
    ways = rng.randint(low=min_ways, high=min(max_ways, n) + 1)
    chosen = [int(c) for c in rng.choice(list(range(n)), ways, replace=False)]
    queries = []
    for position in chosen:
        items = pool.novel_items[position]
        _, picked = _pick_items(rng, items, 0, min(per_class, len(items)))
        queries.append(picked)
    return tuple(pool.novel_classes[c] for c in chosen), tuple(queries)


def _pick_items(
    rng: np.random.RandomState, items: Sequence[str], n_support: int, n_query: int
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The reference's ``rng.choice(files, k, replace=False)``: the last ``n_query`` are query.

    Choosing positions consumes the generator exactly like choosing from the list.
    """
    picked = rng.choice(len(items), n_support + n_query, replace=False)
    chosen = [items[i] for i in picked]
    return tuple(chosen[:n_support]), tuple(chosen[n_support:])


@dataclass(frozen=True)
class VariedWayShotSampler:
    """Meta-Dataset-style variable-way variable-shot sampler (FewTrans bounds by default).

    Attributes:
        min_ways: smallest way.
        max_ways_upper_bound: largest way (also the DAG leaf subsample size).
        max_num_query: cap on the balanced per-class query count.
        max_support_set_size: cap on the total support size.
        max_support_size_contrib_per_class: cap on a class's contribution to the support
            size; FewTrans also applies it to each class's shot count.
        cap_shots_per_class: apply the contribution cap to per-class shots (FewTrans
            yes, Meta-Dataset no).
        min_log_weight: lower bound of the class-weight log-uniform draw.
        max_log_weight: upper bound of that draw.
        min_examples_in_class: classes with fewer items are never drawn.
        use_hierarchy: draw classes from a hierarchy node when the pool has nodes.
        novel_queries: base-to-novel: also draw novel classes with this many query items
            each (FewTrans NUM_QUERY_NOVEL = 15); ``0`` disables.
    """

    min_ways: int = 2
    max_ways_upper_bound: int = 15
    max_num_query: int = 10
    max_support_set_size: int = 150
    max_support_size_contrib_per_class: int = 10
    cap_shots_per_class: bool = True
    min_log_weight: float = math.log(0.5)
    max_log_weight: float = math.log(2.0)
    min_examples_in_class: int = 2
    use_hierarchy: bool = True
    novel_queries: int = 0

    def params(self) -> dict[str, Any]:
        """Parameters recorded in the manifest.

        ``novel_queries`` appears only when used, so manifests frozen before base-to-novel
        existed keep their hashes.
        """
        params = {"kind": "varied", **asdict(self)}
        if not self.novel_queries:
            del params["novel_queries"]
        return params

    def _eligible(self, pool: ClassPool) -> list[int]:
        sizes = pool.sizes()
        eligible = [i for i, n in enumerate(sizes) if n >= self.min_examples_in_class]
        if len(eligible) < self.min_ways:
            raise FewtransError(
                f"only {len(eligible)} classes have at least {self.min_examples_in_class} "
                f"items; the protocol needs {self.min_ways} ways"
            )
        return eligible

    def _eligible_nodes(self, pool: ClassPool, eligible: list[int]) -> list[list[int]]:
        keep = set(eligible)
        nodes = []
        for node in pool.nodes or ():
            ids = [i for i in node if i in keep]
            if self.min_ways <= len(ids) <= MAX_SPANNING_LEAVES_ELIGIBLE:
                nodes.append(ids)
        if not nodes:
            raise FewtransError("no hierarchy node spans enough eligible classes")
        return nodes

    def stream(self, pool: ClassPool, seed: int) -> Iterator[EpisodeDraw]:
        """Yield episodes forever from ``RandomState(seed)``."""
        rng = np.random.RandomState(seed)
        sizes = pool.sizes()
        eligible = self._eligible(pool)
        nodes = (
            self._eligible_nodes(pool, eligible)
            if self.use_hierarchy and pool.nodes is not None
            else None
        )
        index = 0
        while True:
            if nodes is not None:
                chosen = nodes[rng.choice(list(range(len(nodes))))]
                if len(chosen) > self.max_ways_upper_bound:
                    chosen = list(
                        rng.choice(chosen, size=[self.max_ways_upper_bound], replace=False)
                    )
                ways = [int(c) for c in chosen]
            else:
                n_ways = rng.randint(
                    low=self.min_ways, high=min(self.max_ways_upper_bound, len(eligible)) + 1
                )
                ways = [int(c) for c in rng.choice(eligible, n_ways, replace=False)]
            n_images = sizes[ways]
            if n_images.min() < 2:
                raise FewtransError(
                    f"episode {index}: a drawn class has fewer than 2 items; "
                    "raise min_examples_in_class"
                )
            n_query = int(np.minimum(self.max_num_query, (n_images // 2).min()))
            remaining = n_images - n_query
            beta = rng.uniform()
            contributions = np.minimum(self.max_support_size_contrib_per_class, remaining)
            support_size = np.minimum(
                np.floor(beta * contributions + 1).sum(), self.max_support_set_size
            )
            weights = n_images * np.exp(
                rng.uniform(self.min_log_weight, self.max_log_weight, size=n_images.shape)
            )
            proportions = weights / weights.sum()
            shots = np.floor(proportions * (support_size - len(ways))).astype("int32") + 1
            if self.cap_shots_per_class:
                shots = np.minimum(shots, self.max_support_size_contrib_per_class)
            shots = np.minimum(shots, remaining)
            support, query = [], []
            for position, k in zip(ways, shots, strict=True):
                s, q = _pick_items(rng, pool.items[position], int(k), n_query)
                support.append(s)
                query.append(q)
            novel: tuple[tuple[int, ...], tuple[tuple[str, ...], ...]] = ((), ())
            if self.novel_queries:
                novel = _draw_novel(
                    rng, pool, self.min_ways, self.max_ways_upper_bound, self.novel_queries
                )
            yield EpisodeDraw(
                index, tuple(pool.classes[w] for w in ways), tuple(support), tuple(query), *novel
            )
            index += 1


@dataclass(frozen=True)
class FixedWayShotSampler:
    """N-way K-shot with a fixed query count per class (FewTrans fixed mode, BSCD-FSL).

    Classes with fewer than ``shots + queries`` items are removed from the pool first.

    Attributes:
        ways: classes per episode.
        shots: support items per class.
        queries: query items per class.
    """

    ways: int = 5
    shots: int = 1
    queries: int = 15

    def params(self) -> dict[str, Any]:
        """Parameters recorded in the manifest."""
        return {"kind": "fixed", **asdict(self)}

    def stream(self, pool: ClassPool, seed: int) -> Iterator[EpisodeDraw]:
        """Yield episodes forever from ``RandomState(seed)``."""
        rng = np.random.RandomState(seed)
        need = self.shots + self.queries
        eligible = [i for i, n in enumerate(pool.sizes()) if n >= need]
        if len(eligible) < self.ways:
            raise FewtransError(
                f"only {len(eligible)} classes have at least {need} items "
                f"({self.shots} shots + {self.queries} queries); {self.ways} ways are needed"
            )
        index = 0
        while True:
            ways = [int(c) for c in rng.choice(eligible, self.ways, replace=False)]
            support, query = [], []
            for position in ways:
                s, q = _pick_items(rng, pool.items[position], self.shots, self.queries)
                support.append(s)
                query.append(q)
            yield EpisodeDraw(
                index, tuple(pool.classes[w] for w in ways), tuple(support), tuple(query)
            )
            index += 1


@dataclass(frozen=True)
class CoopKShotSampler:
    """CoOp-style few-shot split: K training items per class, the full test set as query.

    Replays CoOp's ``generate_fewshot_dataset`` (Dassl): after ``random.seed(seed)`` each
    class, in the order its label first appears in the train split list, gets
    ``random.sample(items, K)`` (all items if it has fewer, drawing nothing).

    Attributes:
        shots: the K values, one episode per (K, seed).
        seeds: the seeds.
    """

    shots: tuple[int, ...] = (1, 2, 4, 8, 16)
    seeds: tuple[int, ...] = (1, 2, 3)

    def params(self) -> dict[str, Any]:
        """Parameters recorded in the manifest."""
        return {"kind": "coop-kshot", "shots": list(self.shots), "seeds": list(self.seeds)}

    def pairs(self) -> list[tuple[int, int]]:
        """``(K, seed)`` of each episode, in episode order."""
        return [(k, seed) for k in self.shots for seed in self.seeds]

    def episodes(
        self, train: ClassPool, test: ClassPool, walk: Sequence[int] | None = None
    ) -> Iterator[tuple[dict[str, int], EpisodeDraw]]:
        """Yield ``({"shots": K, "seed": s}, episode)`` for every (K, seed) pair.

        Args:
            train: the support pool.
            test: the query pool (same classes).
            walk: pool positions in the order classes are sampled (Dassl: first
                appearance in the train list); default pool order. Episode labels keep
                pool order either way.
        """
        if train.classes != test.classes:
            raise FewtransError("train and test pools must list the same classes")
        order = list(range(len(train.classes))) if walk is None else list(walk)
        if sorted(order) != list(range(len(train.classes))):
            raise FewtransError("the class walk must visit every pool class exactly once")
        for index, (k, seed) in enumerate(self.pairs()):
            rng = random.Random(seed)
            support: list[tuple[str, ...]] = [()] * len(order)
            for position in order:
                items = train.items[position]
                support[position] = (
                    tuple(rng.sample(list(items), k)) if len(items) >= k else tuple(items)
                )
            yield (
                {"shots": k, "seed": seed},
                EpisodeDraw(index, train.classes, tuple(support), test.items),
            )
