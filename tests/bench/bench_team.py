"""A whole team at once: N users (browser contexts, one session each) open different kvscope views on one server at
the same moment; the latency distribution beside the same load on a minimal Streamlit page, in one run.

    .venv/bin/python tests/bench/bench_team.py              # or: make bench
    .venv/bin/python tests/bench/bench_team.py --users 30 --rounds 3

Latency = one user's page.goto until its first render (kvscope: its 4 headline figures drawn; minimal page: its
title; both: the script run over; stamped in the page). kvscope's sidebar inputs follow in a rerun once the browser
has drawn that (ui.layout.wait_for_paint): "kvscope inputs" is page.goto until they are drawn. Rounds alternate
kvscope and the minimal page so load on the machine hits both alike.
Traffic goes to 127.0.0.1 only. A report, not a test (tests/e2e/test_hostile.py checks correctness under this load).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import resource
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_app import BENCH_TMP, MINIMAL_PAGE, group_cpu_s, minimal_folder, served_from  # noqa: E402  (sets env)

RATIO_TARGET = 1.5  # the median user's load ÷ the minimal page's, same load, same run
MINIMAL_PAGE_LOAD = {"ready": "h1", "count": 1, "read": False, "inputs": False}  # its title; no metrics, no inputs


def summary(values: list[float]) -> dict[str, float]:
    deciles = statistics.quantiles(values, n=10, method="inclusive")
    return {"min": min(values), "median": statistics.median(values), "p90": deciles[-1], "max": max(values)}


def reaped_cpu_s() -> float:
    """CPU seconds of the child processes this one has waited for: after a round, its Playwright driver and the
    Chromium it ran (each level reaps the one below), so a round's difference is the browser's share."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_round(minimal: bool, urls_of, cache: Path) -> tuple[list, float, float]:
    """Each user's answer (tests.e2e.test_hostile.Answer: first render, and kvscope's inputs drawn after it); the CPU
    seconds the server's process group used from its start to the last page complete, inputs included; and the
    browser's CPU seconds for the round."""
    from tests.e2e.conftest import Server
    from tests.e2e.test_hostile import drive_team

    with served_from(minimal_folder()) if minimal else contextlib.nullcontext():
        server = Server(env={"KVSCOPE_CACHE": str(cache)}, log=BENCH_TMP / "team-server.log")
    try:
        server.wait_healthy()
        urls = [server.url + path for path in urls_of(minimal)]
        before = reaped_cpu_s()
        answers = drive_team(urls, **MINIMAL_PAGE_LOAD) if minimal else drive_team(urls)
        browser = reaped_cpu_s() - before
        if any(a.errors for a in answers):
            raise SystemExit(f"an exception box appeared under load:\n{server.tail()}")
        return answers, group_cpu_s(server.proc.pid), browser
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2, help="rounds per page; each round is a fresh server")
    args = parser.parse_args()

    import streamlit

    from tests.e2e.conftest import CHROMIUM
    from tests.e2e.test_hostile import team

    if not Path(CHROMIUM).is_file():
        raise SystemExit(f"Chromium not found at {CHROMIUM} (or set KVSCOPE_CHROMIUM)")
    members = team(args.users)
    links = [m.link for m in members]

    def urls_of(minimal: bool) -> list[str]:
        return ["/"] * args.users if minimal else links

    cache = BENCH_TMP / "cache-team"
    print(f"kvscope team bench — {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"streamlit {streamlit.__version__}")  # fmt: skip
    print(f"{args.users} users at once, each a fresh browser context in one headless Chromium, one server per round; "
          f"{args.rounds} rounds per page, alternating")  # fmt: skip
    print(f"kvscope: {args.users} different views (models, engines, cards, contexts, weights); "
          f"minimal page: {MINIMAL_PAGE.strip()!r}")  # fmt: skip
    times: dict[str, list[float]] = {"kvscope": [], "minimal": []}
    inputs: list[float] = []
    cpu: dict[str, list[float]] = {"kvscope": [], "minimal": []}
    browser_cpu: dict[str, list[float]] = {"kvscope": [], "minimal": []}
    for _ in range(args.rounds):
        for name in times:
            answers, seconds, browser = run_round(name == "minimal", urls_of, cache)
            times[name] += [a.first for a in answers]
            inputs += [a.inputs for a in answers if a.inputs is not None]
            cpu[name].append(seconds)
            browser_cpu[name].append(browser)
    stats = {name: summary(values) for name, values in times.items()}
    stats["kvscope inputs"] = summary(inputs)
    print(f"\n  {'first render, s':<15} {'min':>7} {'median':>7} {'p90':>7} {'max':>7}   "
          f"(n = {args.users * args.rounds})")  # fmt: skip
    for name, s in stats.items():
        print(f"  {name:<15} {s['min']:>7.2f} {s['median']:>7.2f} {s['p90']:>7.2f} {s['max']:>7.2f}")
    ratio = {k: stats["kvscope"][k] / stats["minimal"][k] for k in ("min", "median", "p90", "max")}
    mark = "PASS" if ratio["median"] < RATIO_TARGET else "FAIL"
    print(f"  {'kvscope ÷ min':<15} " + " ".join(f"{ratio[k]:>6.2f}x" for k in ("min", "median", "p90", "max"))
          + f"   target: median < {RATIO_TARGET:.1f}x, {mark}")  # fmt: skip
    # CPU barely moves with the machine's load (wall time does): the steadier ratio on a shared machine
    print("\n  CPU, s (median per round)")
    for label, values in (("server, start to last page", cpu), ("browser, the round", browser_cpu)):
        per_round = {name: statistics.median(v) for name, v in values.items()}
        print(f"  {label:<28} kvscope {per_round['kvscope']:>6.2f}  minimal {per_round['minimal']:>6.2f}  "
              f"ratio {per_round['kvscope'] / per_round['minimal']:.2f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
