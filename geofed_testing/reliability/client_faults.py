"""Client-side faults (paper §III-B4: preempted GPUs): a client process SIGKILLed mid-push, mid-stream,
mid-checkpoint, and every client gone at once. The PS must not notice beyond a closed stream: nothing
partial is applied, the relaunched client rejoins with its persisted rejoin token and the federation
resumes; the model is checked against an independent recomputation from the deltas the clients sent.
"""

from __future__ import annotations

import time
from pathlib import Path

from client_agent.training.checkpoint import load_checkpoint
from geofed_apps.launch import wait_until
from geofed_apps.wan import LinkProfile, WanProxy
from geofed_testing.procs import Reaper

from .scenario import Federation, ScenarioFailed, ScenarioResult, new_client

NUMEL = 200_000  # 800 kB of fp32 per delta: 3.2 s on the capped link, so a kill lands well inside it
LINK_BPS = 250_000
# Several clients: a site that has finished its rounds stops holding the others' round share three of its
# heartbeats after its last call (ps_server.core.present_for_s), 9 s here rather than 45 s at the default TTL,
# and a client whose delta that share put off tries again every few seconds rather than every 30 s.
SESSION_TTL_S = 9.0
RETRY_DEFERRED_S = 3.0


def _proxy(reaper: Reaper, fed: Federation, profile: LinkProfile) -> WanProxy:
    proxy = WanProxy("127.0.0.1", fed.ps.port, profile)
    proxy.start()
    reaper.add(proxy.stop)
    return proxy


def _push_events(fed: Federation, client_id: str) -> int:
    return fed.ps.logs().count(f"event=push client={client_id} ")


def client_killed_mid_push(workdir: Path, reaper: Reaper) -> ScenarioResult:
    """SIGKILL while a delta is a third uploaded through a 1 MB/s link; relaunch; nothing partial lands."""
    res = ScenarioResult("client SIGKILL mid-push", "SIGKILL of the client process and a reset of its link "
                         "(a preempted host: bytes in flight are gone) while its 800 kB delta was ~1/4 uploaded "
                         "(250 kB/s link)")
    fed = Federation.start(workdir, reaper, NUMEL)
    proxy = _proxy(reaper, fed, LinkProfile(up_bytes_per_s=LINK_BPS))
    c = new_client(fed, reaper, workdir, "push.c0", f"127.0.0.1:{proxy.port}", rounds=2).start()
    c.wait_event(lambda e: e["event"] == "push_begin" and e["seq"] == 1, 60, "second push begins")
    up0 = proxy.stats.bytes_up
    wait_until(lambda: proxy.stats.bytes_up - up0 > NUMEL, 30, "a quarter of the push uploaded", period=0.002)
    # A SIGKILLed process's kernel still flushes what it already wrote; a preempted host's does not.
    t_kill = c.kill()
    proxy.trigger_reset()
    res.check(not [e for e in c.events("receipt") if e["seq"] == 1] and proxy.stats.bytes_up - up0 < 4 * NUMEL,
              "kill landed mid-upload (no receipt, < 800 kB through the link)", proxy.stats.bytes_up - up0)
    time.sleep(1.0)  # let the PS see the broken stream
    res.check(_push_events(fed, "push.c0") == 1, "the cut push was not folded in (PS logged only round 0)",
              _push_events(fed, "push.c0"))
    c.start()
    first = c.wait_event(lambda e: e["event"] == "receipt" and e["mono"] > t_kill, 60, "relaunched push")
    res.resume_s = first["mono"] - t_kill
    c.wait_exit(60)
    starts = c.events("start")
    res.check(starts[-1]["resumed"] and starts[-1]["seq"] == 1, "relaunch resumed from its checkpoint (round 1)",
              starts)
    fed.ledger(c.attempted(), c.receipted(), res)
    res.outcome = f"partial upload discarded; relaunched client rejoined and finished; v{res.details['version']}"
    return res


def client_killed_mid_stream(workdir: Path, reaper: Reaper) -> ScenarioResult:
    """SIGKILL while the global model is a third downloaded; the PS releases the stream; relaunch resumes."""
    res = ScenarioResult("client SIGKILL mid-stream", "SIGKILL of the client process and a reset of its link "
                         "while the 800 kB global model was ~1/4 downloaded (250 kB/s link)")
    fed = Federation.start(workdir, reaper, NUMEL, extra=["--chunk-bytes", "65536"])
    proxy = _proxy(reaper, fed, LinkProfile(down_bytes_per_s=LINK_BPS))
    c = new_client(fed, reaper, workdir, "stream.c0", f"127.0.0.1:{proxy.port}", rounds=1).start()
    wait_until(lambda: proxy.stats.bytes_down > NUMEL, 60, "a quarter of the model downloaded", period=0.002)
    res.check(not c.events("model"), "kill lands before the model is complete")
    t_kill = c.kill()
    proxy.trigger_reset()
    wait_until(lambda: fed.ps.status()["connected_clients"] == 0, 20, "PS releasing the dead stream")
    res.check(True, "PS released the dead client's stream (connected_clients back to 0)")
    c.start()
    first = c.wait_event(lambda e: e["event"] == "receipt" and e["mono"] > t_kill, 60, "relaunched push")
    res.resume_s = first["mono"] - t_kill
    c.wait_exit(60)
    fed.ledger(c.attempted(), c.receipted(), res)
    res.outcome = f"stream released; relaunched client downloaded the model and pushed; v{res.details['version']}"
    return res


