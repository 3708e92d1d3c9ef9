"""The hub tier's phase of issue 53: two hubs on one PostgreSQL database and three NAT'd agents
(docs/fleet.md, "Running more than one hub"). Either hub killed with kill -9 in the middle of 32
creates, a token used at one hub refused at the other, a removal at one hub closing the host's
tunnels at the other, the database restarted under both, and a hub's state directory wiped.
"""
import base64
import concurrent.futures
import json
import os
import shutil
import signal
import time

from hub_tier_lib import (
    EdgeAgent,
    Failure,
    Hub,
    PG_BIN,
    POOL_AMD,
    Postgres,
    Provider,
    check,
    enrolled_names,
    figures,
    log,
    wait_for,
)

AGENTS = ("b1", "b2", "b3")
BURST = 32


def encode_token(fields):
    return "gejoin1." + base64.b64encode(json.dumps(fields).encode()).decode()


def decode_token(token):
    return json.loads(base64.b64decode(token[len("gejoin1."):]))


def connected_everywhere(hubs, names):
    return all(hub.connected(name) for hub in hubs for name in names)


def a_token_used_at_one_hub_is_refused_at_the_other(hub_a, hub_b, work):
    token = hub_a.token()  # one use
    at_b = encode_token(dict(decode_token(token), u=hub_b.url))
    first, second = EdgeAgent(work, "x1", "amd64"), EdgeAgent(work, "x2", "amd64")
    joined = first.join(token)
    check(joined.returncode == 0, "a one-use token enrols a host at hub A: " + joined.stderr[-160:])
    refused = second.join(at_b)
    check(refused.returncode == 1 and "used up" in refused.stderr,
          "the same token at hub B is refused, used up: " + refused.stderr.strip()[-160:])
    check(hub_a.cli("remove", "x1").returncode == 0, "the host enrolled for it is removed")


def timed_create(provider, name):
    started = time.time()
    result = provider.create(name)
    result.started, result.ended = started, time.time()
    return result


def burst_with_a_hub_killed(provider, victim, survivor, label):
    """32 creates 8 at a time; `victim` is killed once 8 are in; garm's retry for each failed
    one (delete, create again) must succeed through `survivor`."""
    names = ["garm-%s-%02d" % (label, index) for index in range(BURST)]
    results, killed_at = {}, None
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = {pool.submit(timed_create, provider, name): name for name in names}
        for done in concurrent.futures.as_completed(futures):
            results[futures[done]] = done.result()
            if len(results) == 8:
                victim.process.stop(signal.SIGKILL)
                killed_at = time.time()
    failed = sorted(name for name, result in results.items() if result.returncode != 0)
    check(all(result.returncode in (0, 1) for result in results.values()),
          "%s: every create ends with 0 or 1 (garm retries 1)" % label)
    served_after = [r.ended for r in results.values() if r.started >= killed_at and r.returncode == 0]
    check(served_after, "%s: creates begun after the kill are served by the other hub" % label)
    figures.append(("%s: hub killed, first create begun after it served by the other" % label,
                    min(served_after) - killed_at))
    log("%s: %d of %d creates failed with the hub killed: %s"
        % (label, len(failed), BURST, {n: results[n].stderr.strip()[-120:] for n in failed[:3]}))
    for name in failed:  # as garm does: delete the failed instance, create it again
        check(provider.call("DeleteInstance", instance=name).returncode == 0,
              "%s: garm's delete of failed %s" % (label, name))
        retried = provider.create(name)
        check(retried.returncode == 0, "%s: garm's retry of %s through the other hub: %s"
              % (label, name, retried.stderr.strip()[-200:]))
    listed = provider.instances()
    check(sorted(listed) == names,
          "%s: the list shows every instance once, no more: %d listed" % (label, len(listed)))
    restarted = time.time()
    victim.start()
    wait_for("every agent back at the restarted hub",
             lambda: all(victim.connected(name) for name in AGENTS), 20, 0.05)
    figures.append(("%s: every agent back at the restarted hub" % label, time.time() - restarted))
    removed = provider.call("RemoveAllInstances")
    check(removed.returncode == 0 and provider.instances() == {},
          "%s: RemoveAllInstances leaves nothing" % label)


def a_removal_at_one_hub_closes_tunnels_at_the_other(hub_a, hub_b, agent):
    refusals = agent.log_text().count("refused a tunnel")
    check(hub_b.cli("remove", agent.name).returncode == 0, "%s removed at hub B" % agent.name)
    removed_at = time.time()  # once the command returned: the CLI's own start is not counted
    wait_for("%s's tunnels at hub A closed" % agent.name,
             lambda: not hub_a.connected(agent.name), 10, 0.02)
    figures.append(("removed at hub B, cut off at hub A", time.time() - removed_at))
    check(time.time() - removed_at < 2.0, "a removal at hub B cuts the host off at hub A within 2 s")
    # Hub B made the change, and reads it back at its own next tick, as hub A does.
    wait_for("%s's tunnels at hub B closed" % agent.name,
             lambda: not hub_b.connected(agent.name), 10, 0.02)
    figures.append(("removed at hub B, cut off at hub B", time.time() - removed_at))
    check(time.time() - removed_at < 2.0, "and at hub B, where it was removed, within 2 s")
    wait_for("%s refused when it dials again" % agent.name,
             lambda: agent.log_text().count("refused a tunnel") > refusals, 15, 0.1)
    check(not hub_a.connected(agent.name) and not hub_b.connected(agent.name),
          "neither hub takes the removed host's tunnels again")
    agent.stop()


