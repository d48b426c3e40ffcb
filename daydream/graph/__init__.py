"""Dependency graphs: data structure and construction from traces."""
from .build import GraphBuilder, build_graph
from .graph import Anchor, DependencyGraph, EdgeKind, WaitKind

__all__ = ["build_graph", "GraphBuilder", "DependencyGraph", "EdgeKind", "Anchor", "WaitKind"]