def client_killed_mid_checkpoint(workdir: Path, reaper: Reaper) -> ScenarioResult:
    """SIGKILL while `latest.pt` is being written: the previous checkpoint survives and the client resumes."""
    res = ScenarioResult("client SIGKILL mid-checkpoint", "SIGKILL of the client process while its 64 MB "
                         "checkpoint temp file was being written")
    fed = Federation.start(workdir, reaper, NUMEL)
    c = new_client(fed, reaper, workdir, "ckpt.c0", rounds=3, ballast_floats=16 << 20)
    ckpt_dir = c.state / "checkpoints"
    c.start()
    c.wait_event(lambda e: e["event"] == "checkpoint_done" and e["seq"] == 1, 60, "first checkpoint")

    def writing() -> bool:
        return any(p.name.startswith(".latest.pt.") for p in ckpt_dir.iterdir())

    c.wait_event(lambda e: e["event"] == "checkpoint_begin" and e["seq"] == 2, 60, "second checkpoint begins")
    wait_until(writing, 30, "the checkpoint temp file", period=0.001)
    t_kill = c.kill()
    res.check(not c.events("checkpoint_done")[1:], "kill landed before the second checkpoint completed")
    orphans = sorted(p.name for p in ckpt_dir.iterdir() if p.name.endswith(".tmp"))
    res.details["temp_files_after_kill"] = orphans
    survivor = load_checkpoint(ckpt_dir / "latest.pt")  # read-only: the relaunch itself must clean up
    res.check(survivor is not None and survivor.step == 1, "previous checkpoint intact and loadable (round 1)",
              survivor and survivor.step)
    c.start()
    first = c.wait_event(lambda e: e["event"] == "receipt" and e["mono"] > t_kill, 60, "relaunched push")
    res.resume_s = first["mono"] - t_kill
    c.wait_exit(60)
    res.details["temp_files_after_relaunch"] = sorted(p.name for p in ckpt_dir.iterdir() if p.name.endswith(".tmp"))
    fed.ledger(c.attempted(), c.receipted(), res)
    res.outcome = (f"old checkpoint intact, client resumed from round 1; v{res.details['version']}; "
                   f"{len(res.details['temp_files_after_relaunch'])} orphaned temp file(s) left")
    return res


def all_clients_gone(workdir: Path, reaper: Reaper, n: int = 4) -> ScenarioResult:
    """Every client SIGKILLed at once, PS alone; all relaunched: they rejoin and the versions move on."""
    res = ScenarioResult("all clients gone and back", f"SIGKILL of all {n} client processes at the same instant")
    fed = Federation.start(workdir, reaper, NUMEL // 4, extra=["--session-ttl-s", str(SESSION_TTL_S)])
    go = workdir / "all.go"  # every client starts its rounds once all have joined: none is done before the kill
    clients = [new_client(fed, reaper, workdir, f"all.c{i}", rounds=6, pause_s=0.2, deferred_wait_s=RETRY_DEFERRED_S,
                          start_file=go).start() for i in range(n)]
    for c in clients:
        c.wait_event(lambda e: e["event"] == "joined", 60, "joined")
    go.touch()
    for c in clients:
        c.wait_event(lambda e: e["event"] == "receipt" and e["seq"] == 1, 60, "two acknowledged pushes")
    t_kill = time.monotonic()
    for c in clients:
        c.kill()
    version_at_kill = fed.ps.status()["version"]
    wait_until(lambda: fed.ps.status()["connected_clients"] == 0, 20, "PS noticing every stream closed")
    res.check(fed.ps.alive(), "PS alone keeps running and answering")
    for c in clients:
        c.start()
    firsts = [c.wait_event(lambda e: e["event"] == "receipt" and e["mono"] > t_kill, 60, "push after relaunch")
              for c in clients]
    res.resume_s = min(f["mono"] for f in firsts) - t_kill
    res.details["all_back_s"] = max(f["mono"] for f in firsts) - t_kill
    for c in clients:
        c.wait_exit(90)
    attempted = set().union(*(c.attempted() for c in clients))
    receipted = set().union(*(c.receipted() for c in clients))
    version, _ = fed.ledger(attempted, receipted, res)
    res.check(version > version_at_kill, "the federation moved past the version at the outage")
    res.outcome = (f"PS kept serving alone; all {n} rejoined (last after {res.details['all_back_s']:.1f} s); "
                   f"v{version_at_kill} -> v{version}")
    return res


SCENARIOS = {
    "client_mid_push": client_killed_mid_push,
    "client_mid_stream": client_killed_mid_stream,
    "client_mid_checkpoint": client_killed_mid_checkpoint,
    "all_clients_gone": all_clients_gone,
}

__all__ = ["SCENARIOS", "ScenarioFailed"]
