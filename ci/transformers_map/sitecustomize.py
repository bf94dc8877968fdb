"""Started in every Python process of a ``ci/transformers_map.py record`` run (this folder is put on
PYTHONPATH): measures, with coverage.py, which lines of the packages that differ between the Trn2
stack's environment and the newest (transformers, tokenizers, huggingface_hub) each test runs,
including in the subprocesses a test starts (a pytest session, a release-check child, a server).

The context of a line is the top-level test that caused it: the record plugin sets
``CARBON_MAP_TEST`` to the running test's node id in the top process; a child inherits it and keeps
it as its whole process's context, whatever its own pytest does.
"""

import os

if os.environ.get("CARBON_MAP_DIR"):
    try:
        import coverage
    except ImportError:  # an environment without coverage (a server's venv): not measured, and said so
        with open(os.path.join(os.environ["CARBON_MAP_DIR"], "unmeasured.txt"), "a") as f:
            f.write(f"{os.getpid()} {os.environ.get('CARBON_MAP_TEST', '')}\n")
    else:
        _cov = coverage.Coverage(
            data_file=os.path.join(os.environ["CARBON_MAP_DIR"], ".coverage"), data_suffix=True,
            source_pkgs=os.environ["CARBON_MAP_PACKAGES"].split(","), context=os.environ.get("CARBON_MAP_TEST") or "-",
            config_file=False)
        # quiet: a child's stderr is what many tests read, and "module never imported" is the common case
        _cov.set_option("run:disable_warnings", ["module-not-imported", "no-data-collected", "module-not-measured"])
        _cov.start()
        import atexit

        atexit.register(lambda: (_cov.stop(), _cov.save()))
