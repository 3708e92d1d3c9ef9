#!/usr/bin/env python3
"""The shipped alert rules and dashboard against the code and against Prometheus itself.

1. `promtool check rules` and `promtool test rules` (every alert with input series).
2. Every dashboard query is PromQL Prometheus parses (each becomes a recording rule that
   promtool checks, Grafana's variables replaced).
3. Every metric name a rule or a panel uses is one the code exports: a family written with
   PrometheusText::family (plus _bucket, _sum and _count of histograms and summaries).
Usage: check_monitoring.py SOURCE_DIR
"""
import json
import pathlib
import re
import subprocess
import sys
import tempfile

import yaml

source = pathlib.Path(sys.argv[1]).resolve()
monitoring = source / "monitoring"
rules_file = monitoring / "garm-edge.rules.yml"
dashboard_file = monitoring / "garm-edge-fleet.dashboard.json"
failures = []


def run(*command):
    result = subprocess.run(command, capture_output=True, text=True, cwd=monitoring)
    print(result.stdout + result.stderr, end="")
    if result.returncode != 0:
        failures.append(" ".join(command))


run("promtool", "check", "rules", str(rules_file))
run("promtool", "test", "rules", str(monitoring / "garm-edge.rules.test.yml"))

rules = yaml.safe_load(rules_file.read_text())
rule_exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
dashboard = json.loads(dashboard_file.read_text())
panel_exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
variable_queries = [v["definition"] for v in dashboard["templating"]["list"] if v["type"] == "query"]


def grafana_free(expr):
    return (expr.replace("$__rate_interval", "5m").replace("$__range", "1h")
            .replace('"$agent"', '".*"').replace('"$pool"', '".*"'))


with tempfile.TemporaryDirectory() as scratch:
    as_rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:panel_{i}", "expr": grafana_free(expr)}
        for i, expr in enumerate(panel_exprs)]}]}
    path = pathlib.Path(scratch) / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump(as_rules))
    print("dashboard queries:", end=" ")
    run("promtool", "check", "rules", str(path))

exported = set()
family = re.compile(r'family\(\s*"(garm_edge_[a-z0-9_]+)",\s*"([a-z]+)"', re.S)
for folder in ("agent", "hub", "provider", "common"):
    for file in (source / folder).rglob("*.cpp"):
        for name, kind in family.findall(file.read_text()):
            exported.add(name)
            if kind in ("histogram", "summary"):
                exported.update({name + "_bucket", name + "_sum", name + "_count"})
print(f"{len(exported)} metric names exported by the code")

used_by = {}
metric = re.compile(r"\bgarm_edge_[a-z0-9_]+\b")
for where, exprs in (("rule", rule_exprs), ("panel", panel_exprs), ("variable", variable_queries)):
    for expr in exprs:
        for name in metric.findall(expr):
            used_by.setdefault(name, set()).add(where)
unknown = sorted(name for name in used_by if name not in exported)
for name in unknown:
    print(f"{name}: used by a {', '.join(sorted(used_by[name]))} but no code exports it")
if unknown:
    failures.append("metric names")
print(f"{len(used_by)} metric names used by rules and panels, {len(unknown)} unknown")

if failures:
    print("FAILED:", ", ".join(failures))
    sys.exit(1)
print("monitoring: ok")
