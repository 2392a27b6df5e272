"""What ideal clients reach on ``rollout_bench.py``'s faulty-server runs (a simulation).

    python3 benchmarks/fault_floor.py            # the bench's defaults: 8192 episodes, ...

The bench's fake server answers every request after the same latency (1 s), and 10% of
requests fail: a 500 or a dropped connection after the full latency, or a hang. A client
learns of a failure only when the attempt ends, so each failure holds its slot for a whole
latency, and with every slot busy nothing can be sent early. This simulates clients far
better than any real one on that server (retrying at once, a hang detected after exactly
one latency, no CPU cost) and prints the whole run's throughput against the *ideal*
fault-free run's (episodes / concurrency latencies; the bench's measured fault-free run is
slower, about 90% of that, from CPU), median over seeds:

- ``retry``: a failed attempt is sent again at once;
- ``retry + copies``: also, once no new episode is left to start, a retry goes out in as
  many copies as there are free slots (the first success wins);
- ``retry, hang + 0.5 s``: like ``retry``, with a hang noticed half a latency late (the
  bench's hedge fires at 1.5 x the usual latency);
- ``fill idle room``: what ``OpenAIPolicy``'s tail copies (``Hedge.tail``) do: once no new
  episode is left to start, every free slot gets a copy of a request in flight (fewest
  copies first, at most ``--tail`` copies of one attempt in all); a request fails only when
  all its copies have; a hang is noticed half a latency late, as with the bench's hedge.

Because every attempt takes the same time, the run moves in waves of one latency: the
fault-free run is 16 waves, and with 10% of attempts failing the last successes land in
wave 19 or 20 (16/19 = 0.84, 16/20 = 0.80).
"""

from __future__ import annotations

import argparse
import heapq
import random
import statistics
from typing import Any


def simulate(
    seed: int,
    *,
    episodes: int,
    slots: int,
    fault: float,
    latency: float = 1.0,
    hang_late_s: float = 0.0,
    copies: bool = False,
) -> float:
    """The whole run's throughput as a share of the fault-free run's."""
    rng = random.Random(seed)
    events: list[tuple[float, int, bool]] = []
    started = 0

    def launch(at: float, n: int) -> None:
        # n copies of one attempt: it fails only if every copy fails
        failed = all(rng.random() < fault for _ in range(n))
        late = hang_late_s if failed and rng.random() < 1 / 3 else 0.0
        heapq.heappush(events, (at + latency + late, started, not failed))

    for _ in range(min(slots, episodes)):
        launch(0.0, 1)
        started += 1
    end = 0.0
    while events:
        t, _, ok = heapq.heappop(events)
        if not ok:
            spare = slots - len(events) - 1 if copies and started >= episodes else 0
            launch(t, 1 + max(0, spare))
            continue
        end = t
        if started < episodes:
            launch(t, 1)
            started += 1
    return (episodes / slots * latency) / end


def simulate_fill(
    seed: int,
    *,
    episodes: int,
    slots: int,
    fault: float,
    latency: float = 1.0,
    hang_late_s: float = 0.5,
    tail: int = 4,
) -> float:
    """Like ``simulate``, with idle slots at the end filled with copies of live requests."""
    rng = random.Random(seed)
    events: list[tuple[float, int, int, bool]] = []
    live: dict[int, int] = {}  # request -> copies in flight
    sent: dict[int, int] = {}  # request -> copies sent for its current attempt
    done: set[int] = set()
    order = 0
    wire, started, end = 0, 0, 0.0

    def copy(req: int, at: float) -> None:
        nonlocal order, wire
        failed = rng.random() < fault
        late = hang_late_s if failed and rng.random() < 1 / 3 else 0.0
        heapq.heappush(events, (at + latency + late, order, req, not failed))
        order += 1
        live[req] = live.get(req, 0) + 1
        sent[req] = sent.get(req, 0) + 1
        wire += 1

    def fill(at: float) -> None:
        room = slots - wire
        if started < episodes or room <= 0:
            return
        todo = sorted((r for r, n in live.items() if n and sent[r] < tail), key=sent.get)
        while room > 0 and todo:
            more = []
            for req in todo[:room]:
                copy(req, at)
                room -= 1
                if sent[req] < tail:
                    more.append(req)
            todo = more

    for _ in range(min(slots, episodes)):
        copy(started, 0.0)
        started += 1
    while events:
        t, _, req, ok = heapq.heappop(events)
        if req in done:
            continue  # a cancelled copy: its slot was freed when the request was answered
        live[req] -= 1
        wire -= 1
        if ok:
            done.add(req)
            wire -= live.pop(req)
            end = t
            if started < episodes:
                copy(started, t)
                started += 1
        elif live[req] == 0:  # every copy failed: retry at once
            sent[req] = 0
            copy(req, t)
        fill(t)
    return (episodes / slots * latency) / end


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=8192)
    ap.add_argument("--concurrency", type=int, default=512)
    ap.add_argument("--fault-rate", type=float, default=0.10)
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--tail", type=int, default=4, help="fill: most copies of one attempt")
    a = ap.parse_args()
    models: dict[str, dict[str, Any]] = {
        "retry": {},
        "retry + copies": {"copies": True},
        "retry, hang + 0.5 s": {"hang_late_s": 0.5},
    }
    print(f"{a.episodes} episodes, {a.concurrency} in flight, {a.fault_rate:.0%} faults")
    for name, kw in models.items():
        runs = [
            simulate(s, episodes=a.episodes, slots=a.concurrency, fault=a.fault_rate, **kw)
            for s in range(a.seeds)
        ]
        print(
            f"{name:22s} median {statistics.median(runs):.3f} of fault-free "
            f"(min {min(runs):.3f}, max {max(runs):.3f})"
        )
    runs = [
        simulate_fill(s, episodes=a.episodes, slots=a.concurrency, fault=a.fault_rate, tail=a.tail)
        for s in range(a.seeds)
    ]
    print(
        f"{'fill idle room':22s} median {statistics.median(runs):.3f} of fault-free "
        f"(min {min(runs):.3f}, max {max(runs):.3f})"
    )


if __name__ == "__main__":
    main()
