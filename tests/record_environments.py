"""Record the library versions of the environment this Python runs in, as `make environments` does for both of
`make test`'s environments: `python tests/record_environments.py NAME "ABOUT"` updates one entry of
wemask_cli/resources/environments.json (what `wemask env` compares against and the README's version table)."""

from __future__ import annotations

import json
import platform
import sys
from datetime import date
from pathlib import Path

from wemask_cli.runtime.versions import TESTED_LIBRARIES, library_versions

RECORD = Path(__file__).resolve().parent.parent / "wemask_cli" / "resources" / "environments.json"


def main(name: str, about: str) -> None:
    record = json.loads(RECORD.read_text()) if RECORD.exists() else {"environments": {}}
    record["environments"][name] = {
        "about": about,
        "recorded": date.today().isoformat(),
        "python": platform.python_version(),
        "versions": library_versions(TESTED_LIBRARIES),
    }
    RECORD.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    print(f"{RECORD}: {name} = {record['environments'][name]['versions']}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
