"""RobinHood testbed: start a topology as local processes, replay a trace under a scenario, compare policies."""
from __future__ import annotations


def main() -> int:
    """The robinhood-testbed console script: the CLI, or a clear word when the testbed's
    own dependencies (the "testbed" extra) are not installed."""
    try:
        from .cli import main as cli_main
    except ModuleNotFoundError as e:
        import sys

        print(f"robinhood-testbed: {e.name} is missing: install the testbed's dependencies with "
              "pip install 'robinhood[testbed]' (or make venv)", file=sys.stderr)
        return 2
    from robinhood_common import console

    return console.run(cli_main)
