"""pytest setup for the Python binding's tests: the package from python/ of this
checkout (unless sdpa is installed and SDPA_TEST_INSTALLED=1), the tests' own
folder for reference.py. libsdpa is found as python/sdpa/_lib.py says
($SDPA_LIBRARY, beside the package, build*/ of the checkout, the prefix)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
if os.environ.get("SDPA_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(REPO, "python"))
