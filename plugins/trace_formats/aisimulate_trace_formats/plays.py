"""Plays for formats that do not name them: the connected components of the dependency graph.

A component is labelled by its root (a node without dependencies) with the smallest
``not_before_ms``, then the smallest request id; a component without a root (a cycle, which
the core rejects later) by its first node. Every node gets ``play_id = "<prefix>:<label>"``.
"""

from __future__ import annotations


def assign_component_plays(nodes, prefix):
    index = {node.request_id: i for i, node in enumerate(nodes)}
    parent = list(range(len(nodes)))

    def find(i):
        root = i
        while parent[root] != root:
            root = parent[root]
        while parent[i] != root:  # path compression
            parent[i], i = root, parent[i]
        return root

    for i, node in enumerate(nodes):
        for dep in node.dependencies:
            source = index.get(dep.request_id)
            if source is not None:  # unknown ids are the core's error to report
                left, right = find(i), find(source)
                if left != right:
                    parent[left] = right
    labels = {}
    for node_index, node in enumerate(nodes):
        if not node.dependencies:
            component = find(node_index)
            best = labels.get(component)
            key = (node.not_before_ms, node.request_id)
            if best is None or key < best:
                labels[component] = key
    for node_index, node in enumerate(nodes):
        component = find(node_index)
        label = labels.setdefault(component, (None, node.request_id))[1]
        node.play_id = f"{prefix}:{label}"


__all__ = ["assign_component_plays"]
