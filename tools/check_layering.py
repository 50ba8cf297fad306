"""Checks that every C++ #include follows DESIGN.md's layering; exits 1 naming each violation.

Run by every build (CMake target kiln_layering) and by `make lint`. The include
paths each layer's library gets already refuse most forbidden includes; this
also catches the headers every compiler finds (xxHash, RocksDB in /usr/include)
and names the rule that was broken.
"""

import pathlib
import re
import sys

# Layer -> the folders that hold it (sources and its public headers).
FOLDERS = {
    "support": ["src/support", "include/support"],
    "ir": ["src/ir", "include/ir"],
    "runtime": ["src/runtime", "include/runtime"],
    "trace": ["src/trace", "include/trace"],
    "fusion": ["fusion", "include/fusion"],
    "codegen": ["src/codegen", "include/codegen"],
    "cache": ["cache", "include/cache"],
    "engine": ["src/engine", "include/engine"],
    "dispatch": ["src/dispatch"],
}

# Layer -> the layers it may include (calls go down, never up).
MAY_USE = {
    "support": set(),
    "ir": set(),
    "runtime": {"support"},
    "trace": {"support", "ir", "runtime"},
    "fusion": {"support", "ir", "runtime", "trace"},
    "codegen": {"support", "ir"},
    "cache": {"support", "ir", "runtime"},
    "engine": {"support", "ir", "runtime", "trace", "fusion", "codegen", "cache"},
    "dispatch": {"support", "ir", "runtime", "trace", "fusion", "codegen", "cache", "engine"},
}

# Third-party headers only one layer may include: (pattern, layer, what).
EXCLUSIVE = [
    (re.compile(r"^(ATen|c10|torch|pybind11)/|^Python\.h$"), "dispatch", "torch"),
    (re.compile(r"^llvm(-c)?/"), "codegen", "LLVM"),
    (re.compile(r"^rocksdb/|^xxhash\.h$"), "cache", "RocksDB and xxHash"),
]

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def layer_of(path):
    for layer, folders in FOLDERS.items():
        if any(path == f or path.startswith(f + "/") for f in folders):
            return layer
    return None


def header_layer(root, name):
    """The layer a kiln header belongs to: "kiln/x.h" by its include folder, "layer/x.h" by its source folder."""
    if name.startswith("kiln/"):
        for layer in FOLDERS:
            if (root / "include" / layer / name).exists():
                return layer
        return "missing"
    first = name.split("/", 1)[0]
    for layer, folders in FOLDERS.items():
        if any(f in (first, "src/" + first) for f in folders):
            return layer
    return None


def violations(root):
    for path in sorted(root.glob("**/*")):
        rel = path.relative_to(root).as_posix()
        if path.suffix not in {".h", ".cpp"} or not path.is_file():
            continue
        layer = layer_of(rel)
        if layer is None:
            continue  # tests and benchmarks link whatever they exercise
        for name in INCLUDE.findall(path.read_text()):
            for pattern, owner, what in EXCLUSIVE:
                if pattern.search(name) and layer != owner:
                    yield f"{rel}: includes <{name}>: {what} only in the {owner} layer"
            used = header_layer(root, name)
            if used == "missing":
                yield f'{rel}: includes "{name}", which is no layer\'s public header (include/<layer>/kiln/)'
            elif used is not None and used != layer and used not in MAY_USE[layer]:
                yield (
                    f'{rel}: the {layer} layer includes "{name}" of the {used} layer; '
                    f"{layer} may use {', '.join(sorted(MAY_USE[layer])) or 'no other layer'}"
                )


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    found = list(violations(root))
    for v in found:
        print(f"layering: {v}", file=sys.stderr)
    if found:
        print(f"layering: {len(found)} violation(s) of DESIGN.md's layers (tools/check_layering.py)", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
