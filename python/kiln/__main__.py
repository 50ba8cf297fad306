"""python -m kiln knobs [--markdown] | info"""

import argparse
import sys


def _knobs(args):
    from . import _C

    if args.markdown:
        sys.stdout.write(_C.knobs_markdown())
        return
    rows = _C.knobs()
    width = max(len(r[0]) for r in rows)
    for name, value, source, _default, accepted, help_text in rows:
        shown = value if value != "" else "(empty)"
        print(f"{name:<{width}}  {shown:<10} ({source})  accepted: {accepted}")
        print(f"{'':<{width}}  {help_text}")


def _info(args):
    import torch

    import kiln

    name = kiln.DEVICE_NAME
    mod = getattr(torch, name)
    print(f"kiln device '{name}': {mod.device_count()} device(s)")
    for i in range(mod.device_count()):
        print(f"  {name}:{i}: {mod.get_device_name(i)}")
    print(f"torch {torch.__version__}; accelerator: {torch.accelerator.current_accelerator()}")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m kiln")
    sub = parser.add_subparsers(dest="command", required=True)
    knobs = sub.add_parser("knobs", help="each knob's current value and where it came from")
    knobs.add_argument("--markdown", action="store_true", help="print docs/knobs.md")
    knobs.set_defaults(func=_knobs)
    info = sub.add_parser("info", help="the devices kiln registered")
    info.set_defaults(func=_info)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
