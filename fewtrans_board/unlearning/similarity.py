"""How far a validation dataset is from the forgotten one: MMD, WordNet and Proxy-A distance.

Total knowledge loss weights each validation dataset by its distance to the forget set
(further away: a drop there is knowledge lost that unlearning should not have touched).

- MMD (the released code's definition): biased estimate with an RBF kernel
  ``k(x, y) = exp(-gamma * |x - y|^2)``, ``gamma = 0.01``:
  ``mean K(X, X) + mean K(Y, Y) - 2 mean K(X, Y)``, on un-normalised CLIP image features of
  the two train splits and on un-normalised text features of the bare class names; the
  distance is the mean of the two.
- WordNet (the paper's third weighting, not in the released code; our definition): mean
  over class pairs of ``1 - Wu-Palmer similarity`` of their first noun synsets; names
  without a synset are skipped and counted.
- Proxy-A distance (not in the released code; our definition): ``2 (1 - 2 err)``, clipped
  at 0, with ``err`` the held-out error of a logistic regression telling the two datasets'
  image features apart (stratified half/half split, seed 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from fewtrans_board.core.errors import FewtransError

MMD_GAMMA = 0.01
BLOCK = 2048
"""Rows per kernel block (keeps memory bounded for datasets with tens of thousands of images)."""


def _kernel_mean(x: np.ndarray, y: np.ndarray, gamma: float) -> float:
    """Mean of ``exp(-gamma * |x_i - y_j|^2)`` over all pairs, computed in blocks."""
    total = 0.0
    y_sq = (y * y).sum(axis=1)
    for start in range(0, len(x), BLOCK):
        block = x[start : start + BLOCK]
        sq = (block * block).sum(axis=1)[:, None] + y_sq[None, :] - 2.0 * block @ y.T
        total += float(np.exp(-gamma * np.maximum(sq, 0.0)).sum())
    return total / (len(x) * len(y))


def mmd_rbf(x: np.ndarray, y: np.ndarray, gamma: float = MMD_GAMMA) -> float:
    """Biased squared MMD between samples ``x [n, d]`` and ``y [m, d]`` with an RBF kernel."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1] or not len(x) or not len(y):
        raise FewtransError(f"MMD needs two non-empty [n, d] samples, got {x.shape} and {y.shape}")
    return _kernel_mean(x, x, gamma) + _kernel_mean(y, y, gamma) - 2.0 * _kernel_mean(x, y, gamma)


@dataclass(frozen=True)
class DatasetFeatures:
    """What the distances need of one dataset.

    Attributes:
        name: dataset name.
        images: un-normalised image features of its train split ``[n, d]``.
        texts: un-normalised text features of its bare class names ``[c, d]``.
        class_names: its class names.
    """

    name: str
    images: np.ndarray
    texts: np.ndarray
    class_names: Sequence[str]


def mmd_distance(a: DatasetFeatures, b: DatasetFeatures, gamma: float = MMD_GAMMA) -> float:
    """``0.5 * (MMD(texts) + MMD(images))`` as in the released weighting."""
    return 0.5 * (mmd_rbf(a.texts, b.texts, gamma) + mmd_rbf(a.images, b.images, gamma))


def proxy_a_distance(x: np.ndarray, y: np.ndarray, seed: int = 0) -> float:
    """``max(0, 2 (1 - 2 err))`` of a logistic regression separating ``x`` from ``y``.

    Each sample is split in half (shuffled with ``RandomState(seed)``); the classifier
    trains on the first halves and ``err`` is its error on the second halves.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    rng = np.random.RandomState(seed)
    halves = []
    for sample in (np.asarray(x, float), np.asarray(y, float)):
        if len(sample) < 4:
            raise FewtransError("Proxy-A distance needs at least 4 images per dataset")
        order = rng.permutation(len(sample))
        halves.append((sample[order[: len(sample) // 2]], sample[order[len(sample) // 2 :]]))
    (x_fit, x_test), (y_fit, y_test) = halves
    fit = np.concatenate([x_fit, y_fit])
    scaler = StandardScaler().fit(fit)
    labels = np.r_[np.zeros(len(x_fit)), np.ones(len(y_fit))]
    classifier = LogisticRegression(max_iter=2000).fit(scaler.transform(fit), labels)
    test = scaler.transform(np.concatenate([x_test, y_test]))
    truth = np.r_[np.zeros(len(x_test)), np.ones(len(y_test))]
    err = float((classifier.predict(test) != truth).mean())
    return max(0.0, 2.0 * (1.0 - 2.0 * err))


class Taxonomy(Protocol):
    """What the WordNet distance needs: synsets of a name and their Wu-Palmer similarity."""

    def synset(self, name: str) -> Any | None:
        """The first noun synset of a class name, or ``None``."""
        ...

    def similarity(self, a: Any, b: Any) -> float:
        """Wu-Palmer similarity in ``[0, 1]``."""
        ...


class NltkWordNet:
    """WordNet through nltk, from a WordNet database folder.

    Args:
        folder: a WordNet 3.x ``dict`` folder (e.g. Debian's ``/usr/share/wordnet`` from
            the ``wordnet-base`` package, or ``nltk_data/corpora/wordnet``); ``None`` uses
            nltk's own data path.

    Raises:
        FewtransError: nltk is not installed or the database cannot be read.
    """

    def __init__(self, folder: Path | None = None) -> None:
        try:
            if folder is None:
                from nltk.corpus import wordnet

                wordnet.ensure_loaded()
                self.wordnet: Any = wordnet
            else:
                from nltk.corpus.reader.wordnet import WordNetCorpusReader

                self.wordnet = WordNetCorpusReader(str(folder), None)
        except ImportError as exc:
            raise FewtransError(
                "the WordNet weighting needs nltk (pip install 'fewtrans-board[wordnet]') and a "
                "WordNet database (--wordnet DIR, e.g. Debian's /usr/share/wordnet)"
            ) from exc
        except (LookupError, OSError) as exc:
            raise FewtransError(
                f"cannot read a WordNet database ({exc}); pass --wordnet DIR"
            ) from exc

    def synset(self, name: str) -> Any | None:
        """The first noun synset of ``name`` (spaces and hyphens as underscores)."""
        for key in (name, name.replace(" ", "_"), name.replace("-", "_"), name.split()[-1]):
            found = self.wordnet.synsets(key.replace(" ", "_"), pos="n")
            if found:
                return found[0]
        return None

    def similarity(self, a: Any, b: Any) -> float:
        """Wu-Palmer similarity."""
        return float(a.wup_similarity(b) or 0.0)


@dataclass(frozen=True)
class WordNetDistance:
    """Mean ``1 - wup`` over class pairs with synsets, and how many names had none."""

    distance: float
    pairs: int
    missing: tuple[str, ...]


def wordnet_distance(
    taxonomy: Taxonomy, names_a: Sequence[str], names_b: Sequence[str]
) -> WordNetDistance:
    """WordNet distance between two class lists.

    Raises:
        FewtransError: no class of one of the lists has a synset.
    """
    found_a = [(n, taxonomy.synset(n)) for n in names_a]
    found_b = [(n, taxonomy.synset(n)) for n in names_b]
    a = [s for _, s in found_a if s is not None]
    b = [s for _, s in found_b if s is not None]
    missing = tuple(n for n, s in (*found_a, *found_b) if s is None)
    if not a or not b:
        raise FewtransError("no class name of one dataset has a WordNet synset")
    total = sum(1.0 - taxonomy.similarity(x, y) for x in a for y in b)
    return WordNetDistance(total / (len(a) * len(b)), len(a) * len(b), missing)
