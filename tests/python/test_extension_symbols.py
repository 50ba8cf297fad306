"""LLVM is linked statically and hidden: another LLVM in the process (numba,
a second extension) must never bind to kiln's copy, nor kiln to theirs."""

import shutil
import subprocess

import pytest

import kiln


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs binutils' nm")
def test_extension_exports_no_llvm_symbol():
    so = kiln._C.__file__
    exported = subprocess.run(["nm", "-DC", "--defined-only", so], capture_output=True, text=True, check=True).stdout
    llvm = [line for line in exported.splitlines() if "llvm" in line.lower()]
    assert llvm == [], f"{len(llvm)} LLVM symbols exported by {so}, e.g. {llvm[:3]}"
    assert "PyInit__C" in exported


def test_extension_does_not_load_a_shared_llvm():
    deps = subprocess.run(["ldd", kiln._C.__file__], capture_output=True, text=True).stdout
    assert "libLLVM" not in deps, deps
