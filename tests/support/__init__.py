"""Test support: fake servers and fake executables shared by the tests."""
