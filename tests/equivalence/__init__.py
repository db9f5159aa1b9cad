"""Equivalence harness: the same script of runs on two checkouts, recorded and compared."""
