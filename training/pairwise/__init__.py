"""Pairwise and unpaired data and the frozen reference: pairs files and snapshots, data types, shared-prefix sequences,
reference log-probs, reward scores of pairs. (docs/architecture.md: training/ in rooms)"""