def both_hubs_survive_a_database_restart(postgres, hubs, provider, agents):
    logs = [os.path.join(hub.dir, "hub.log") for hub in hubs]
    before = [open(path).read().count("can be read again") for path in logs]
    postgres.stop()
    down = time.time()
    listed = provider.call("ListInstances", pool=POOL_AMD)
    check(listed.returncode == 0, "with the database down, both hubs still relay garm's commands")
    time.sleep(1)
    postgres.start()
    wait_for("both hubs reading their records again", lambda: all(
        open(path).read().count("can be read again") > count
        for path, count in zip(logs, before)), 15, 0.1)
    figures.append(("database down 1 s, both hubs reading again", time.time() - down))
    check(connected_everywhere(hubs, [a.name for a in agents]),
          "no agent lost a tunnel to either hub meanwhile")
    # Nothing that was valid is refused: an agent restarted dials both hubs afresh.
    agents[0].stop()
    agents[0].start()
    wait_for("the restarted agent accepted by both hubs",
             lambda: connected_everywhere(hubs, [agents[0].name]), 15, 0.05)
    created = provider.create("garm-after-db-restart")
    check(created.returncode == 0, "a create after the database restart: "
          + created.stderr.strip()[-200:])
    check(provider.call("DeleteInstance", instance="garm-after-db-restart").returncode == 0,
          "its delete")


def a_wiped_hub_serves_again_from_the_database(hub_b, hub_a, agents):
    hub_b.process.stop()
    shutil.rmtree(hub_b.state)
    hub_b.make_state()  # the operator's copy of pki/ again: the CA, the hub's certificate
    started = time.time()
    hub_b.start()
    wait_for("the agents back at the wiped hub",
             lambda: all(hub_b.connected(a.name) for a in agents), 20, 0.05)
    figures.append(("wiped hub serving its agents again", time.time() - started))
    check(enrolled_names(hub_b) == enrolled_names(hub_a),
          "the wiped hub lists the same hosts, read from the database")


def two_hubs_on_postgres(network, work):
    if not os.path.exists(PG_BIN + "/initdb"):
        raise Failure("PostgreSQL 15's server binaries are missing (scripts/install-deps.sh)")
    postgres = Postgres()
    hubs, agents = [], []
    try:
        database = postgres.hub_database(work)
        hub_a = Hub(work, "hub-a", database=database)
        hub_b = Hub(work, "hub-b", pki_from=hub_a, database=database)
        hubs = [hub_a, hub_b]
        for hub in hubs:
            hub.start()
        # Each hub reads the others' announcements every 2 s: a host joining after that learns
        # both from its enrolment (later ones learn them with the CRL, every 15 s).
        time.sleep(2.5)
        token = hub_a.token("--uses", str(len(AGENTS)), "--label", "lab")
        for name in AGENTS:
            agent = EdgeAgent(work, name, "amd64", network.namespaces[name])
            joined = agent.join(token)
            check(joined.returncode == 0, "%s joins hub A through NAT: %s"
                  % (name, joined.stderr.strip()[-160:]))
            agents.append(agent)
        started = time.time()
        for agent in agents:
            agent.start()
        # At the latest with the CRL (every 15 s), should hub A not have read B's yet.
        wait_for("b1-b3 connected to both hubs", lambda: connected_everywhere(hubs, AGENTS), 40,
                 0.05)
        figures.append(("three agents connected to both hubs", time.time() - started))
        listed = json.load(open(os.path.join(agents[0].state, "hub", "hubs.json")))["hubs"]
        check(sorted(listed) == sorted([hub_a.url, hub_b.url]),
              "the agent keeps the fleet's hubs as hub A gave them: %s" % listed)

        a_token_used_at_one_hub_is_refused_at_the_other(hub_a, hub_b, work)
        provider = Provider(work, hub_a, None, name="provider-two-hubs.toml", hubs=hubs)
        burst_with_a_hub_killed(provider, hub_a, hub_b, "hub-a-killed")
        burst_with_a_hub_killed(provider, hub_b, hub_a, "hub-b-killed")
        both_hubs_survive_a_database_restart(postgres, hubs, provider, agents)
        a_wiped_hub_serves_again_from_the_database(hub_b, hub_a, agents)
        a_removal_at_one_hub_closes_tunnels_at_the_other(hub_a, hub_b, agents[-1])
    except Exception:
        # This phase's own processes: the tier's failure report shows only its first hub's.
        for agent in agents:
            log("--- %s log tail:\n%s" % (agent.name, agent.log_text()[-2000:]))
        for hub in hubs:
            with open(os.path.join(hub.dir, "hub.log")) as f:
                log("--- %s log tail:\n%s" % (os.path.basename(hub.dir), f.read()[-2000:]))
        raise
    finally:
        for agent in agents:
            if agent.process:
                agent.stop()
        for hub in hubs:
            if hub.process:
                hub.process.stop()
        postgres.remove()
