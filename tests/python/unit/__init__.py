"""The client modules' unit tests (see conftest.py). A package, so that its
conftest is imported as unit.conftest and leaves the end-to-end tests'
`from conftest import ...` alone."""
