"""Helpers shared by more than one test folder (modules, not tests: no ``test_`` prefix).

Imported as ``helpers.<module>``: ``tests/`` is on ``sys.path`` as the folder of the root
``conftest.py``. A helper used by one folder's tests only may live beside them instead;
``test_layout.py`` checks that no test module imports another and that no folder imports
another folder's helpers.
"""
