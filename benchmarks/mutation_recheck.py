"""Re-check mutmut survivors with each mutant switched on from process start, against any tests.

mutmut's workers import the package before they switch a mutant on, so an edit to code that runs at import (the
built-in schemes' registration) is never seen, and a survivor is only checked against the selected test files. This
runs pytest once per named mutant inside mutmut's `mutants/` folder, with `MUTANT_UNDER_TEST` set in the environment
from the start, and prints one line per mutant: killed (a test failed, or the package failed to import), survived.

    python benchmarks/mutation_recheck.py NAMES_FILE -- tests/model/test_fast_paths.py -k "not flex_attention"

NAMES_FILE holds one mutant name a line (`mutmut results` lists them). Run it after `mutmut run`, from the repository
root, with `PYTHONPATH` unset.
"""

import argparse
import os
import subprocess
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", help="a file with one mutant name a line")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="after --: test paths and pytest options")
    args = parser.parse_args()
    names = [line.strip() for line in open(args.names, encoding="utf-8") if line.strip()]
    pytest_args = [a for a in args.pytest_args if a != "--"]
    env = dict(os.environ, PYTHONPATH="src", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    for name in ["", *names]:  # "" first: the tests must pass with no mutant
        start = time.time()
        command = [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider", *pytest_args]
        result = subprocess.run(command, cwd="mutants", env={**env, "MUTANT_UNDER_TEST": name}, capture_output=True)
        verdict = "survived" if result.returncode == 0 else "killed"
        if not name and result.returncode:
            sys.exit(f"the tests fail with no mutant (exit {result.returncode}):\n{result.stdout.decode()[-3000:]}")
        last = (result.stdout.decode().strip().splitlines() or [""])[-1]
        print(f"{name or 'no mutant'}\t{verdict}\t{time.time() - start:.0f} s\t{last}", flush=True)


if __name__ == "__main__":
    main()
