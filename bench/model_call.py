"""CPU per streamed model call in one process: litellm as a naive bot calls it, against the
gateway's backend, rounds alternated so both meet the same machine.

The fake model server runs in its own process (20 tokens, no delays by default), so
what is measured is this process's own work: CPU time (getrusage, this process's
threads included) over `--calls` calls, one at a time, per round.

- naive: `litellm.acompletion(stream=True)` iterated to its end, as bench/naive_bot.py.
- gateway: `LitellmBackend.stream` (the model process's call), its usage asked for.
- gateway, litellm's iterator: the same, with each chunk read as litellm reads its
  provider stream left alone (`_one_iterator` off), to show what that costs.

    python bench/model_call.py [--calls 40] [--rounds 5] [--tokens 20]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
from collections.abc import Awaitable, Callable

import common

from gateway.models import litellm_backend
from gateway.models.litellm_backend import LitellmBackend, load_litellm
from gateway.models.types import ModelCall, ModelSettings, Usage

MODEL = "openai/fake-model"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def naive(api_base: str) -> None:
    response = await load_litellm().acompletion(
        model=MODEL,
        messages=MESSAGES,
        stream=True,
        api_base=api_base,
        api_key="sk-bench",
        timeout=60.0,
    )
    async for _ in response:
        pass


def gateway(backend: LitellmBackend) -> Callable[[], Awaitable[None]]:
    async def call() -> None:
        async for _ in backend.stream(ModelCall(MODEL, MESSAGES, timeout=60.0), Usage()):
            pass

    return call


async def amain(args: argparse.Namespace) -> None:
    words = " ".join(f"word{i}" for i in range(args.tokens))
    fake = common.RemoteFake("--reply", words)
    try:
        backend = LitellmBackend(ModelSettings(api_base=fake.api_base, api_key="sk-bench"))
        await backend.start()
        steady = litellm_backend._one_iterator

        async def bare() -> None:
            litellm_backend._one_iterator = lambda wrapper: wrapper  # type: ignore[assignment]
            try:
                await gateway(backend)()
            finally:
                litellm_backend._one_iterator = steady

        kinds: dict[str, Callable[[], Awaitable[None]]] = {
            "naive": lambda: naive(fake.api_base),
            "gateway": gateway(backend),
            "gateway, litellm's iterator": bare,
        }
        for call in kinds.values():  # warm: the first calls load what litellm leaves for later
            for _ in range(5):
                await call()
        spent: dict[str, list[float]] = {name: [] for name in kinds}
        for _ in range(args.rounds):
            for name, call in kinds.items():
                start = cpu()
                for _ in range(args.calls):
                    await call()
                spent[name].append((cpu() - start) / args.calls * 1000)
        base = statistics.median(spent["naive"])
        print(f"CPU per streamed call of {args.tokens} tokens, median of {args.rounds} rounds:")
        for name, values in spent.items():
            median = statistics.median(values)
            print(f"  {name:<30} {median:6.2f} ms   {median / base:5.2f}x naive")
    finally:
        fake.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=20)
    asyncio.run(amain(parser.parse_args()))


if __name__ == "__main__":
    main()
