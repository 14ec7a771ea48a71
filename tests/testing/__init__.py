"""Helpers the Python suites share (tests/python, tests/hostile).

Both conftest.py files put tests/ on sys.path, so tests and the child
processes they start import these as `testing.<module>`. The C++ headers
beside them are the C++ tests' shared helpers.
"""
