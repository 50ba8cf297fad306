"""python -m kiln knobs [--markdown] | info | cache stats|list|verify|clear"""

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


def _cache(args):
    import time

    from . import _C

    where = _C.cache_dir()
    if not where:
        print("kiln's persistent cache is off in this process (KILN_CACHE=0, or its directory was refused)")
        sys.exit(1)
    if args.action == "clear":
        n = _C.cache_clear()
        _C.cache_flush(10000)
        print(f"{where}: {n} entries deleted")
        return
    entries = _C.cache_entries()
    bad = [e for e in entries if e[4]]
    if args.action == "list":
        for key, size, written, compile_ms, problem in entries:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(written)) if written else "?"
            print(f"{key}  {size:>8} B  {stamp}  compiled in {compile_ms:7.2f} ms  {problem or 'ok'}")
        return
    if args.action == "verify":
        for key, _size, _written, _compile_ms, problem in bad:
            print(f"bad entry {key}: {problem}")
        print(f"{where}: {len(entries)} entries, {len(bad)} bad")
        sys.exit(1 if bad else 0)
    total = sum(e[1] for e in entries)
    print(f"directory: {where}")
    print(f"entries: {len(entries)} ({len(bad)} bad or built for another environment)")
    print(f"bytes: {total}")
    times = [e[2] for e in entries if e[2]]
    if times:
        for label, t in (("oldest", min(times)), ("newest", max(times))):
            print(f"{label} entry: {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(t))}")
    print(f"compile time stored: {sum(e[3] for e in entries):.1f} ms")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m kiln")
    sub = parser.add_subparsers(dest="command", required=True)
    knobs = sub.add_parser("knobs", help="each knob's current value and where it came from")
    knobs.add_argument("--markdown", action="store_true", help="print docs/knobs.md")
    knobs.set_defaults(func=_knobs)
    info = sub.add_parser("info", help="the devices kiln registered")
    info.set_defaults(func=_info)
    cache = sub.add_parser("cache", help="the persistent executable cache (KILN_CACHE_DIR)")
    cache.add_argument("action", choices=["stats", "list", "verify", "clear"])
    cache.set_defaults(func=_cache)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
