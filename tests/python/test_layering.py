"""tools/check_layering.py, which every build runs: DESIGN.md's include rules hold
on the tree, and a forbidden include is refused, naming the rule."""

import os
import subprocess
import sys

from conftest import REPO

CHECK = os.path.join(REPO, "tools", "check_layering.py")


def check(root):
    return subprocess.run([sys.executable, CHECK, str(root)], capture_output=True, text=True)


def test_the_tree_follows_the_layers():
    r = check(REPO)
    assert r.returncode == 0, r.stderr


def write(root, path, text):
    full = root / path
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_text(text)


def test_forbidden_includes_are_refused(tmp_path):
    write(tmp_path, "include/engine/kiln/engine.h", "#pragma once\n")
    write(tmp_path, "include/runtime/kiln/runtime.h", "#pragma once\n")
    write(tmp_path, "src/trace/up.cpp", '#include "kiln/engine.h"\n#include "kiln/runtime.h"\n')  # up, then down
    write(tmp_path, "src/runtime/hash.cpp", "#include <xxhash.h>\n")
    write(tmp_path, "fusion/aten.cpp", "#include <ATen/ATen.h>\n")
    write(tmp_path, "src/engine/jit.cpp", "#include <llvm/IR/Module.h>\n")
    write(tmp_path, "tests/cpp/anything.cpp", "#include <ATen/ATen.h>\n#include <xxhash.h>\n")  # tests are exempt
    r = check(tmp_path)
    assert r.returncode == 1
    lines = [line for line in r.stderr.splitlines() if "violation(s)" not in line]
    assert len(lines) == 4, r.stderr
    assert 'src/trace/up.cpp: the trace layer includes "kiln/engine.h" of the engine layer' in r.stderr
    assert "src/runtime/hash.cpp: includes <xxhash.h>: RocksDB and xxHash only in the cache layer" in r.stderr
    assert "fusion/aten.cpp: includes <ATen/ATen.h>: torch only in the dispatch layer" in r.stderr
    assert "src/engine/jit.cpp: includes <llvm/IR/Module.h>: LLVM only in the codegen layer" in r.stderr
