"""WordNet hierarchy for ImageNet-style DAG episode sampling (Meta-Dataset procedure).

The sampler needs, for every internal node of the evaluation split's graph, the leaves
(classes) it spans. fewtrans-board ships the Meta-Dataset training-split graph (the
FewTrans BASE classes) as data; :func:`sampling_graph` rebuilds such a graph from WordNet
is-a edges the way Meta-Dataset does (ancestors of the leaves, links outside the graph
removed, single-child nodes collapsed), so a local copy can be cross-checked.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Edge = tuple[str, str]


def children_map(edges: Iterable[Edge]) -> dict[str, set[str]]:
    """Map each parent id to its set of children."""
    children: dict[str, set[str]] = {}
    for parent, child in edges:
        children.setdefault(parent, set()).add(child)
        children.setdefault(child, set())
    return children


def spanning_leaves(edges: Iterable[Edge]) -> dict[str, frozenset[str]]:
    """Return, for every node of the graph, the set of leaves it spans (a leaf spans itself)."""
    children = children_map(edges)
    memo: dict[str, frozenset[str]] = {}

    def visit(node: str) -> frozenset[str]:
        if node not in memo:
            kids = children[node]
            memo[node] = (
                frozenset({node}) if not kids else frozenset().union(*(visit(k) for k in kids))
            )
        return memo[node]

    for node in children:
        visit(node)
    return memo


def pool_nodes(edges: Iterable[Edge], pool_ids: Sequence[str]) -> tuple[tuple[int, ...], ...]:
    """Internal nodes as tuples of pool positions, ordered as the reference sampler needs.

    Nodes are sorted by id; each node's leaves are sorted by id and mapped to their
    position in ``pool_ids``. Leaves outside the pool are dropped.
    """
    spans = spanning_leaves(edges)
    position = {cid: i for i, cid in enumerate(pool_ids)}
    nodes = []
    for node in sorted(spans):
        leaves = spans[node]
        if leaves == frozenset({node}):
            continue  # a leaf, not an internal node
        nodes.append(tuple(position[leaf] for leaf in sorted(leaves) if leaf in position))
    return tuple(nodes)


def _ancestors(leaves: Iterable[str], parents: dict[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    stack = [p for leaf in leaves for p in parents.get(leaf, ())]
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(parents.get(node, ()))
    return seen


def _collapse(
    nodes: set[str], children: dict[str, set[str]], parents: dict[str, set[str]]
) -> set[str]:
    """Remove nodes with exactly one child, linking that child to their parents."""
    changed = True
    while changed:
        changed = False
        for node in sorted(nodes):
            if len(children[node]) == 1:
                (child,) = children[node]
                for parent in parents[node]:
                    children[parent].discard(node)
                    children[parent].add(child)
                    parents[child].add(parent)
                parents[child].discard(node)
                nodes.discard(node)
                del children[node], parents[node]
                changed = True
    return nodes


def sampling_graph(
    is_a: Iterable[Edge], leaves: Iterable[str], root: str | None = None
) -> list[Edge]:
    """Meta-Dataset's ``create_sampling_graph`` on ``is_a`` (parent, child) pairs.

    Args:
        is_a: WordNet is-a edges (``wordnet.is_a.txt``).
        leaves: the classes that must be the leaves of the graph.
        root: if given, keep only ancestors that are ``root`` or below it.

    Returns:
        The sorted (parent, child) edges of the collapsed graph.
    """
    leaf_set = set(leaves)
    parents: dict[str, set[str]] = {}
    for parent, child in is_a:
        parents.setdefault(child, set()).add(parent)
    nodes = _ancestors(leaf_set, parents)
    if root is not None:
        below_root = {n for n in nodes if n == root or root in _ancestors([n], parents)}
        nodes = below_root
    nodes |= leaf_set
    children: dict[str, set[str]] = {n: set() for n in nodes}
    kept_parents = {n: {p for p in parents.get(n, ()) if p in nodes} for n in nodes}
    for node, ps in kept_parents.items():
        for p in ps:
            children[p].add(node)
    nodes = _collapse(nodes, children, kept_parents)
    return sorted((p, c) for p in nodes for c in children[p])
