"""Runs the papers' own TF1 code releases beside tfdp: harness, compatibility shim, jobs.

Nothing of the releases is part of tfdp: the user supplies a checkout, the harness runs a
temporary copy of it and keeps only numbers, hashes and the diff of its overrides.
"""
