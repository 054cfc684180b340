"""`make test` does its own set-up on a fresh machine: the browser it needs is installed, or it says how and fails."""

from __future__ import annotations

import subprocess

from tests.conftest import ROOT


def make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", *args], capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_test_target_depends_on_the_browser_and_the_engines():
    plan = make("-n", "-p", "test").stdout
    rule = next(line for line in plan.splitlines() if line.startswith("test:"))
    assert "browser" in rule and "engines" in rule and "setup" in rule


def test_missing_browser_without_root_fails_with_one_instruction():
    proc = make("browser", "CHROMIUM=/nonexistent/chromium", "USER_ID=1000")
    assert proc.returncode != 0
    assert "apt-get install chromium" in proc.stdout
    assert "installing" not in proc.stdout


def test_missing_browser_as_root_is_installed_with_apt():
    plan = make("-n", "browser", "CHROMIUM=/nonexistent/chromium", "USER_ID=0").stdout
    assert "apt-get install" in plan and "chromium" in plan


def test_present_browser_installs_nothing(tmp_path):
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    proc = make("browser", f"CHROMIUM={fake}", "USER_ID=0")
    assert proc.returncode == 0
    assert proc.stdout == ""
