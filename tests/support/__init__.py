"""Test servers and harnesses shared by the test suites (not test material of the library)."""
