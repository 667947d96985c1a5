"""Tests of ckpt.state written against its public API (issue 2, Part 3)."""
