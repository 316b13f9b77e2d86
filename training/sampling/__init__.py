"""Sampling replies: the engines (vLLM, transformers' generate, our own decode), the Chat tab's replies and best-of-N.
(docs/architecture.md: training/ in rooms)"""
