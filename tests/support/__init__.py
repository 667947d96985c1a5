"""Tools the tests share that the shipped package has no use for."""
