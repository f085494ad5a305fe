"""`hf-readonce` command line: `hf-readonce demo` runs the package's main job (see `hf_readonce.demo`)."""

import argparse
import sys


def main(argv=None) -> int:
    """Entry point of the `hf-readonce` console script.

    Args:
        argv (`list[str]`, *optional*): arguments after the program name; defaults to `sys.argv[1:]`.

    Returns:
        `int`: the process exit status (0 on success).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="hf-readonce", description="Read a document once, reuse it everywhere.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="MiniLM -> DeFormer, fine-tune, answer from cached passages, print EM/F1 and speed-up",
                   add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command == "demo":
        from .demo import main as demo_main

        demo_main(rest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
