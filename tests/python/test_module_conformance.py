"""Module conformance over module_db in both kiln modes; writes the module
section of docs/conformance.md (see module_conformance.py)."""

import os
import time

import kiln
import module_conformance
from conftest import REPO, UNDER_FIXED_POLICY

MIN_PASS_RATE = 0.999


def test_module_conformance_writes_report_and_passes():
    mode = kiln.mode()
    start = time.time()
    only = os.environ.get("CONFORMANCE_MODULES")  # debugging aid: a comma-separated subset, e.g. nn.Linear
    metrics = {}
    results = module_conformance.run(set(only.split(",")) if only else None, metrics=metrics)
    assert kiln.mode() == mode, "the harness must restore the kiln mode"
    report = module_conformance.markdown(results, time.time() - start, metrics)
    if not only and UNDER_FIXED_POLICY:  # the report is the fixed policy's
        module_conformance.conformance.write_report(os.path.join(REPO, "docs", "conformance.md"), modules=report)
    errors = module_conformance.harness_errors(results)
    assert not errors, f"harness errors: {errors}"
    for m in module_conformance.MODES:
        passed, failed, skipped = module_conformance.totals(results, m)
        assert passed + failed > (0 if only else 1800), f"{m}: only {passed + failed} samples ran"
        rate = passed / max(1, passed + failed)
        assert rate >= MIN_PASS_RATE, f"{m} pass rate {rate:.4f} < {MIN_PASS_RATE}"
    unexplained = module_conformance.unexplained_failures(results)
    assert not unexplained, "failures not listed in module_conformance.EXPLANATIONS: " + "; ".join(
        f"{mode} {module} [{index}] {desc}: {reason}" for mode, module, (index, desc, reason) in unexplained
    )
