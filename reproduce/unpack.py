"""Reassemble files packed by a `reproduce/` entry point: `python reproduce/unpack.py PARTS_DIR --output_dir DIR`.

Every part and every file is checked against the SHA-256 in `PARTS_DIR/parts.json`; nothing is written under its
final name unless it matches. A file of the same name already in DIR (the recorded results of an earlier run) is
refused before anything is written, unless `--overwrite` is given.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import unpack  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts_dir")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--overwrite", action="store_true",
                        help="replace files of the same names already in --output_dir (refused without it)")
    args = parser.parse_args(argv)
    try:
        for path in unpack(Path(args.parts_dir), Path(args.output_dir), overwrite=args.overwrite):
            print(path)
    except (OSError, ValueError, KeyError) as error:
        print(f"unpack: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
