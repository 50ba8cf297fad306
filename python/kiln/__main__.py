"""python -m kiln knobs [--markdown] | info | cache stats|list|verify|clear|prune | cache export|import FILE"""

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


# Commands that write the store, refused in read-only mode (KILN_CACHE_READONLY=1).
_WRITING = ("clear", "prune", "import")
# Commands that take a FILE; the others take none.
_WITH_FILE = ("export", "import")
_TIMEOUT_MS = 60000  # for the writer to take what a command queued


def _fail(message):
    print(f"python -m kiln cache: {message}", file=sys.stderr)
    sys.exit(1)


def _stats(where, entries, bad):
    import time

    total = sum(e[1] for e in entries)
    print(f"directory: {where}")
    print(f"entries: {len(entries)} ({len(bad)} bad or built for another environment)")
    print(f"bytes: {total}")
    times = [e[2] for e in entries if e[2]]
    if times:
        for label, t in (("oldest", min(times)), ("newest", max(times))):
            print(f"{label} entry: {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(t))}")
    print(f"compile time stored: {sum(e[3] for e in entries):.1f} ms")
    _runs()


def _runs(last=5):
    """The runs recorded in runs.log (each process that used the store, at its exit)."""
    import time

    from . import _C

    runs = _C.cache_runs()
    hits, misses, compiles, evicted = (sum(r[i] for r in runs) for i in (2, 3, 4, 5))
    looked_up = hits + misses
    rate = f", hit rate {100.0 * hits / looked_up:.1f}%" if looked_up else ""
    print(f"runs recorded: {len(runs)}: {hits} hits, {misses} misses{rate}, {compiles} compiles, {evicted} evicted")
    for t, pid, h, m, c, e in runs[-last:]:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
        print(f"  {stamp}  pid {pid}: {h} hits, {m} misses, {c} compiles, {e} evicted")


def _cache(args):
    import time

    from . import _C

    if args.action in _WITH_FILE and not args.file:
        _fail(f"'{args.action}' needs a FILE: python -m kiln cache {args.action} FILE")
    if args.action not in _WITH_FILE and args.file:
        _fail(f"'{args.action}' takes no FILE (only export and import do)")
    where = _C.cache_dir()
    if not where:
        print("kiln's persistent cache is off in this process (KILN_CACHE=0, or its directory was refused)")
        sys.exit(1)
    if args.action in _WRITING and _C.cache_read_only():
        _fail(f"'{args.action}' writes the cache, which KILN_CACHE_READONLY=1 makes read-only; unset it first")
    if args.action == "clear":
        n = _C.cache_clear()
        _C.cache_flush(_TIMEOUT_MS)
        print(f"{where}: {n} entries deleted")
        return
    if args.action == "prune":
        deleted, kept = _C.cache_prune(_TIMEOUT_MS)
        print(f"{where}: deleted {deleted} entries (bad or built for another environment), kept {kept}")
        return
    if args.action == "export":
        n, error = _C.cache_export(args.file)
        if error:
            _fail(f"export failed: {error}")
        print(f"{where}: exported {n} entries to {args.file}")
        return
    if args.action == "import":
        imported, foreign, bad, error = _C.cache_import(args.file, _TIMEOUT_MS)
        if error:
            _fail(f"import failed, nothing was imported: {error}" if not imported else f"import failed: {error}")
        print(f"{where}: imported {imported}, skipped {foreign} built for another environment, {bad} bad")
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
    _stats(where, entries, bad)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m kiln")
    sub = parser.add_subparsers(dest="command", required=True)
    knobs = sub.add_parser("knobs", help="each knob's current value and where it came from")
    knobs.add_argument("--markdown", action="store_true", help="print docs/knobs.md")
    knobs.set_defaults(func=_knobs)
    info = sub.add_parser("info", help="the devices kiln registered")
    info.set_defaults(func=_info)
    cache = sub.add_parser("cache", help="the persistent executable cache (KILN_CACHE_DIR)")
    cache.add_argument("action", choices=["stats", "list", "verify", "clear", "prune", "export", "import"])
    cache.add_argument("file", nargs="?", help="export: the file to write; import: the file to read")
    cache.set_defaults(func=_cache)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
