"""Tests for ckpt.statefile (image format, page file, integrity, inspect)."""
