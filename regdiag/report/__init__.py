"""Renderers of a Comparison / Explanation: terminal (rich), Markdown, self-contained HTML.

The words are built once in `text.py`; each renderer lays them out for its medium.
"""
