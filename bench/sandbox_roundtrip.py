"""Round trip executor -> sandbox -> executor for a trivial tool: p50 and p99.

`make bench` (or `python bench/sandbox_roundtrip.py [--calls N]`). Starts an
embedded NATS and the tool-sandbox service as its own process, as deployed,
then asks for tool runs exactly as the executor's loop does
(`o_executor.sandbox_calls.run_user_tool`: a RunTool command, then the
outcome event), one after another, and prints the latency figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "contracts"), str(ROOT / "services"), str(ROOT)]

from o_contracts import subjects  # noqa: E402
from o_contracts.commands import StartRun  # noqa: E402
from o_contracts.envelope import Envelope  # noqa: E402
from o_contracts.ids import new_id  # noqa: E402
from o_contracts.models import ChatMessage  # noqa: E402
from o_devtools.embedded import start_servers  # noqa: E402
from o_executor.run.agent import AgentConfig, UserTool  # noqa: E402
from o_executor.sandbox_calls import run_user_tool  # noqa: E402
from o_runtime.eventlog import EventLog  # noqa: E402
from o_runtime.nats_identity import NKEY_ENV, Identity  # noqa: E402

TRIVIAL = '''
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: First.
        b: Second.
    """
    return a + b
'''


async def wait_for_sandbox(nats_url: str, gateway: Identity) -> dict[str, object]:
    """The sandbox's report, once it answers (asked as the gateway asks for /v1/health)."""
    import msgpack
    import nats
    from nats.errors import NoRespondersError, TimeoutError

    nc = await nats.connect(nats_url, **gateway.options())
    try:
        async with asyncio.timeout(60):
            while True:
                try:
                    msg = await nc.request(subjects.SANDBOX_CAPABILITIES, b"", timeout=1)
                    report: dict[str, object] = msgpack.unpackb(msg.data, raw=False)
                    return report
                except (NoRespondersError, TimeoutError):
                    await asyncio.sleep(0.1)
    finally:
        await nc.close()


async def bench(
    nats_url: str, seed_file: Callable[[str], Path], calls: int, warmup: int
) -> list[float]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("contracts", "services", ".")),
        "NATS_URL": nats_url,
        "O_LOG_LEVEL": "WARNING",
        # Each side as deployed: the sandbox's and the executor's own NATS identities.
        NKEY_ENV: str(seed_file("tool_sandbox")),
    }
    sandbox = await asyncio.create_subprocess_exec(sys.executable, "-m", "o_tool_sandbox", env=env)
    executor = Identity.from_file("executor", seed_file("executor"))
    eventlog = await EventLog.connect(nats_url, name="bench-executor", identity=executor)
    try:
        report = await wait_for_sandbox(
            nats_url, Identity.from_file("gateway", seed_file("gateway"))
        )
        print(
            f"sandbox isolation: {report['network']}; pid namespace {report['pid_namespace']}; "
            f"{report['user']}; {report['filesystem']}"
        )
        agent = AgentConfig(new_id("agent"), "bench", None, "letta_v1_agent", {})
        tool = UserTool(
            id=new_id("tool"),
            name="add",
            source_code=TRIVIAL,
            json_schema={},
            return_char_limit=1000,
            idempotent=True,
        )
        timings: list[float] = []
        for i in range(warmup + calls):
            run_id = new_id("run")
            cause = Envelope.wrap(
                StartRun(
                    run_id=run_id,
                    agent_id=agent.id,
                    messages=[ChatMessage(id=new_id("message"), role="user", content="add")],
                ),
                aggregate_id=agent.id,
                producer="bench",
            )
            started = time.perf_counter()
            result = await run_user_tool(
                eventlog,
                cause,
                agent=agent,
                tool=tool,
                run_id=run_id,
                tool_call_id=f"call_{i}",
                arguments={"a": i, "b": 1},
                producer="bench",
                timeout=30.0,
            )
            elapsed = (time.perf_counter() - started) * 1000
            if result["status"] != "success" or result["tool_return"] != str(i + 1):
                raise SystemExit(f"call {i} failed: {result}")
            if i >= warmup:
                timings.append(elapsed)
        return timings
    finally:
        await eventlog.close()
        sandbox.terminate()
        await sandbox.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    with start_servers(Path(tempfile.mkdtemp(prefix="o-bench-")), need_pg=False) as servers:
        assert servers.nats is not None
        timings = asyncio.run(
            bench(servers.nats.url, servers.nats.seed_file, args.calls, args.warmup)
        )
    timings.sort()
    p99 = timings[min(len(timings) - 1, int(len(timings) * 0.99))]
    print(
        f"sandbox round trip, {len(timings)} sequential calls of a trivial tool: "
        f"p50 {statistics.median(timings):.1f} ms, p99 {p99:.1f} ms, "
        f"min {timings[0]:.1f} ms, max {timings[-1]:.1f} ms"
    )


if __name__ == "__main__":
    main()
