"""Imported by a test's zygote (tests/evaluator/test_zygote.py): a module that fails to import with
an error other than ImportError, as a broken installation of an optional package does."""

raise RuntimeError("this module is broken on purpose")
